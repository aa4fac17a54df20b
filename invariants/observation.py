"""The observation record the invariants read (Spec §3).

Any batch speculative decoder can fill it: nothing here depends on batchspec's
own implementation. Fill one :class:`Observation` after every step of your
decoder and pass it to :func:`batchspec.invariants.check`.

Layout conventions (the paper's, Spec §2):

* rows are left-padded: row ``i`` has ``pad[i]`` padding slots then
  ``length[i]`` content tokens (prompt + committed output) in a grid of
  width ``L``;
* each model's cache covers grid slots ``0 .. L-2`` at a round boundary: the
  newest committed token of a row has no key/value yet and leads the next
  forward call. Mid-round (after a draft or verify call) a cache may hold
  more slots, for speculative tokens; the committed part ``0 .. L-2`` must
  still correspond to the grid.

Step names: ``"prefill"``, ``"draft"``, ``"verify"``, ``"align"``. A
*boundary* step (``prefill``, ``align``) ends with every cache exactly
``L - 1`` slots long.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

BOUNDARY_STEPS = ("prefill", "align")


@dataclass
class ForwardCall:
    """What one forward call of one model was really given."""

    model: str  # "target" | "draft"
    input_ids: torch.Tensor  # [B, n]
    attention_mask: torch.Tensor  # [B, T + n], over cache slots then inputs
    position_ids: torch.Tensor  # [B, n]
    cache_length: int  # T, slots in the cache before the call
    logits: torch.Tensor | None = None  # [B, n or kept, V] what the call returned (I5 reads the target's)


@dataclass
class CacheView:
    """One model's cache: per layer ``(keys, values)``, each ``[B, H, T, D]``."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def length(self) -> int:
        """Slots ``T`` (0 for an empty cache)."""
        return self.layers[0][0].shape[2] if self.layers else 0


#: ``oracle(model_name, token_ids) -> [(keys, values) per layer]``, each
#: ``[1, H, n, D]``: the cache a fresh single-sequence forward of ``token_ids``
#: at positions ``0 .. n-1`` produces. Used by the semantic mode of I3.
KVOracle = Callable[[str, list[int]], list[tuple[torch.Tensor, torch.Tensor]]]


@dataclass
class SampledRound:
    """What a sampled verify step decided from, for I8 (Spec §3.8)."""

    draft_logits: list  # k'+1 tensors [B, V] the draft calls returned, the last at the bonus slot ([] without a draft)
    positions: list[int]  # per row, the absolute position t of slot 0 (c_i)
    #: ``rule(request, t, target_logits [V], draft_logits [V] | None, draft | None) -> (y_t, x_t)``:
    #: the decoder's per-position rule with its keyed uniforms (batchspec's: ``Sampler.rule``).
    rule: Callable


@dataclass
class Observation:
    """The state of a batch after one step, plus the calls made during it."""

    round: int
    step: str
    tokens: torch.Tensor  # [B, L] left-padded committed grid; pad slots arbitrary
    mask: torch.Tensor  # [B, L] the attention mask the decoder holds for the grid
    pad: list[int]  # p_i
    length: list[int]  # c_i
    caches: dict[str, CacheView]  # "target", and "draft" when there is one
    calls: list[ForwardCall] = field(default_factory=list)  # made during this step
    requests: list[int] | None = None  # request id of each row, for messages
    draft_tokens: torch.Tensor | None = None  # [B, k'] drafts of the current round, if any
    committed: list[list[int]] | None = None  # tokens this step commits to each row (verify), for I5
    sampled: SampledRound | None = None  # verify step of a sampled round, for I8 (I5 then skips)

    @property
    def width(self) -> int:
        """``L``."""
        return self.tokens.shape[1]

    @property
    def boundary(self) -> bool:
        """True after ``prefill`` and ``align``: caches must hold exactly ``L - 1`` slots."""
        return self.step in BOUNDARY_STEPS

    def content(self, row: int) -> list[int]:
        """Committed tokens of ``row``."""
        return self.tokens[row, self.pad[row]:].tolist()
