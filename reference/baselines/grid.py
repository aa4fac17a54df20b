"""The fixed grid that the masking and DSD baselines share (Paper §5).

EQSPEC's :class:`~batchspec.reference.state.BatchState` derives the mask and
the positions from the integers ``p_i``; it cannot even represent what these
baselines do. The :class:`Grid` here holds an explicit attention mask, which
the masking baseline punches holes into and the DSD baseline leaves all ones,
and a :class:`Layout` says how each baseline builds the masks and position
ids it feeds. :func:`observe` records exactly those tensors, so the
invariants (Spec §3) judge what the baseline really did (Contributing §4.3).

Cache layout as in Spec §2.3: each cache covers grid slots ``0 .. S-2``; the
newest token of every row sits in slot ``S-1`` and leads the next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ...invariants.observation import CacheView, Observation
from ..eqspec import Event
from ..moves import take_slots
from ..state import BatchState, RowOutput, left_pad
from ..transitions import Models, forward
from ..storage import layer_tensors, new_cache


@dataclass
class Grid(BatchState):
    """A :class:`~batchspec.reference.state.BatchState` whose grid of ``S = width``
    slots may hold holes (a rejected token keeps its slot), with the attention
    mask the decoder holds for it; ``width`` is ``L`` when there are no holes."""

    mask: torch.Tensor | None = None  # [B, S] the attention mask the decoder holds for the grid


@dataclass(frozen=True)
class Layout:
    """How a baseline attends and counts positions.

    ``mask(grid, upto)``: the attention mask ``[B, upto]`` of a call whose
    cache plus inputs cover slots ``0 .. upto-1`` (slots past ``S`` are the
    round's speculative inputs). ``positions(grid, start, n)``: position ids
    ``[B, n]`` of the inputs in slots ``start .. start+n-1``.
    ``held_mask(grid)``: the mask the decoder keeps for a freshly padded grid.
    """

    mask: Callable[[Grid, int], torch.Tensor]
    positions: Callable[[Grid, int, int], torch.Tensor]
    held_mask: Callable[[Grid], torch.Tensor]


def slots_minus_pad(grid: Grid, start: int, n: int) -> torch.Tensor:
    """Positions that keep counting slots after the row's padding: ``s - p_i``."""
    slots = torch.arange(start, start + n, device=grid.pad.device)
    return (slots[None, :] - grid.pad[:, None]).clamp(min=0)


def prefill(models: Models, prompts, requests, layout: Layout, calls: list) -> Grid:
    """Left-pad the prompts and fill both caches with slots ``0 .. S-2`` (as Spec §4.1)."""
    device = models.target.device
    tokens, pad, length = left_pad(prompts, device)  # [B, S], [B], [B]
    grid = Grid(tokens, pad, length, list(requests), length.clone(),
                new_cache(models.target), new_cache(models.draft))
    grid.mask = layout.held_mask(grid)  # [B, S]
    width = grid.width
    if width > 1:
        for name, model, cache in (("target", models.target, grid.target_cache),
                                   ("draft", models.draft, grid.draft_cache)):
            forward(model, name, cache, calls, tokens[:, :-1], layout.mask(grid, width - 1),
                    layout.positions(grid, 0, width - 1), keep=1)
    return grid


def draft_one(models: Models, grid: Grid, drafts: torch.Tensor, layout: Layout, calls: list) -> torch.Tensor:
    """Feed the newest token or the previous draft to the draft; return drafts + one ``[B, j+1]``."""
    j, width = drafts.shape[1], grid.width
    fed = grid.tokens[:, -1:] if j == 0 else drafts[:, -1:]  # [B, 1]
    logits = forward(models.draft, "draft", grid.draft_cache, calls, fed, layout.mask(grid, width + j),
                     layout.positions(grid, width - 1 + j, 1), keep=1)
    return torch.cat([drafts, logits[:, -1].argmax(-1, keepdim=True)], dim=1)


def verify(models: Models, grid: Grid, drafts: torch.Tensor, layout: Layout, calls: list) -> torch.Tensor:
    """One target pass over ``[newest] + drafts``; logits ``[B, k'+1, V]``."""
    k, width = drafts.shape[1], grid.width
    fed = torch.cat([grid.tokens[:, -1:], drafts], dim=1)  # [B, k'+1]
    return forward(models.target, "target", grid.target_cache, calls, fed, layout.mask(grid, width + k),
                   layout.positions(grid, width - 1, k + 1))


def catch_up(models: Models, grid: Grid, drafts: torch.Tensor, layout: Layout, calls: list) -> None:
    """Give the draft cache the key/value of the last draft (as Spec §4.2.1)."""
    k, width = drafts.shape[1], grid.width
    forward(models.draft, "draft", grid.draft_cache, calls, drafts[:, -1:], layout.mask(grid, width + k),
            layout.positions(grid, width - 1 + k, 1), keep=1)


def commit(outputs: dict, grid: Grid, proposal, a, eos_hit, finished) -> list[list[int]]:
    """Append each row's ``a_i`` tokens to its output; return them per row."""
    committed = []
    for i, request in enumerate(grid.requests):
        tokens = proposal[i, : int(a[i])].tolist()
        committed.append(tokens)
        outputs[request].tokens.extend(tokens)
        if finished[i]:
            outputs[request].stop = "eos" if eos_hit[i] else "length"
    return committed


def keep_rows(grid: Grid, rows: torch.Tensor, cache_slots: torch.Tensor) -> None:
    """Keep grid rows ``rows`` ``[B']``; cache row ``b`` becomes old row ``rows[b]``
    at slots ``cache_slots`` ``[B', T']`` (one gather per cache tensor)."""
    for cache in (grid.target_cache, grid.draft_cache):
        take_slots(cache, rows, cache_slots)
    grid.tokens, grid.mask = grid.tokens[rows], grid.mask[rows]
    grid.pad, grid.length = grid.pad[rows], grid.length[rows]
    grid.prompt_length = grid.prompt_length[rows]
    grid.requests = [grid.requests[i] for i in rows.tolist()]


def observe(grid: Grid, step: str, calls: list, drafts=None, committed=None) -> Observation:
    """What the baseline holds after ``step``: its own grid, mask, ``p_i``, ``c_i`` and caches."""
    return Observation(
        round=grid.round, step=step, tokens=grid.tokens, mask=grid.mask,
        pad=grid.pad.tolist(), length=grid.length.tolist(),
        caches={"target": CacheView(layer_tensors(grid.target_cache)),
                "draft": CacheView(layer_tensors(grid.draft_cache))},
        calls=list(calls), requests=list(grid.requests), draft_tokens=drafts, committed=committed)


def event(phase: str, step: str, grid: Grid, calls: list, drafts=None, record=None, committed=None) -> Event:
    """An :class:`Event` whose observation is the baseline's own record."""
    return Event(phase, step, grid, calls, drafts, record, committed,
                 observe=lambda: observe(grid, step, calls, drafts, committed))


def empty_outputs(requests) -> dict:
    """``{request: RowOutput()}``."""
    return {r: RowOutput() for r in requests}


def decoder(layout: "Layout", round_fn: Callable):
    """``decode(models, prompts, requests, config)`` for a baseline: prefill on
    ``layout``, then ``round_fn(models, grid, config, outputs)`` until every row
    has finished; returns ``{request: RowOutput}``."""

    def decode(models, prompts, requests, config):
        outputs = empty_outputs(requests)
        if config.max_new_tokens == 0:
            return outputs
        calls: list = []
        grid = prefill(models, prompts, requests, layout, calls)
        yield event("other", "prefill", grid, calls)
        while grid.batch:
            yield from round_fn(models, grid, config, outputs)
        return outputs

    return decode
