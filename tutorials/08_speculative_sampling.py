# %% [markdown]
# # 8. Speculative sampling
#
# Greedy speculative decoding is checkable token for token: the output must
# equal the target's own greedy output. Under **sampling** the promise is
# about a *distribution*: the output is distributed exactly as sampling from
# the target. Such claims are usually checked only statistically, and they do
# break silently: forcing a greedy assistant in Hugging Face's assisted
# generation changed the distribution (transformers #30778, reverted in transformers #33534).
#
# batchspec makes sampled output checkable token for token again (Spec §4.3.2).
# Every random number is **keyed** by the request, the absolute position in its
# sequence and its purpose, `u(key, t, purpose)`, a hash, never a stream shared
# by the batch. Position `t` is then decided by one rule, whatever round or
# batch it falls in:
#
# 1. the draft proposes `y_t ~ q_t` using `u(key, t, "draft")`;
# 2. the target accepts it if `u(key, t, "accept") < min(1, p_t(y_t) / q_t(y_t))`;
# 3. otherwise `x_t ~ norm(max(0, p_t - q_t))` using `u(key, t, "residual")`.
#
# The bonus slot after `k'` accepted drafts uses the same rule, with the
# draft's `q` from the catch-up call. So a request's sample is a function of
# (prompt, seed) alone.

# %%
import time

import matplotlib.pyplot as plt
import torch

import batchspec
from batchspec import viz
from batchspec.distribution import (controls, exact_distribution, sample_continuations, tiny_vocab_pair,
                                    total_variation)
from batchspec.reference.sampling import Sampler, Warping, output_distribution
from batchspec.testing import reference_sampled

torch.set_num_threads(1)
started = time.perf_counter()
setup = viz.tutorial_setup(torch.float64)  # BATCHSPEC_TUTORIAL_PAIR / _DEVICE; float64: exactness is a float64 claim
target, draft, device = setup.target, setup.draft, setup.device
prompts = setup.prompts(8, 0)

# %% [markdown]
# ## The rule at one position
#
# Take one prompt and look at the next position: the target's distribution
# `p`, the draft's `q`, the part the acceptance test keeps, `min(p, q)`, and
# the **residual** `max(0, p - q)` the rejection draws from. Kept plus
# residual is `p` again, token by token: that is the whole proof (Spec §5.5).

# %%
warping = Warping(temperature=1.0)
sampler = Sampler(warping)
with torch.no_grad():
    ids = torch.tensor([prompts[0]], device=device)
    p = sampler.p(target(input_ids=ids).logits[:, -1])  # [1, V]
    q = sampler.q(draft(input_ids=ids).logits[:, -1])
closed = output_distribution(p, q)
assert (closed - p).abs().max() < 1e-12  # the rule's output distribution is p
alpha = float(torch.minimum(p, q).sum())
show = (p + q)[0].argsort(descending=True)[:12].cpu()  # the 12 likeliest tokens of either model
x = range(len(show))
fig, axes = plt.subplots(1, 2, figsize=(10, 2.8), dpi=90, sharey=True)
axes[0].bar([i - 0.2 for i in x], p[0, show].tolist(), 0.4, label="p (target)", color="#0072B2")
axes[0].bar([i + 0.2 for i in x], q[0, show].tolist(), 0.4, label="q (draft)", color="#E69F00")
axes[0].set(title="the two distributions", xticks=list(x), xticklabels=[str(int(t)) for t in show])
kept = torch.minimum(p, q)[0, show].tolist()
residual = (p - q).clamp(min=0)[0, show].tolist()
axes[1].bar(x, kept, 0.6, label="min(p, q): accepted", color="#009E73")
axes[1].bar(x, residual, 0.6, bottom=kept, label="max(0, p - q): residual", color="#CC79A7")
axes[1].set(title=f"kept + residual = p   (α = Σ min(p, q) = {alpha:.2f})", xticks=list(x),
            xticklabels=[str(int(t)) for t in show])
for ax in axes:
    ax.legend(fontsize=9)
    ax.set_xlabel("token id")
plt.tight_layout()
plt.show()

# %% [markdown]
# `α = Σ min(p, q)` is the probability that this position's draft is
# accepted; it is what the statistics use to predict tokens per target call.
#
# ## The same sample at every batch size
#
# Because no random number depends on the batch, a request's tokens are the
# same at batch size 1, 2, 4 and 8, for every `k`, under EQSPEC and EXSPEC,
# and equal to the **per-position reference**: a slow loop that runs both
# models on the whole prefix at batch 1, without any cache, and applies the
# rule with the same keyed uniforms.

# %%
N = 16
sampling = dict(do_sample=True, temperature=0.8, top_p=0.95, seed=7)
reference = [reference_sampled(target, draft, prompt, N, (7, r), None, 0.8, None, 0.95)
             for r, prompt in enumerate(prompts)]
runs = {}
for method, batch_size, k in [("eqspec", 1, 4), ("eqspec", 2, 2), ("eqspec", 4, 4), ("eqspec", 8, 3),
                              ("exspec", 4, 4), ("exspec", 8, 2)]:
    result = batchspec.generate(target, draft, prompts, method=method, num_draft_tokens=k, max_new_tokens=N,
                                batch_size=batch_size, check_invariants=True, **sampling)
    assert result.sequences == reference, (method, batch_size, k)  # token for token, invariants on (I8 too)
    runs[f"{method} B={batch_size} k={k}"] = result.sequences[0]
print("row 0 under every run:", reference[0])

fig, ax = plt.subplots(figsize=(9, 2.6), dpi=90)
grid = torch.tensor(list(runs.values()) + [reference[0]])
ax.imshow(grid.numpy(), cmap="viridis", aspect="auto")
ax.set(yticks=range(len(runs) + 1), yticklabels=list(runs) + ["per-position reference"],
       xlabel="generated position", title="prompt 0, seed 7: one row per run (colour = token id)")
plt.tight_layout()
plt.show()

# %% [markdown]
# Every row of the picture is the same: the batch, `k` and the method change
# how many target calls a sample costs, never which sample it is.
#
# ## The distribution, and five bugs beside it
#
# Token-for-token equality with the reference says the code applies the rule;
# that the rule samples `p` is the theorem. To see the theorem hold *and* to
# see the known bugs break it, take a vocabulary of four tokens, where the
# exact distribution of 3-token continuations (64 outcomes) can be
# enumerated, and sample 8,000 seeds of one prompt in one batch. The
# total-variation distance to the exact distribution should shrink like
# `1/sqrt(n)` (vLLM's test compares this convergence against negative
# controls instead of using a fixed tolerance). The controls:
#
# * **greedy draft** (transformers #30778): propose the argmax of `q`, accept with `min(1, p/q)`;
# * **bonus from the draft**: a row that accepted everything takes the draft's own next proposal;
# * **residual without max(0, ·)**: draw the replacement from `p - q` directly;
# * **warping p only**: drafts drawn from the warped `q`, accepted against the unwarped `q`;
# * **stream shared by the batch**: right distribution, but each row's numbers depend on its neighbours.

# %%
tiny_target, tiny_draft = tiny_vocab_pair()
tiny_warping = Warping(temperature=0.7, top_k=3)
exact = exact_distribution(tiny_target, [2, 3, 1], 3, tiny_warping)
sizes = [125, 250, 500, 1000, 2000, 4000, 8000]
curves = {}
for name in [None] + list(controls()):
    samples = sample_continuations(tiny_target, tiny_draft, [2, 3, 1], 3, sizes[-1], tiny_warping, control=name)
    curves[name or "speculative sampling"] = [total_variation(samples[:n], exact) for n in sizes]
for name, curve in curves.items():
    print(f"{name:<28} TV at n = 125: {curve[0]:.3f}   at n = 8000: {curve[-1]:.3f}   ratio {curve[0] / curve[-1]:.1f}")
method = curves["speculative sampling"]
for name in ["greedy draft", "bonus from the draft", "residual without max(0, ·)", "warping p only"]:
    assert curves[name][-1] > 3 * method[-1], name  # each biased control levels off far above the method

colors = ["#000000", "#D55E00", "#E69F00", "#CC79A7", "#56B4E9", "#009E73"]
fig, ax = plt.subplots(figsize=(7, 3.6), dpi=90)
for (name, curve), color in zip(curves.items(), colors):
    ax.loglog(sizes, curve, "o-", label=name, color=color, lw=2.5 if name == "speculative sampling" else 1.2)
ax.loglog(sizes, [method[0] * (sizes[0] / n) ** 0.5 for n in sizes], "--", color="grey", label="1/sqrt(n)")
ax.set(xlabel="samples n", ylabel="total variation to the exact distribution",
       title="convergence against the negative controls")
ax.set_xticks(sizes, [str(n) for n in sizes], minor=False)  # the sample sizes, not powers of ten
ax.xaxis.set_minor_locator(plt.NullLocator())
ax.yaxis.set_major_formatter(plt.FormatStrFormatter("%g"))
ax.yaxis.set_minor_formatter(plt.FormatStrFormatter("%g"))
ax.legend(fontsize=9, loc="lower left")
plt.tight_layout()
plt.show()

# %% [markdown]
# The method follows the `1/sqrt(n)` line; the four biased controls level off
# at their bias. The shared stream converges too: it is right in
# distribution, and only the batch-size test above (or I8, or
# `tests/sampling/test_sampling_invariance.py`) can tell it apart.
#
# ## What sampling costs in acceptance
#
# Greedy acceptance needs the draft's argmax to equal the target's; sampled
# acceptance accepts with probability `min(1, p/q)`. The statistics report
# both, and, under sampling, the tokens per target call that the recorded
# `α` predict.

# %%
greedy = batchspec.generate(target, draft, prompts, num_draft_tokens=4, max_new_tokens=N).stats
sampled = batchspec.generate(target, draft, prompts, num_draft_tokens=4, max_new_tokens=N, do_sample=True,
                             seed=3).stats
print(f"greedy : acceptance {greedy.acceptance_rate:.2f}, tokens/target call {greedy.tokens_per_target_call:.2f}")
print(f"sampled: acceptance {sampled.acceptance_rate:.2f}, tokens/target call {sampled.tokens_per_target_call:.2f} "
      f"(α predicts {sampled.expected_tokens_per_target_call:.2f} before EOS and budget cuts)")
print("per-position acceptance, sampled:", [round(a, 2) for a in sampled.per_position_acceptance])
assert 1 <= sampled.tokens_per_target_call <= 5 and len(sampled.per_position_acceptance) <= 4
print(f"chapter ran in {time.perf_counter() - started:.0f} s")

# %% [markdown]
# ## What to remember
#
# * Key every random number by (request, position, purpose) and decide every
#   position, bonus included, by the same rule: the sample becomes a function
#   of (prompt, seed), the same at every batch size, `k`, method and window,
#   and a batching bug is a token mismatch again (Spec §4.3.2, §5.5.1).
# * The rule samples `p` exactly: kept `min(p, q)` plus residual
#   `max(0, p - q)` is `p` (Spec §5.5). Warp `p` and `q` the same way.
# * I8 checks each committed token against the rule on the logits the models
#   really returned (Spec §3.8); the convergence ratio against negative
#   controls checks the distribution itself.
