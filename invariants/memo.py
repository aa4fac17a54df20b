"""What the checker builds once and reads again: :class:`Memo` (Spec §3).

Whoever runs the checks owns one and passes it in: the driver one per
decode, a ``watch`` one per block, a trace one per recording. A predicate
called without one builds what it needs afresh, with the same result.

Nothing is keyed on a tensor's private version counter. Masks are found by
the values they are built from (the rows' ``p_i``, or the grid mask's own
contents, compared in full), fixed tensors by shape, dtype and device, and
a call's content index by the identity of the call, for one check only
(:meth:`Memo.forget_calls`): nothing writes into a call between the
predicates of one check.
"""

from __future__ import annotations

import torch

from ._util import on
from .ledger import direction
from .masks import causal
from .observation import ForwardCall

#: Masks are built this many slots wider than asked: a round's calls grow by a slot or two.
SPARE = 16


class Memo:
    """The checker's built-once values of one run (see the module doc). Every
    tensor it returns is shared: read it, never write into it."""

    def __init__(self) -> None:
        self._masks: dict = {}  # (p_i..., device, dtype) -> the widest compact mask built for them
        self._extended = None  # (a copy of the grid mask, need, device, dtype, the widest extension built)
        self._directions: dict = {}  # (heads, head_dim, dtype, device) -> direction [H, 1, D]
        self._causal: dict = {}  # device -> a causal square [S, S], sliced to [n, width]
        self._calls: dict = {}  # id(call) -> (call, its mask, T, fed, index), for this check's calls

    def compact_mask(self, pad: list[int], width: int, device, dtype=torch.bool) -> torch.Tensor:
        """``[B, width]``: row ``i`` is ``pad[i]`` zeros then ones (Spec §2.2).

        Kept by value, a few at a time: every step between two boundaries has
        the same ``p_i`` and widths that grow by a slot or two, so the mask is
        built once per round (wider than asked, then sliced)."""
        key = (tuple(pad), device, dtype)
        mask = self._masks.get(key)
        if mask is None or mask.shape[1] < width:
            if len(self._masks) >= 8:
                self._masks.clear()
            slots = torch.arange(width + SPARE, device=device)
            mask = self._masks[key] = (slots[None, :] >= torch.tensor(pad, device=device)[:, None]).to(dtype)
        return mask[:, :width]

    def extended_mask(self, grid: torch.Tensor, need: int, width: int, device, dtype) -> torch.Tensor:
        """``[B, width]``: the grid mask's first ``need`` slots, then ones: the mask a
        call over ``need`` committed slots and ``width - need`` newer ones must
        pass (Spec §3.4; ``grid`` has at least ``need`` slots), on the call's
        ``device``, in the wider of the grid's and the call's ``dtype`` (nothing
        is rounded).

        Kept while the grid mask holds the same values as the copy taken when
        it was built (one comparison, whatever wrote into the grid in
        between): built once per round, wider than asked, then sliced."""
        dtype = torch.promote_types(grid.dtype, dtype)
        held = self._extended
        if (held is None or held[1:4] != (need, device, dtype) or held[4].shape[1] < width
                or held[0].shape != grid.shape or held[0].device != grid.device or not torch.equal(held[0], grid)):
            ones = torch.ones((grid.shape[0], width - need + SPARE), dtype=dtype, device=device)
            held = self._extended = (grid.clone(), need, device, dtype,
                                     torch.cat((on(grid[:, :need], device).to(dtype), ones), 1))
        return held[4] if held[4].shape[1] == width else held[4][:, :width]

    def direction(self, keys: torch.Tensor) -> torch.Tensor:
        """:func:`~batchspec.invariants.ledger.direction` for ``keys``, built once per
        shape, dtype and device."""
        dtype = torch.float64 if keys.dtype == torch.float64 else torch.float32
        key = (keys.shape[1], keys.shape[3], dtype, keys.device)
        if key not in self._directions:
            self._directions[key] = direction(keys)
        return self._directions[key]

    def causal(self, n: int, width: int, device) -> torch.Tensor:
        """:func:`~batchspec.invariants.masks.causal` ``[n, width]``, a slice of one square
        kept per device (``S >= width``: input ``j`` sees slot ``s`` iff ``s - j <= width - n``,
        which is the square's ``s + S - width <= j + S - n``), grown by doubling."""
        held = self._causal.get(device)
        if held is None or held.shape[0] < width:
            size = max(2 * width, 64)
            held = self._causal[device] = causal(size, size, device)
        size = held.shape[0]
        return held[size - n:, size - width:]

    def content_positions(self, call: ForwardCall) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`ForwardCall.content_positions`, computed once per check: I2 and the
        ledger's fingerprints both read it."""
        held = self._calls.get(id(call))
        if held is None or held[0] is not call or held[1] is not call.attention_mask or held[2] != call.cache_length:
            held = self._calls[id(call)] = (call, call.attention_mask, call.cache_length, *call.content_positions())
        return held[3], held[4]

    def forget_calls(self) -> None:
        """End of a check: the calls it read are not read again."""
        self._calls.clear()
