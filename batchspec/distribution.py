"""Checking a sampler's output *distribution* (Spec §5.5), vLLM's way.

On a vocabulary of a few tokens the target's exact distribution over short
continuations can be enumerated. Many seeds of one prompt, decoded in one
batch (the output is batch-invariant, so each row is an independent sample),
give the empirical distribution. A correct sampler's total-variation
distance to the exact distribution shrinks like ``1/sqrt(n)``; a biased one
levels off at its bias. The *convergence ratio* (mean distance over ``m``
disjoint chunks of ``n/m`` samples, divided by the distance over all ``n``)
is about ``sqrt(m)`` for the first and about 1 for the second, so the
method is judged against negative controls, not against a fixed tolerance.

The negative controls are deliberately wrong samplers (each a known bug):
a greedy draft under sampling (transformers #30778), the bonus taken from
the draft, a residual without ``max(0, ·)``, warping applied to ``p`` only,
and a random stream shared by the batch (right in distribution, wrong in
batch invariance).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import torch
import transformers as tf

from .reference.draft_policy import Fixed
from .reference import acceptance
from .reference.eqspec import STEPS
from .reference.sampling import Sampler, Warping


def tiny_vocab_pair(vocab: int = 4, seed: int = 0, scale: float = 3.0):
    """``(target, draft)``: two independently initialised one-layer float64 Llamas
    over ``vocab`` tokens, so that ``p != q`` and continuations can be enumerated."""
    models = []
    for s in (seed, seed + 1):
        config = tf.LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                bos_token_id=0, eos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
        config._attn_implementation = "sdpa"
        torch.manual_seed(s)
        model = tf.LlamaForCausalLM(config)
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(scale)
        models.append(model.to(torch.float64).eval())
    return tuple(models)


@torch.no_grad()
def exact_distribution(target, prompt: list[int], n: int, warping: Warping) -> dict[tuple, float]:
    """``{continuation: probability}`` of every ``n``-token continuation under the
    warped target, by enumeration (``V**n`` outcomes, one forward per prefix)."""
    vocab = target.config.vocab_size
    probs = {(): 1.0}
    for _ in range(n):
        grown = {}
        for prefix, mass in probs.items():
            ids = torch.tensor([prompt + list(prefix)], device=target.device)
            p = warping.probs(target(input_ids=ids, use_cache=False).logits[:, -1])[0]
            for x in range(vocab):
                if p[x] > 0:
                    grown[prefix + (x,)] = mass * float(p[x])
        probs = grown
    return probs


def total_variation(samples: list[tuple], exact: dict[tuple, float]) -> float:
    """``½ Σ |empirical - exact|`` over the union of outcomes."""
    counts: dict[tuple, int] = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(x, 0) / len(samples) - exact.get(x, 0.0)) for x in keys)


def convergence(samples: list[tuple], exact: dict[tuple, float], chunks: int = 16) -> dict:
    """``{"small": mean TV over `chunks` disjoint chunks, "large": TV over all,
    "ratio": small / large}`` (about ``sqrt(chunks)`` when converging)."""
    size = len(samples) // chunks
    small = sum(total_variation(samples[c * size:(c + 1) * size], exact) for c in range(chunks)) / chunks
    large = total_variation(samples[: chunks * size], exact)
    return {"small": small, "large": large, "ratio": small / large if large else float("inf")}


def _bonus_from_draft(rnd, target_logits):
    """Control: a row that accepted every draft takes the draft's own proposal
    at the bonus slot, without the target's acceptance test."""
    verdict = acceptance.sampled(rnd, target_logits)
    k = rnd.drafts.shape[1]
    if k:
        q = rnd.sampler.q(rnd.draft_logits[k])
        y = rnd.sampler.propose(q, rnd.sampler.u(rnd.requests, (rnd.start + k).tolist(), "draft", q))
        full = verdict.accepted_drafts == k
        verdict.proposal[:, k] = torch.where(full, y, verdict.proposal[:, k])
    return verdict


def _warp_p_only(rnd, target_logits):
    """Control: the drafts were drawn from the warped ``q`` (as a draft model's
    own sampling does), but acceptance and residual use the unwarped ``q``
    against the warped ``p``. (Using the unwarped ``q`` for both is no bug:
    the rule is exact for any ``q``, Spec §5.5.)"""
    return acceptance.sampled(replace(rnd, sampler=replace(rnd.sampler, warp_draft=False)), target_logits)


def _shared_stream(seed: int = 0):
    """Control: uniforms drawn in call order from one generator for the whole batch."""
    generator = torch.Generator().manual_seed(seed)

    def uniforms(keys, positions, purpose, like):
        return torch.rand(len(keys), generator=generator, dtype=torch.float64).to(like.device)

    return uniforms


def controls() -> dict:
    """``{name: (sampler -> sampler, steps)}``: how each negative control changes
    a correct sampler and the round's steps."""
    return {
        "greedy draft": (lambda s: replace(s, propose=lambda q, u: q.argmax(-1)), STEPS),
        "bonus from the draft": (lambda s: s, replace(STEPS, accept_sampled=_bonus_from_draft)),
        "residual without max(0, ·)": (lambda s: replace(s, residual=lambda p, q: p - q), STEPS),
        "warping p only": (lambda s: s, replace(STEPS, accept_sampled=_warp_p_only)),
        "stream shared by the batch": (lambda s: replace(s, uniforms=_shared_stream()), STEPS),
    }


def sample_continuations(target, draft, prompt: list[int], n: int, count: int, warping: Warping,
                         k: int = 2, control: str | None = None, first_seed: int = 0) -> list[tuple]:
    """``count`` sampled ``n``-token continuations of ``prompt`` (seeds
    ``first_seed ..``), decoded with EQSPEC in one batch, optionally under a
    negative control (a name of :func:`controls`)."""
    from .reference import Models, decode

    change, steps = controls()[control] if control else ((lambda s: s), STEPS)
    sampler = change(Sampler(warping, {r: (first_seed + r, 0) for r in range(count)}))
    decoder = decode(Models(target, draft), [list(prompt)] * count, list(range(count)), Fixed(k), n, None,
                     replace(steps, sampler=sampler))
    with torch.no_grad():
        while True:
            try:
                next(decoder)
            except StopIteration as stop:
                return [tuple(stop.value[r].tokens) for r in range(count)]


def outcomes(vocab: int, n: int) -> list[tuple]:
    """Every ``n``-token continuation over ``vocab`` tokens, in order (for plots)."""
    return list(itertools.product(range(vocab), repeat=n))
