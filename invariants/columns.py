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

    def append(self, prefix: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        """``prefix`` ``[B, T, ...]`` then ``new`` ``[B, n, ...]``, as a view ``[B, T + n, ...]``."""
        shape = new.shape
        t, n = prefix.shape[1], shape[1]
        buffer, kind = self._buffer, self._kind
        fits = buffer is not None and t == self._width and t + n <= kind[0] \
            and kind[1:] == (shape[0], shape[2:], new.dtype, new.device)
        # the newest view itself (known by identity, or compared), whole: the new columns go after it
        if not (fits and (prefix is self._view or t == 0 or same_view(prefix, buffer[:, :t]))):
            buffer = torch.empty((shape[0], t + n + LEAST, *shape[2:]), dtype=new.dtype, device=new.device)
            buffer[:, :t] = prefix
            self._buffer, self._kind = buffer, (t + n + LEAST, shape[0], shape[2:], new.dtype, new.device)
        buffer[:, t: t + n] = new
        self._width = t + n
        self._view = buffer[:, : t + n]
        return self._view


def head(x: torch.Tensor, t: int) -> torch.Tensor:
    """``x[:, :t]``, or ``x`` itself when that is all of it (so that :meth:`Columns.append`
    knows its newest view without comparing)."""
    return x if x.shape[1] == t else x[:, :t]
