"""I3 cache correspondence (Spec §3.3)."""

from __future__ import annotations

import torch

from ._util import reporter, where_wrong
from .observation import KVOracle, Observation
from .violation import Violation

#: Largest |cached - fresh| / (1 + |fresh|) accepted by the semantic mode, by
#: dtype. float64: a batched left-padded SDPA pass and a fresh batch-1 pass
#: differ by summation order only (~1e-15 relative); 1e-9 leaves six orders of
#: margin and still catches any wrong token or position (differences of order
#: 1e-1). Lower precisions are looser by their machine epsilon.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def cache_correspondence(obs: Observation, oracle: KVOracle | None = None) -> list[Violation]:
    """For each model's cache (Spec §3.3):

    * it holds one entry per row and is empty (nothing fed yet: a
      prefill that feeds nothing, Spec §4.1) or holds at least ``L - 1`` slots,
      exactly ``L - 1`` at a round boundary (only speculative slots may follow);
      the draft's may hold ``L - 2``, one slot short (the deferred catch-up,
      Spec §4.2.1), its next call feeding the slot it lacks;
    * at a boundary, every slot is finite (a NaN in a masked padding slot
      still poisons attention: 0 x NaN = NaN). Checked there only: what a
      round writes and keeps is in the cache at its boundary;
    * semantic mode (``oracle`` given): the slots ``< L - 1`` the grid mask
      attends (``p_i .. L-2`` in the compact layout) hold, within
      :data:`TOLERANCE`, the keys/values a fresh single-sequence forward of
      the row's committed tokens produces.
    """
    report = reporter(obs, "I3", "cache_correspondence")
    out: list[Violation] = []
    rows, need = obs.tokens.shape[0], obs.width - 1
    for model, view in obs.caches.items():
        if view.layers and view.layers[0][0].shape[0] != rows:
            out.append(report(None, rows, view.layers[0][0].shape[0], "cache batch size differs from B", model))
            continue
        if view.length == 0:  # nothing fed yet: nothing to correspond
            continue
        least = need - (model == "draft")  # the draft may lag one slot (Spec §4.2.1)
        if view.length < least or (obs.boundary and view.length not in (least, need)):
            expected = (need if least == need else f"{least} or {need}") if obs.boundary else f">= {least}"
            out.append(report(None, expected, view.length, "cache length is not L - 1", model))
            continue
        # At a boundary only: a non-finite value written mid-round either stays in the cache,
        # and this boundary sees it, or is cropped with the rejected slots it sat in.
        if obs.boundary and not finite(view.whole()):
            out.extend(_non_finite(view, model, report))
        if oracle is not None and not out:
            out.extend(_semantic(obs, model, view, oracle, report))
    return out


def finite(tensors) -> bool:
    """True when every tensor's float32-or-wider sum is finite: then every entry
    is finite (a NaN or an infinity propagates into its sum). A False is only
    a hint, checked entry by entry: a sum of finite entries may overflow."""
    sums = [t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32) for t in tensors]
    if len(sums) == 1:  # one stacked tensor: one sum, one answer
        return bool(sums[0].isfinite())
    if len({(s.dtype, s.device) for s in sums}) > 1:  # mixed dtypes, or layers spread over devices
        sums = [s.double().to(sums[0].device) for s in sums]
    return not sums or bool(torch.stack(sums).isfinite().all())


def _non_finite(view, model, report) -> list[Violation]:
    """The first non-finite slot of each row, per layer (none when only a sum overflowed)."""
    out = []
    for layer, (keys, values) in enumerate(view.layers):
        held = torch.isfinite(keys).all(dim=(1, 3)) & torch.isfinite(values).all(dim=(1, 3))  # [B, T]
        out += [report(i, "finite keys/values", f"non-finite at layer {layer}, slot {slot}",
                       "cache slot holds NaN/inf", model) for i, slot in where_wrong(~held)]
    return out


def _semantic(obs, model, view, oracle, report) -> list[Violation]:
    out = []
    need = min(obs.width - 1, view.length)  # a lagging draft cache holds one slot fewer (Spec §4.2.1)
    for i in range(obs.tokens.shape[0]):
        slots = (obs.mask[i, :need] != 0).nonzero().flatten()  # live slots: p_i .. L-2 when compact
        cached = obs.tokens[i, slots].tolist()
        if not cached:
            continue
        fresh = oracle(model, cached)
        for layer, ((keys, values), (fk, fv)) in enumerate(zip(view.layers, fresh)):
            tol = TOLERANCE.get(keys.dtype, 1e-2)
            for kind, got, ref in (("keys", keys, fk), ("values", values, fv)):
                got = got[i][:, slots.to(got.device)].to(ref.dtype)  # [H, n, D]
                err = ((got - ref[0]).abs() / (1 + ref[0].abs())).amax(dim=(0, 2))  # [n]
                if bool((err > tol).any()):
                    j = int((err > tol).nonzero()[0])
                    out.append(report(i, f"{kind} of content token {j} within {tol:g}",
                                      f"relative error {float(err[j]):.3g} at layer {layer}, slot {int(slots[j])}",
                                      "cached key/value differs from a fresh single-sequence forward", model))
                    return out
    return out
