"""I1 rectangular alignment (Spec §3.1)."""

from __future__ import annotations

import torch

from ._util import compact_mask, leading_zeros, on, reporter
from .observation import Observation
from .violation import Violation


def rectangular_alignment(obs: Observation) -> list[Violation]:
    """Every row is ``p_i`` pads then ``c_i`` content tokens, ``p_i + c_i = L``,
    with no holes: in the decoder's own grid mask and in every attention mask
    it passed to a model during the step (Spec §3.1)."""
    report = reporter(obs, "I1", "rectangular_alignment")
    out: list[Violation] = []
    width = obs.width
    rows = obs.tokens.shape[0]
    if not (len(obs.pad) == len(obs.length) == rows == obs.mask.shape[0]):
        return [report(None, rows, (len(obs.pad), len(obs.length), obs.mask.shape[0]),
                       "pad, length, mask and tokens disagree on the number of rows")]
    if obs.mask.shape[1] != width:
        return [report(None, width, obs.mask.shape[1], "grid mask width differs from L")]
    expected = compact_mask(obs.pad, max([width] + [c.attention_mask.shape[1] for c in obs.calls]),
                            obs.mask.device)  # [B, W] p_i zeros then ones, as wide as the widest mask
    grid_zeros = None if same(obs.mask, expected) else leading_zeros(obs.mask)  # slow path: find rows
    for i in range(rows):
        p, c = obs.pad[i], obs.length[i]
        if p < 0 or c < 1 or p + c != width:
            out.append(report(i, f"p_i + c_i = L = {width}, p_i >= 0, c_i >= 1",
                              {"p_i": p, "c_i": c}, "row does not fill the grid"))
            continue
        if grid_zeros is not None and grid_zeros[i] != p:  # then the c_i = L - p_i others are ones
            out.append(report(i, [0] * p + [1] * c, obs.mask[i].tolist(),
                              "grid mask is not p_i zeros then c_i ones"))
    for call in obs.calls:
        if call.attention_mask.shape[0] == rows and same(call.attention_mask, expected):  # on the call's device
            continue
        zeros = leading_zeros(call.attention_mask)
        for i in range(min(rows, call.attention_mask.shape[0])):
            if zeros[i] != obs.pad[i]:
                out.append(report(i, [0] * obs.pad[i] + ["1..."], call.attention_mask[i].tolist(),
                                  "attention mask passed to the model is not p_i zeros then ones",
                                  call.model))
    return out


def same(mask, expected) -> bool:
    """``mask`` ``[B, W]`` equals the first ``W`` columns of ``expected`` (one comparison)."""
    if expected.shape[1] != mask.shape[1]:
        expected = expected[:, : mask.shape[1]]
    return torch.equal(mask, on(expected, mask.device))
