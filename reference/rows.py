"""EXSPEC's per-row storage: one sequence's cache, unpadded (Spec §8.3).

:class:`Row` holds a pool member's cache between the batches it joins;
:func:`stack` builds a batch cache from rows and :func:`split` takes the
rows back out. Both work on the :class:`~.storage.Store`: transformers'
cache classes are imported by :mod:`.storage` and its model-call API is
touched by :mod:`.model_call`, never here.
"""

from __future__ import annotations

import torch

from . import storage
from .storage import StackedCache

__all__ = ["Row", "stack", "split"]


class Row:
    """One sequence's cache, unpadded: an EXSPEC member's (Spec §8.3).

    ``data`` ``[2·layers, 1, H, capacity, D]`` holds every layer's keys and
    values as a :class:`~.storage.Store` does, for one row, of which the first
    ``length`` slots are live (``data`` is None while nothing is cached).
    A Row never changes: :func:`split` gives the longer row as a new Row,
    which may share ``data``. It writes ``data`` only past this Row's
    ``length``, and only while no Row over ``data`` is longer (``tip``, the
    longest length written, shared by the Rows over one storage): so no
    reader of a Row, a pool snapshot's member included, ever sees its slots
    change, whatever is restored and run again (Spec §8.6).
    """

    __slots__ = ("data", "length", "tip")

    def __init__(self, data: torch.Tensor | None = None, length: int = 0, tip: list[int] | None = None):
        self.data, self.length = data, length
        self.tip = [length] if tip is None else tip

    def stacked(self) -> torch.Tensor | None:
        """Every layer's live slots, one view ``[2·layers, 1, H, length, D]``."""
        return self.data[:, :, :, : self.length] if self.length else None

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(keys, values)`` ``[1, H, length, D]``, views, as
        :func:`~.storage.layer_tensors` gives a batch's (``[]`` when empty)."""
        live = self.stacked()
        return [] if live is None else [(live[2 * i], live[2 * i + 1]) for i in range(live.shape[0] // 2)]

    def extensible(self, n: int) -> bool:
        """Whether :func:`split` may write slots ``length .. n - 1`` in place:
        nothing over this storage was written past ``length``, there is room,
        and the storage may be written here (an inference-mode tensor only
        inside inference mode)."""
        return (self.length > 0 and self.tip[0] == self.length and n <= self.data.shape[3]
                and _writable(self.data))


def _writable(t: torch.Tensor) -> bool:
    """Whether ``t`` may be written in place now (inference tensors refuse it outside inference mode)."""
    return not t.is_inference() or torch.is_inference_mode_enabled()


def _fits(cache: StackedCache | None, like: torch.Tensor, rows: int, capacity: int) -> bool:
    """Whether ``cache``'s storage can be written now and hold ``rows`` rows
    of ``capacity`` slots shaped as ``like`` ``[2·layers, 1, H, *, D]``."""
    data = cache.store.data if cache is not None else None
    return (data is not None and data.dtype == like.dtype and data.device == like.device
            and data.shape[1] >= rows and data.shape[3] >= capacity and _writable(data)
            and (data.shape[0], data.shape[2], data.shape[4]) == (like.shape[0], like.shape[2], like.shape[4]))


def stack(model, rows: list[Row], pad: list[int], reuse: StackedCache | None = None) -> StackedCache:
    """One batch cache from per-sequence rows (EXSPEC, Spec §8.3).

    Row ``b`` of the result is ``pad[b]`` padding slots, then ``rows[b]``'s
    slots; ``pad[b] = T - T_b``, so that every row ends at slot ``T`` (the
    only slots zeroed in reused storage are the padding). With every ``pad[b] = 0``
    (a same-length group) no slot moves; otherwise this is the fallback
    realignment. Either way it is one copy per row, all layers at once, into
    the layer-stacked storage: ``reuse``'s (the previous batch's cache, whose
    slots are then overwritten) when it is large enough, else a new one with
    room to grow. Padding slots are zeros, masked and finite (I3): in reused
    storage they are zeroed, since an earlier round may have left anything
    there, a non-finite rejected draft's key included.
    The result remembers where each row came from, for :func:`split`.
    """
    template = next((r.data for r in rows if r.length), None)
    if template is None:  # nothing cached in any row
        return storage.new_cache(model)
    width = max(p + r.length for p, r in zip(pad, rows))
    reused = _fits(reuse, template, len(rows), width + 16)
    if reused:
        cache = reuse
        cache.store.rows = len(rows)
    else:
        cache = storage.new_cache(model)
        cache.store.allocate(template[0], len(rows), width + max(width // 2, 16))  # zeros
    data = cache.store.data
    for b, (p, r) in enumerate(zip(pad, rows)):
        if r.length:
            data[:, b, :, p: p + r.length] = r.data[:, 0, :, : r.length]  # [2·layers, H, T_b, D]
        if reused and p:
            data[:, b, :, :p].zero_()
    cache.store.fill(width)
    cache.store.appended = 0
    cache.sources = [(r, p) for r, p in zip(rows, pad)]
    return cache


def split(cache: StackedCache, spans: list[tuple[int, int, int]]) -> list[Row]:
    """Per-sequence rows, one per span ``(row, start, stop)``: slots ``start
    .. stop-1`` of batch row ``row`` (EXSPEC, Spec §8.3).

    A span that is the slots a row was stacked from (:func:`stack`) plus the
    ones the round appended extends that Row when :meth:`Row.extensible`:
    only the new slots are copied, into its storage past its length (the old
    ones are taken as stacked, not read from the batch again). Any other
    span is copied whole into storage of its own with room to grow. A view
    of the *batch* is never returned: it would keep the whole batch's
    storage alive for as long as one sequence waits in the pool.
    """
    data, out = cache.store.data, []
    sources = cache.sources or []
    for row, start, stop in spans:
        n = stop - start
        source, offset = sources[row] if row < len(sources) else (None, None)
        if n <= 0:
            out.append(Row())
        elif source is not None and start == offset and source.length <= n and source.extensible(n):
            source.data[:, :, :, source.length: n] = data[:, row:row + 1, :, start + source.length: stop]
            source.tip[0] = n  # a second extension of this Row, or of a shorter one, now copies
            out.append(Row(source.data, n, source.tip))
        else:
            own = data.new_empty(data.shape[:1] + (1,) + data.shape[2:3] + (n + max(n // 2, 16),) + data.shape[4:])
            own[:, :, :, :n] = data[:, row:row + 1, :, start:stop]  # [2·layers, 1, H, T_b, D]
            out.append(Row(own, n))
    return out
