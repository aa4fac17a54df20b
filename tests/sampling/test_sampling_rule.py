"""The per-position rule in closed form (Spec §4.3.2, §5.5), float64.

The rule's output distribution, computed from the code's own functions
(``accept_probability``, ``residual``, ``draw``, ``decide``), equals ``p``
to 1e-12 for random ``p``, ``q`` (zeros in either, disjoint supports,
``p = q``), after each warping. The same computation on the deliberately
wrong rules of the negative controls is shown to differ from ``p``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from batchspec.reference import sampling
from batchspec.reference.sampling import Sampler, Warping, decide, draw, output_distribution, uniform

V = 6
WARPINGS = [Warping(), Warping(temperature=0.5), Warping(temperature=2.0), Warping(top_k=3),
            Warping(top_p=0.7), Warping(temperature=0.7, top_k=4, top_p=0.9)]


def _cases(seed: int = 0):
    """``(name, p_logits, q_logits)`` ``[1, V]``: random, zeros in p, in q, disjoint, equal."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(8):
        p, q = (torch.randn(1, V, generator=g, dtype=torch.float64) * 2 for _ in range(2))
        out.append((f"random{i}", p, q))
    inf = float("-inf")
    p, q = torch.randn(1, V, generator=g, dtype=torch.float64), torch.randn(1, V, generator=g, dtype=torch.float64)
    out.append(("zeros_in_p", p.masked_fill(torch.tensor([[1, 0, 1, 0, 0, 1]], dtype=torch.bool), inf), q))
    out.append(("zeros_in_q", p, q.masked_fill(torch.tensor([[0, 1, 1, 0, 1, 0]], dtype=torch.bool), inf)))
    out.append(("disjoint", p.masked_fill(torch.tensor([[1, 1, 1, 0, 0, 0]], dtype=torch.bool), inf),
                q.masked_fill(torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.bool), inf)))
    out.append(("equal", p, p.clone()))
    return out


CASES = _cases()


def _intervals(weights: torch.Tensor):
    """``(token, measure, midpoint)`` of each CDF interval of ``draw`` over ``weights`` ``[1, V]``."""
    cdf = torch.cat([weights.new_zeros(1), weights[0].cumsum(0)]) / weights.sum()
    return [(x, float(cdf[x + 1] - cdf[x]), float(cdf[x] + cdf[x + 1]) / 2)
            for x in range(weights.shape[1]) if cdf[x + 1] > cdf[x]]


def rule_distribution(sampler: Sampler, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The exact output distribution of ``decide`` with ``sampler``'s parts:
    ``decide`` is constant on each cell of (draft, accept, residual)
    uniforms, so it is evaluated once per cell at the cell's midpoint and
    weighted by the cell's measure."""
    out = torch.zeros(V, dtype=torch.float64)
    residual = sampler.residual(p, q)
    for y, w_draft, u_draft in _intervals(q):
        proposed = sampler.propose(q, torch.tensor([u_draft], dtype=torch.float64))
        beta = float(sampling.accept_probability(p, q, proposed))
        accept_cells = [(beta, beta / 2), (1 - beta, (1 + beta) / 2)]
        for (w_accept, u_accept), (_, w_res, u_res) in itertools.product(accept_cells, _intervals(residual)):
            if w_accept == 0:
                continue
            fixed = {"accept": u_accept, "residual": u_res}
            pinned = replace(sampler, uniforms=lambda keys, pos, purpose, like: like.new_tensor([fixed[purpose]]))
            _, token = decide(pinned, p, q, proposed, [0], [0])
            out[int(token)] += w_draft * w_accept * w_res
    return out


@pytest.mark.parametrize("warping", WARPINGS, ids=repr)
@pytest.mark.parametrize("name,p_logits,q_logits", CASES, ids=[c[0] for c in CASES])
def test_rule_output_is_p(warping, name, p_logits, q_logits):
    sampler = Sampler(warping, {0: (0, 0)})
    p, q = sampler.p(p_logits), sampler.q(q_logits)
    assert torch.allclose(p.sum(), torch.tensor(1.0, dtype=torch.float64), atol=1e-15)
    assert (output_distribution(p, q) - p).abs().max() < 1e-12  # Spec §5.5, closed form
    assert (rule_distribution(sampler, p, q) - p[0]).abs().max() < 1e-12  # decide() itself, cell by cell


def test_closed_form_detects_a_wrong_residual():
    """A rule that is wrong changes the closed-form distribution: the check can
    fail. Here a rejection resamples from ``p`` instead of ``norm(max(0, p - q))``."""
    sampler = replace(Sampler(keys={0: (0, 0)}), residual=lambda p, q: p)
    worst = max(float((rule_distribution(sampler, sampler.p(pl), sampler.q(ql)) - sampler.p(pl)[0]).abs().max())
                for name, pl, ql in CASES if name != "equal")
    assert worst > 1e-2


def test_draw_is_the_inverse_cdf():
    w = torch.tensor([[0.0, 0.25, 0.0, 0.5, 0.25, 0.0]], dtype=torch.float64)
    picks = [int(draw(w, torch.tensor([u], dtype=torch.float64))) for u in (0.0, 0.2, 0.25, 0.7, 0.75, 0.99, 1 - 1e-17)]
    assert picks == [1, 1, 3, 3, 4, 4, 4]  # zero-weight tokens are never drawn, even at the ends


def test_uniforms_are_keyed_and_independent_of_order():
    a = [uniform((3, 1), t, "accept") for t in range(50)]
    assert a == [uniform((3, 1), t, "accept") for t in reversed(range(50))][::-1]
    assert all(0 <= u < 1 for u in a) and len(set(a)) == 50
    assert uniform((3, 1), 7, "accept") != uniform((3, 1), 7, "draft")
    assert uniform((3, 1), 7, "accept") != uniform((3, 2), 7, "accept")
    assert uniform((3, 1), 7, "accept") != uniform((4, 1), 7, "accept")


def test_warping_matches_transformers_sampling_order():
    """temperature, then top-k, then top-p: top-k=2 of a temperature-sharpened row keeps 2 tokens,
    and top-p keeps the smallest set reaching the mass."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]], dtype=torch.float64)
    assert int((Warping(temperature=0.5, top_k=2).probs(logits) > 0).sum()) == 2
    probs = logits.softmax(-1)[0]
    kept = Warping(top_p=0.8).probs(logits)[0] > 0
    assert float(probs[kept].sum()) >= 0.8 and float(probs[kept][:-1].sum()) < 0.8
    assert torch.allclose(Warping(temperature=2.0).probs(logits), (logits / 2).softmax(-1))
