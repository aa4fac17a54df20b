"""Speculative sampling, decided one position at a time (Spec §4.3.2).

Every random number is keyed, never drawn from a stream: ``u(key, t,
purpose)`` is a hash of the request's key, the absolute position ``t`` of the
token being decided in its sequence, and what the number is for. Position
``t`` of a request is then decided by the same rule whatever round, slot,
batch or method it falls in:

1. the draft proposes ``y_t ~ q_t`` with ``u(key, t, "draft")``;
2. the target accepts if ``u(key, t, "accept") < min(1, p_t(y_t) / q_t(y_t))``;
3. otherwise ``x_t ~ norm(max(0, p_t - q_t))`` with ``u(key, t, "residual")``.

Without a draft (autoregressive) ``x_t ~ p_t`` with ``u(key, t, "sample")``.
``p`` and ``q`` are the *warped* distributions (temperature, top-k, top-p,
applied to both models by transformers' own logits warpers). All functions
here are pure and batched over rows: tensors ``[B, V]`` / ``[B]``.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

PURPOSES = ("draft", "accept", "residual", "sample")


def uniform(key: tuple, t: int, purpose: str) -> float:
    """``u(key, t, purpose)`` in ``[0, 1)``: 53 bits of a BLAKE2b hash (Spec §4.3.2).

    Counter-based: a pure function of its arguments, so no call order, batch
    composition or number of earlier draws can change it.
    """
    data = repr((tuple(key), int(t), PURPOSES.index(purpose))).encode()
    word = struct.unpack("<Q", hashlib.blake2b(data, digest_size=8).digest())[0]
    return (word >> 11) / float(1 << 53)


def keyed_uniforms(keys: list[tuple], positions: list[int], purpose: str, like: torch.Tensor) -> torch.Tensor:
    """``[B]`` uniforms, row ``i`` keyed by ``(keys[i], positions[i], purpose)``."""
    return like.new_tensor([uniform(k, t, purpose) for k, t in zip(keys, positions)])


@dataclass(frozen=True)
class Warping:
    """Temperature, then top-k, then top-p: transformers' order and warpers."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped distribution ``[B, V]`` from logits ``[B, V]`` (float64 stays float64)."""
        scores = logits.double() if logits.dtype != torch.float64 else logits
        if self.temperature != 1.0:
            scores = TemperatureLogitsWarper(self.temperature)(None, scores)
        if self.top_k is not None:
            scores = TopKLogitsWarper(self.top_k)(None, scores)
        if self.top_p is not None and self.top_p < 1.0:
            scores = TopPLogitsWarper(self.top_p)(None, scores)
        return scores.softmax(-1)


def draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw ``[B]`` from non-negative ``weights`` ``[B, V]`` (need not sum to 1).

    Token ``x`` is chosen when ``u`` falls in its CDF interval, so it is drawn
    with probability ``w(x) / Σ w`` and a zero-weight token never is; rounding
    at the top end is clamped to the last token of positive weight.
    """
    cdf = weights.cumsum(-1)  # [B, V]
    x = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    last = (weights > 0).long().cumsum(-1).argmax(-1)  # first index reaching the last positive
    return torch.minimum(x, last)


def accept_probability(p: torch.Tensor, q: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``min(1, p(y) / q(y))`` ``[B]``; ``q(y) > 0`` since ``y`` was drawn from ``q``."""
    py, qy = p.gather(1, y[:, None])[:, 0], q.gather(1, y[:, None])[:, 0]
    return torch.clamp(py / qy, max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``max(0, p - q)`` ``[B, V]``, unnormalised (``draw`` normalises).

    Zero only when ``p = q``, where rejection has probability 0; ``p`` stands
    in then so that ``draw`` always has mass to draw from.
    """
    r = (p - q).clamp(min=0)
    empty = r.sum(-1, keepdim=True) <= 0
    return torch.where(empty, p, r)


@dataclass(frozen=True)
class Sampler:
    """Everything the rule needs besides the logits: the warping, each
    request's key, and the rule's parts (swappable, like ``Steps``, so that a
    test can build a deliberately wrong sampler with ``dataclasses.replace``)."""

    warping: Warping = Warping()
    keys: dict = field(default_factory=dict)  # request -> key tuple
    propose: Callable = draw  # (q, u) -> y
    residual: Callable = residual  # (p, q) -> weights
    uniforms: Callable = keyed_uniforms  # (keys, positions, purpose, like) -> [B]
    warp_draft: bool = True

    def p(self, logits: torch.Tensor) -> torch.Tensor:
        """Target distribution ``[B, V]``."""
        return self.warping.probs(logits)

    def q(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft distribution ``[B, V]``, warped like the target's."""
        return self.warping.probs(logits) if self.warp_draft else logits.double().softmax(-1)

    def u(self, requests: list[int], positions: list[int], purpose: str, like) -> torch.Tensor:
        """Keyed uniforms ``[B]`` for rows ``requests`` at ``positions``."""
        return self.uniforms([self.keys[r] for r in requests], positions, purpose, like)

    def sample_position(self, request: int, t: int, target_logits: torch.Tensor, draft_logits: torch.Tensor | None,
                        draft: int | None = None) -> tuple[int | None, int]:
        """The whole rule at one position of one request (Spec §4.3.2), from
        logits ``[V]``: ``(y_t, x_t)``, the draft's proposal (``draft`` when it
        was already drafted, else drawn here; ``None`` without a draft) and the
        token decided. What invariant I8 re-decides each committed token with."""
        p = self.p(target_logits[None])
        q = self.q(draft_logits[None]) if draft_logits is not None else None
        y = None
        if q is not None:
            y = (torch.tensor([draft], device=q.device) if draft is not None
                 else self.propose(q, self.u([request], [t], "draft", q)))
        _, token = decide(self, p, q, y, [request], [t])
        return (None if y is None else int(y[0])), int(token[0])


def decide(sampler: Sampler, p: torch.Tensor, q: torch.Tensor | None, y: torch.Tensor | None,
           requests: list[int], positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 2–3 of the rule at one position for every row: ``(accepted [B]
    bool, token [B])``. With ``q = None`` (no draft) ``x_t ~ p_t``."""
    if q is None:
        return torch.zeros(p.shape[0], dtype=torch.bool, device=p.device), \
            draw(p, sampler.u(requests, positions, "sample", p))
    # 2. accept y_t if u < min(1, p(y)/q(y)).
    accepted = sampler.u(requests, positions, "accept", p) < accept_probability(p, q, y)
    # 3. otherwise x_t ~ norm(max(0, p - q)).
    x = draw(sampler.residual(p, q), sampler.u(requests, positions, "residual", p))
    return accepted, torch.where(accepted, y, x)


def output_distribution(p: torch.Tensor, q: torch.Tensor, sampler: Sampler = Sampler()) -> torch.Tensor:
    """The rule's output distribution ``[B, V]`` in closed form (Spec §5.5), from
    the same ``accept_probability`` and ``residual`` the rule uses:
    ``P(x) = q(x) min(1, p(x)/q(x)) + P(reject) r(x) / Σ r``."""
    vocab = torch.arange(p.shape[1], device=p.device)
    accept = torch.stack([torch.where(q[:, x] > 0, accept_probability(p, q, vocab[x].expand(p.shape[0])), 0.0)
                          for x in range(p.shape[1])], dim=1)  # [B, V] min(1, p/q) where q > 0
    kept = q * accept  # [B, V]
    r = sampler.residual(p, q)
    reject = 1 - kept.sum(-1, keepdim=True)  # [B, 1]
    return kept + reject * r / r.sum(-1, keepdim=True)
