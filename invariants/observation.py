"""The observation record the invariants read (Spec §3).

Any batch speculative decoder can fill it: nothing here depends on batchspec's
own implementation. Fill one :class:`Observation` after every step of your
decoder and pass it to :func:`batchspec.invariants.check`, or let
:func:`batchspec.invariants.watch` fill them from the models' forward calls.

Layout conventions (the paper's, Spec §2):

* rows are left-padded: row ``i`` has ``pad[i]`` padding slots then
  ``length[i]`` content tokens (prompt + committed output) in a grid of
  width ``L``;
* each model's cache covers grid slots ``0 .. L-2`` at a round boundary: the
  newest committed token of a row has no key/value yet and leads the next
  forward call. Mid-round (after a draft or verify call) a cache may hold
  more slots, for speculative tokens; the committed part ``0 .. L-2`` must
  still correspond to the grid.

Step names: ``"prefill"``, ``"draft"``, ``"verify"``, ``"realign"``. A
*boundary* step (``prefill``, ``realign``) ends with every cache exactly
``L - 1`` slots long. Model names are exactly ``"target"`` and ``"draft"``
(:data:`MODELS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .hf_cache import held, seen

BOUNDARY_STEPS = ("prefill", "realign")
STEP_NAMES = ("prefill", "draft", "verify", "realign", "finish")
MODELS = ("target", "draft")


@dataclass
class ForwardCall:
    """What one forward call of one model was really given (Spec §3).

    Attributes:
        model: ``"target"`` or ``"draft"`` (anything else is a ``ValueError``).
        input_ids: ``[B, n]`` the token ids fed, one row per batch row.
        attention_mask: ``[B, T + n]`` the mask passed, over the ``T`` cached
            slots and then the ``n`` inputs (1 attended, 0 masked).
        position_ids: ``[B, n]`` the position ids passed with the inputs.
        cache_length: ``T``, the slots the model's cache held **before** the
            call (a length read after the call includes the inputs and is
            rejected with a ``ValueError``).
        logits: ``[B, n, V]`` (or ``[B, kept, V]``) what the call returned.
            Required for the target's verification call (I5 reads it);
            optional elsewhere.
    """

    model: str
    input_ids: torch.Tensor  # [B, n]
    attention_mask: torch.Tensor  # [B, T + n]
    position_ids: torch.Tensor  # [B, n]
    cache_length: int  # T, before the call
    logits: torch.Tensor | None = None  # [B, n or kept, V]

    def without_logits(self) -> "ForwardCall":
        """This call without its logits (what a checker keeps once it has read them: no
        ``[B, n, V]`` tensor lives on); ``dataclasses.replace``, without its field walk."""
        return ForwardCall(self.model, self.input_ids, self.attention_mask, self.position_ids, self.cache_length)

    def content_positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(fed, index)``, each ``[B, n]``: which inputs the mask attends, and at
        those ``cumsum(attention_mask != 0) - 1`` (int64, whatever the mask's
        dtype), the content index (and so the position id) each must have
        (Spec §3.2); ``-1`` at masked inputs. Computed from the mask as it is
        now, at every call (a checker's :class:`~batchspec.invariants.memo.Memo`
        keeps it for the one check in which I2 and the ledger both read it)."""
        t = self.cache_length
        attended = self.attention_mask != 0  # [B, T + n]: any dtype, any nonzero value attends
        fed = attended[:, t:]
        return fed, torch.where(fed, attended.cumsum(1)[:, t:] - 1, -1)


@dataclass
class CacheView:
    """One model's cache as the invariants read it (Spec §2.3).

    Attributes:
        layers: per layer ``(keys, values)``, each ``[B, kv_heads, T, head_dim]``;
            ``[]`` for an empty cache. No copy is needed: the checks only read.
        stacked: optional, for a decoder that keeps every layer in one tensor:
            that tensor ``[2·layers, B, kv_heads, T, head_dim]`` (layer ``l``'s
            keys at ``2l``, values at ``2l + 1``), of which ``layers`` are
            slices. The checks that read every slot (I3's finiteness) then
            make one pass instead of one per tensor. ``None``: read ``layers``.
    """

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    stacked: torch.Tensor | None = None  # [2·layers, B, H, T, D]

    def whole(self) -> list[torch.Tensor]:
        """Tensors that together hold every key and value: ``[stacked]`` when it
        matches ``layers`` in shape, else every layer's keys and values."""
        if self.stacked is not None and self.layers and self.stacked.shape == (
                (2 * len(self.layers),) + tuple(self.layers[0][0].shape)):
            return [self.stacked]
        return [t for pair in self.layers for t in pair]

    @property
    def length(self) -> int:
        """Slots ``T`` (0 for an empty cache)."""
        return self.layers[0][0].shape[2] if self.layers else 0

    @staticmethod
    def length_of(cache) -> int:
        """Slots ``T`` of a Hugging Face ``Cache`` (0 for ``None`` or an empty one): the
        tokens its first layer has seen, through the public per-layer API
        (:func:`~batchspec.invariants.hf_cache.seen`; a static cache is not iterable)."""
        return seen(cache)

    @classmethod
    def from_hf(cls, cache) -> "CacheView":
        """The view of a Hugging Face ``Cache``, read through its public per-layer API:
        each layer's ``keys``/``values`` up to the tokens it has seen (a static
        layer's preallocated rest is not part of it); ``None`` gives an empty view."""
        if cache is None:
            return cls([])
        layers = [held(cache, i)[:2] for i in range(len(getattr(cache, "layers", ())))]
        return cls([(k, v) for k, v in layers if isinstance(k, torch.Tensor) and k.numel()])


#: ``oracle(model_name, token_ids) -> [(keys, values) per layer]``, each
#: ``[1, H, n, D]``: the cache a fresh single-sequence forward of ``token_ids``
#: at positions ``0 .. n-1`` produces. Used by the semantic mode of I3
#: (:func:`batchspec.oracle.hf_oracle` builds one from two HF models).
KVOracle = Callable[[str, list[int]], list[tuple[torch.Tensor, torch.Tensor]]]


@dataclass
class SampledRound:
    """What a sampled verify step decided from, for I8 (Spec §3.8)."""

    draft_logits: list  # k'+1 tensors [B, V] the draft calls returned, the last at the bonus slot ([] without a draft)
    positions: list[int]  # per row, the absolute position t of slot 0 (c_i)
    #: ``rule(request, t, target_logits [V], draft_logits [V] | None, draft | None) -> (y_t, x_t)``:
    #: the decoder's per-position rule with its keyed uniforms (batchspec's: ``Sampler.sample_position``).
    rule: Callable


@dataclass
class Observation:
    """The state of a batch after one step, plus the calls made during it (Spec §3).

    Attributes:
        round: the round number (0 for prefill, 1 for the first round).
        step: one of :data:`STEP_NAMES`; ``prefill`` and ``realign`` are boundaries.
        tokens: ``[B, L]`` the token grid the decoder holds after the step;
            padding slots may hold anything.
        mask: ``[B, L]`` the attention mask the decoder holds for the grid.
        pad: ``p_i`` per row, padding slots (compact layout: the leading zeros).
        length: ``c_i`` per row, content tokens (prompt + committed output).
        caches: ``{"target": CacheView, "draft": CacheView}`` after the step
            (``"draft"`` only when there is a draft model).
        calls: every :class:`ForwardCall` made during the step, in order.
        requests: the request id of each row (rows move and leave; the
            ledger checks I6/I7 follow requests). ``None``: row ``i`` is
            request ``i`` for the whole run.
        draft_tokens: ``[B, k']`` the drafts of the current round so far.
            Required at ``draft`` and ``verify`` steps (``[B, 0]`` when
            nothing is drafted).
        committed: per row, the ``a_i`` tokens this step commits. Required at
            the ``verify`` step (I5 checks them against the target's logits,
            I7 against the grid the next boundary holds).
        sampled: at the ``verify`` step of a sampled round, what it decided
            from (:class:`SampledRound`): I8 re-decides every committed token
            by the decoder's rule, and I5 skips the step. ``None`` when greedy.
    """

    round: int
    step: str
    tokens: torch.Tensor  # [B, L] left-padded committed grid; pad slots arbitrary
    mask: torch.Tensor  # [B, L] the attention mask the decoder holds for the grid
    pad: list[int]  # p_i
    length: list[int]  # c_i
    caches: dict[str, CacheView]
    calls: list[ForwardCall] = field(default_factory=list)
    requests: list[int] | None = None
    draft_tokens: torch.Tensor | None = None  # [B, k']
    committed: list[list[int]] | None = None  # [B][a_i]
    sampled: SampledRound | None = None

    @property
    def width(self) -> int:
        """``L``."""
        return self.tokens.shape[1]

    @property
    def boundary(self) -> bool:
        """True after ``prefill`` and ``realign``: caches must hold exactly ``L - 1`` slots."""
        return self.step in BOUNDARY_STEPS

    def content(self, row: int) -> list[int]:
        """Committed tokens of ``row`` in the compact layout: after its ``p_i`` pads."""
        return self.tokens[row, self.pad[row]:].tolist()

    def live_content(self, row: int) -> list[int]:
        """Committed tokens of ``row`` in any layout: the slots its grid mask attends."""
        return self.tokens[row][self.mask[row] != 0].tolist()

    def live_contents(self) -> list[list[int]]:
        """:meth:`live_content` of every row (two transfers, whatever ``B``)."""
        attended = (self.mask != 0).tolist()
        return [[x for x, m in zip(row, keep) if m] for row, keep in zip(self.tokens.tolist(), attended)]
