"""The transitions of Spec §4, each a function on the batch state.

Every forward call goes through :func:`forward`, which records what the model
was really given (tokens, mask, positions, cache length) so that the
invariants check the tensors actually used, not a re-derivation (Contributing §4.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..invariants.observation import ForwardCall, SampledRound
from . import model_call, moves, storage
from .acceptance import Verdict
from .state import BatchState, Repad, attention_mask, content_index, left_pad


@dataclass
class Models:
    """The two models; ``draft`` is ``None`` for autoregressive decoding."""

    target: object
    draft: object | None = None


@dataclass
class Round:
    """Scratch of one round: drafts and their distributions (Spec §4.2)."""

    k: int  # k'
    drafts: torch.Tensor  # [B, k'] proposed tokens
    draft_logits: list = field(default_factory=list)  # k' tensors [B, V] (k'+1 when sampling)
    sampler: object | None = None  # sampling.Sampler; None: greedy (Spec §4.3.2)
    requests: list[int] = field(default_factory=list)  # request of each row, keys the uniforms
    start: torch.Tensor | None = None  # [B] c_i, the absolute position of slot 0
    mask: torch.Tensor | None = None  # [B, L + k'] over the round's slots, see frame
    positions: torch.Tensor | None = None  # [B, L + k'] of the same slots

    def frame(self, state: BatchState) -> tuple[torch.Tensor, torch.Tensor]:
        """The round's mask and positions ``[B, L + k']`` over the grid's slots
        and the drafts' (Spec §2.2), built once: the padding does not change
        within a round, so each call feeds a prefix of the mask and the
        positions of the slots it feeds."""
        if self.mask is None:
            self.mask = attention_mask(state.pad, state.width + self.k)
            self.positions = content_index(state.pad, 0, state.width + self.k)
        return self.mask, self.positions

    def uncached(self, state: BatchState, cache) -> tuple[torch.Tensor, int]:
        """``(inputs [B, n], t)``: the slots of the grid, then of the drafts so far,
        that ``cache`` does not hold yet, and ``t``, how many it holds (Spec §4.2).
        Mid-round that is the newest token or the last draft; in the first
        round (the prefill fed nothing, Spec §4.1), the whole prompt too. Only
        the tail is copied: this runs on every call of the round loop."""
        t = storage.cache_length(cache)
        if t >= state.width:  # past the grid: drafts only
            return self.drafts[:, t - state.width:], t
        return torch.cat([state.tokens[:, t:], self.drafts], dim=1), t

    def stop_at(self, k: int) -> None:
        """End drafting after ``k`` drafts (a policy stopped early, Spec §4.2.3):
        the round is then the round of ``k' = k``, its frame cut to match."""
        undrafted = self.k - k  # the frame was built for the cap
        self.k = k
        if self.mask is not None:
            width = self.mask.shape[1] - undrafted
            self.mask, self.positions = self.mask[:, :width], self.positions[:, :width]

    def newest_probability(self) -> torch.Tensor:
        """``[B]`` the draft's probability of its newest draft: the softmax of its
        logits greedily, the warped ``q`` under sampling (Spec §4.2.3)."""
        logits, drafted = self.draft_logits[-1], self.drafts[:, -1:]
        q = logits.float().softmax(-1) if self.sampler is None else self.sampler.q(logits)
        return q.gather(-1, drafted)[:, 0]

    def propose(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft ``j = len(drafts)`` from the draft's logits ``[B, V]``: the argmax,
        or under sampling ``y_t ~ q_t`` keyed at ``t = c_i + j`` (Spec §4.3.2)."""
        if self.sampler is None:
            return logits.argmax(-1)
        positions = (self.start + self.drafts.shape[1]).tolist()
        q = self.sampler.q(logits)
        return self.sampler.propose(q, self.sampler.u(self.requests, positions, "draft", q))

    def record(self) -> SampledRound | None:
        """What invariant I8 re-decides the committed tokens from (None when greedy)."""
        if self.sampler is None:
            return None
        return SampledRound(list(self.draft_logits), self.start.tolist(), self.sampler.sample_position)


def forward(model, name: str, cache, calls: list, input_ids, mask, positions, keep: int = 0):
    """Run one recorded forward call; return logits ``[B, n or keep, V]``."""
    call = ForwardCall(name, input_ids, mask, positions, storage.cache_length(cache))
    calls.append(call)
    call.logits = model_call.run_forward(model, cache, input_ids, mask, positions, logits_to_keep=keep)
    return call.logits


def prefill(models: Models, prompts: list[list[int]], requests: list[int], calls: list,
            room: int = 0, fill: bool = False) -> BatchState:
    """Left-pad the prompts into the grid and feed nothing (Spec §4.1): the caches
    stay empty and the first round's calls feed the prompt with their own
    inputs, so the target's first token comes from the call that verifies the
    first drafts, as in transformers' ``generate`` (no call spent on the prefill).
    ``fill`` (EXSPEC, whose rows join other batches mid-decode, Spec §8.4)
    also fills both caches with slots ``0 .. L-2``.

    ``room``: cache slots to reserve beyond ``L``. EQSPEC reserves
    max_new_tokens: a round holds at most ``L + k'`` slots, and ``L + k' <=
    max_i (c_i + budget_i)``, which is at most the prefill's ``L`` plus
    max_new_tokens, so the caches never grow (Spec §2.3)."""
    device = models.target.device
    tokens, pad, length = left_pad(prompts, device)  # [B, L], [B], [B]
    width = tokens.shape[1]
    caches = {"target": storage.new_cache(models.target, width + room)}
    if models.draft is not None:
        caches["draft"] = storage.new_cache(models.draft, width + room)
    if fill and width > 1:
        mask = attention_mask(pad, width - 1)  # [B, L-1]
        positions = content_index(pad, 0, width - 1)  # [B, L-1]
        for name, cache in caches.items():
            model = models.target if name == "target" else models.draft
            forward(model, name, cache, calls, tokens[:, :-1], mask, positions, keep=1)
    return BatchState(tokens, pad, length, list(requests), length.clone(),
                      caches["target"], caches.get("draft"))


def draft_one(models: Models, state: BatchState, rnd: Round, calls: list) -> None:
    """Draft one more token: feed what the draft cache lacks, the newest token or
    the previous draft (the whole prompt first, in the first round: Spec §4.1) (Spec §4.2)."""
    j = rnd.drafts.shape[1]  # drafts so far
    fed, t = rnd.uncached(state, state.draft_cache)  # [B, L + j - t]
    mask, positions = rnd.frame(state)  # [B, L + k'] each
    logits = forward(models.draft, "draft", state.draft_cache, calls, fed, mask[:, : state.width + j],
                     positions[:, t: state.width + j], keep=1)
    rnd.draft_logits.append(logits[:, -1])
    rnd.drafts = torch.cat([rnd.drafts, rnd.propose(logits[:, -1])[:, None]], dim=1)


def verify(models: Models, state: BatchState, rnd: Round, calls: list) -> torch.Tensor:
    """One target pass over ``[newest token] + drafts``, after whatever of the grid
    the target cache lacks (the prompt, in the first round: Spec §4.1); logits
    ``[B, k'+1, V]``, the target's choice after the newest token and after each draft (Spec §4.3)."""
    fed, t = rnd.uncached(state, state.target_cache)  # [B, L + k' - t]
    mask, positions = rnd.frame(state)  # [B, L + k'] each
    return forward(models.target, "target", state.target_cache, calls, fed, mask, positions[:, t:], keep=rnd.k + 1)


def catch_up(models: Models, state: BatchState, rnd: Round, calls: list) -> torch.Tensor:
    """Give the draft cache the key/value of the last draft (Spec §4.2.1);
    return the draft's logits after it ``[B, 1, V]``.

    Greedy needs it only when a staying row accepted all ``k'`` drafts: the
    draft was never fed its own last proposal, and the row's next round needs
    it; in a round without drafts (``k' = 0``) that is the newest token.
    Sampling runs it in every round, before verifying: its logits are the
    ``q`` of the bonus slot (Spec §4.3.2).
    """
    fed, t = rnd.uncached(state, state.draft_cache)  # [B, 1] (the prompt too, in a first round without drafts)
    mask, positions = rnd.frame(state)  # [B, L + k'] each
    return forward(models.draft, "draft", state.draft_cache, calls, fed, mask, positions[:, t:], keep=1)


def unpad_append_repad(state: BatchState, verdict: Verdict, plan: Repad, lag: int = 0) -> None:
    """Append each kept row's ``a_i`` tokens and left-pad again to ``L'``;
    shift every cache row by ``δ_i`` and drop rejected drafts (Spec §4.4, §4.5).
    ``lag``: the draft cache is left ``lag`` slots short (the deferred
    catch-up, Spec §4.2.1), its next call feeding what it lacks.

    The caches move in place, one copy per moving row (:func:`~.moves.realign`);
    when nothing moves (every ``δ_i = 0``, no row left) they are only cropped.
    """
    extended = torch.cat([state.tokens, verdict.proposal], dim=1)  # [B, L + k' + 1]
    caches = [(c, plan.width - (lag if c is state.draft_cache else 0))
              for c in (state.target_cache, state.draft_cache) if c is not None]
    if plan.realigns:
        state.tokens = extended[plan.rows[:, None], plan.slots]  # [B', L']
        for cache, width in caches:
            moves.realign(cache, plan.rows, plan.delta, plan.pad, width)
    else:  # every row stays put: no host transfer of the plan, no per-row loop
        state.tokens = extended[:, : plan.width]
        for cache, width in caches:
            moves.crop_to(cache, width - 1)
    if plan.dropped:
        state.requests = [state.requests[i] for i in plan.rows.tolist()]
        state.prompt_length = state.prompt_length[plan.rows]
    state.pad, state.length = plan.pad, plan.length
