"""Per-row columns that a run of calls appends to, written once (Spec §3.12.1).

The correctness checker reads each call as ``[B, T + n]`` tensors whose first
``T`` columns are, most of the time, the previous call's (a call appends to
its cache). Concatenating them again at every call costs what the call
attends, not what it writes. :class:`Columns` keeps one buffer with spare
capacity and hands out views ``[:, :T + n]`` of it:

* a view, once handed out, is never written again (copy on write): the
  checker may keep it (a call's chains, the call log, pending labels) and
  read it later;
* an append whose prefix is the newest view handed out, whole, writes the
  new columns in place after it: no view covers them yet;
* any other prefix (a crop, a realignment, another batch) starts a new
  buffer holding a copy of it.

So a run of appends costs what the calls write; a crop or a realignment
costs one copy of what is kept.
"""

from __future__ import annotations

import torch

#: the spare columns of a new buffer: appends of a few columns at a time copy once every LEAST columns
LEAST = 64


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` are the same view of the same memory (shape, strides, start):
    equal without reading them. Only for views nothing writes into (:class:`Columns`')."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() \
        and a.dtype == b.dtype and a.device == b.device


class Columns:
    """One growing ``[B, W, ...]`` tensor, appended to in place when that is safe
    (see the module doc)."""

    def __init__(self):
        self._buffer: torch.Tensor | None = None
        self._width = 0  # columns of the buffer handed out so far
        self._view: torch.Tensor | None = None  # the newest view handed out
        self._kind: tuple | None = None  # the buffer's (capacity, rows, trailing shape, dtype, device)

    def append(self, prefix: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
        """``prefix`` ``[B, T, ...]`` (None: ``T = 0``) then ``new`` ``[B, n, ...]``, as a view
        ``[B, T + n, ...]``."""
        n = new.shape[1]
        buffer, t = self._grow(prefix, new.shape[0], n, new.shape[2:], new.dtype, new.device)
        buffer[:, t: t + n] = new
        return self._view

    def reserve(self, prefix: torch.Tensor | None, b: int, n: int, trailing: tuple, dtype, device) -> tuple:
        """``(view, slot)``: the view ``[B, T + n, ...]`` that :meth:`append` would return, and
        its last ``n`` columns ``[B, n, ...]``, not written yet: the caller writes them (an
        operation's ``out=``, one copy fewer) before anything reads the view."""
        buffer, t = self._grow(prefix, b, n, trailing, dtype, device)
        return self._view, buffer[:, t: t + n]

    def _grow(self, prefix: torch.Tensor | None, b: int, n: int, trailing: tuple, dtype, device) -> tuple:
        """``(buffer, T)``: the buffer whose first ``T`` columns hold ``prefix``, with room for
        ``n`` more; the newest view (``self._view``) is set to its first ``T + n``."""
        t = 0 if prefix is None else prefix.shape[1]
        buffer, kind = self._buffer, self._kind
        fits = buffer is not None and t == self._width and t + n <= kind[0] \
            and kind[1:] == (b, trailing, dtype, device)
        # the newest view itself (known by identity, or compared), whole: the new columns go after it
        if not (fits and (t == 0 or prefix is self._view or same_view(prefix, buffer[:, :t]))):
            buffer = torch.empty((b, t + n + LEAST, *trailing), dtype=dtype, device=device)
            if t:
                buffer[:, :t] = prefix
            self._buffer, self._kind = buffer, (t + n + LEAST, b, trailing, dtype, device)
        self._width = t + n
        self._view = buffer[:, : t + n]
        return buffer, t


def head(x: torch.Tensor, t: int) -> torch.Tensor:
    """``x[:, :t]``, or ``x`` itself when that is all of it (so that :meth:`Columns.append`
    knows its newest view without comparing)."""
    return x if x.shape[1] == t else x[:, :t]
