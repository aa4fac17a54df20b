"""Moves of cache slots inside the layer-stacked storage (Spec §4.5).

:func:`realign` is the realignment of Spec §4.5, EQSPEC's move after every
round: an in-place shift of each staying row by ``δ_i``. :func:`crop_to`
drops trailing slots (a round in which nothing moves, and the baselines).
:func:`take_slots` is a general gather for any slot map, which EQSPEC does
not use: the fault catalogue and the baselines move slots with it where
the paper's rule would not.

These work on the :class:`~.storage.Store` alone: transformers' cache
classes are imported by :mod:`.storage` and its model-call API is touched by
:mod:`.model_call`, never here.
"""

from __future__ import annotations

import torch

from .storage import StackedCache, cache_length

__all__ = ["crop_to", "realign", "take_slots"]


def crop_to(cache: StackedCache, length: int) -> None:
    """Drop trailing slots so that ``length`` remain (no-op if already that long)."""
    store, extra = cache.store, cache_length(cache) - length
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache_length(cache)} slots to {length}")
    if extra:
        store.set_length(length)
    store.spare = max(store.spare, store.appended)
    store.appended = 0


def realign(cache: StackedCache, rows: torch.Tensor, delta: torch.Tensor, new_pad: torch.Tensor,
            new_width: int) -> None:
    """Realign in place (Spec §4.5): kept row ``rows[b]`` becomes row ``b``, its
    content moved by ``δ_b`` so that it fills slots ``p'_b .. L' - 2``.

    ``rows``, ``delta`` (``δ_i``) and ``new_pad`` (``p'_i``) are ``[B']``;
    ``new_width`` is ``L'``, after which the cache holds ``T' = L' - 1``
    slots. Row ``b``'s ``n_b = T' - p'_b`` content slots come from old slots
    ``p'_b - δ_b ..`` of row ``rows[b]``: one copy per row that moves or
    changes index, all layers at once, and none for a row that stays put
    (``δ_b = 0``, ``rows[b] = b``), which is only cropped. Rows are taken in
    increasing order, so a row's source is never a row already overwritten.
    A row that moves within itself (source and target overlap) goes through
    the store's reusable one-row scratch; nothing else is allocated. Padding
    slots keep what the storage held there, finite and masked: I3 checks at
    every boundary that they are finite.
    """
    store, width = cache.store, new_width - 1  # T'
    store.spare = max(store.spare, store.appended)
    store.appended = 0
    if store.data is None:  # nothing was ever written
        return
    data = store.data  # [2·layers, B, H, capacity, D]
    for b, (row, d, q) in enumerate(zip(rows.tolist(), delta.tolist(), new_pad.tolist())):
        n, p = width - q, q - d  # content slots; their old start p_i
        if n <= 0 or (row == b and d == 0):
            continue
        source = data[:, row, :, p: p + n]  # [2·layers, H, n, D]
        if row == b:  # source and target overlap: go through the one-row scratch
            source = store.row_scratch()[:, :, :n].copy_(source)
        data[:, b, :, q: q + n] = source
    if store.rows != rows.numel():
        store.rows = rows.numel()
        store.refresh()
    store.set_length(width)


def take_slots(cache: StackedCache, rows: torch.Tensor, slots: torch.Tensor) -> None:
    """Gather cache entries: new ``[b, :, s]`` = old ``[rows[b], :, slots[b, s]]``.

    Not the realignment EQSPEC runs (that is :func:`realign`, in place): a
    gather for an arbitrary slot map, with which the fault catalogue and the
    baselines move slots where the paper's rule would not. One
    ``index_select`` over the layer-stacked tensor, whatever the layer count;
    its result *is* the new storage, with ``spare`` slots after the ``T'``
    taken ones (copies of slot 0, finite, never attended before they are
    written). ``rows``: ``[B']`` kept batch rows; ``slots``: ``[B', T']``.
    """
    store = cache.store
    if store.data is None:
        return
    layers2, _, heads, capacity, dim = store.data.shape
    store.spare = max(store.spare, store.appended)
    room = torch.cat([slots, slots.new_zeros((slots.shape[0], store.spare))], dim=1)  # [B', T' + spare]
    # flat index of source (row, head, slot) along the [B·H·capacity] axis: [B'·H·(T' + spare)]
    flat = (rows[:, None, None] * heads * capacity + torch.arange(heads, device=rows.device)[None, :, None]
            * capacity + room[:, None, :]).reshape(-1)
    taken = store.data.view(layers2, -1, dim).index_select(1, flat)  # [2·layers, B'·H·(T' + spare), D]
    store.data = taken.view(layers2, rows.numel(), heads, room.shape[1], dim)
    store.rows, store.appended = rows.numel(), 0
    store.refresh()
    store.set_length(slots.shape[1])
