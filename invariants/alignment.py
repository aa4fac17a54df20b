"""I1 rectangular alignment (Spec §3.1)."""

from __future__ import annotations

import torch

from ._util import reporter, same, where_wrong
from .memo import Memo
from .observation import Observation
from .violation import Violation


def rectangular_alignment(obs: Observation, memo: Memo | None = None) -> list[Violation]:
    """Every row is ``p_i`` pads then ``c_i`` content tokens, ``p_i + c_i = L``,
    with no holes: in the decoder's own grid mask and in every attention mask
    it passed to a model during the step (Spec §3.1)."""
    report = reporter(obs, "I1", "rectangular_alignment")
    rows, width = obs.tokens.shape[0], obs.width
    if not (len(obs.pad) == len(obs.length) == rows == obs.mask.shape[0]):
        return [report(None, rows, (len(obs.pad), len(obs.length), obs.mask.shape[0]),
                       "pad, length, mask and tokens disagree on the number of rows")]
    if obs.mask.shape[1] != width:
        return [report(None, width, obs.mask.shape[1], "grid mask width differs from L")]
    masks = [obs.mask] + [call.attention_mask for call in obs.calls]
    rows_of = (memo or Memo()).compact_mask(obs.pad, max(m.shape[1] for m in masks), obs.mask.device)  # [B, W]
    # the statement: p_i + c_i = L, and every mask is mask_row(p_i): p_i zeros, then ones
    if all(p >= 0 and c >= 1 and p + c == width for p, c in zip(obs.pad, obs.length)) and all(
            same(m, rows_of[:, : m.shape[1]]) for m in masks):
        return []
    return _misaligned(obs, rows_of, report)


def _misaligned(obs: Observation, rows_of: torch.Tensor, report) -> list[Violation]:
    """Each row that breaks :func:`rectangular_alignment`, expected against actual."""
    out: list[Violation] = []
    width = obs.width
    grid = {i for i, _ in _unlike(obs.mask, rows_of)}
    for i, (p, c) in enumerate(zip(obs.pad, obs.length)):
        if p < 0 or c < 1 or p + c != width:
            out.append(report(i, f"p_i + c_i = L = {width}, p_i >= 0, c_i >= 1",
                              {"p_i": p, "c_i": c}, "row does not fill the grid"))
        elif i in grid:
            out.append(report(i, [0] * p + [1] * c, obs.mask[i].tolist(),
                              "grid mask is not p_i zeros then c_i ones"))
    for call in obs.calls:
        for i, _ in _unlike(call.attention_mask, rows_of):
            out.append(report(i, [0] * obs.pad[i] + ["1..."], call.attention_mask[i].tolist(),
                              "attention mask passed to the model is not p_i zeros then ones", call.model))
    return out


def _unlike(mask: torch.Tensor, rows_of: torch.Tensor) -> list[tuple[int, int]]:
    """Rows of ``mask`` ``[B', W]`` (the first ``B`` at most) that are not ``rows_of``'s."""
    b = min(mask.shape[0], rows_of.shape[0])
    return where_wrong(mask[:b] != rows_of[:b, : mask.shape[1]].to(mask.device))
