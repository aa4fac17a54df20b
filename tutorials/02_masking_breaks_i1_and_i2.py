# %% [markdown]
# # 2. Masking breaks I1 and I2
#
# The most tempting fix for the ragged batch of chapter 1 is to *not move
# anything*: every row grows by the same number of slots `A = max_i a_i`, and a
# row that accepted fewer drafts keeps its rejected drafts in the grid and in the
# KV cache, with zeros in the attention mask so that nothing attends them. This
# is what BSP-style batch speculative decoding does (BSP: one of the batch
# implementations the paper measured, at 0.2–3.5 % exact match). It looks
# right, the shapes all work out, and the paper reports that its output
# quietly drifts.
#
# batchspec implements it on purpose as `method="masking"` (Spec §6.1) and
# checks it with the same invariants as EQSPEC. Here we watch it fail.
#
# The pictures label row `i` of a batch with its padding `p_i` and its content
# length `c_i` (prompt plus committed tokens); in a round it accepts `m_i` of the
# `k` drafts and commits `a_i = m_i + 1` tokens, and a realignment shifts it by
# `δ_i` slots. All symbols, with their names in the code:
# [Spec §1 Notation](../../spec/01-notation/).

# %%
import matplotlib.pyplot as plt

import batchspec
from batchspec import trace, viz
from batchspec.invariants import InvariantViolation
from batchspec.testing import reference_greedy
from batchspec.viz.cells import caption

setup = viz.tutorial_setup()
target, draft, eos = setup.target, setup.draft, setup.eos_token_id
prompts = setup.prompts(8)
# Short prompts for the pictures, so that the padding fits on screen.
short = [p[-n:] for p, n in zip(prompts, (6, 9, 12, 15))]

# %% [markdown]
# ## The first violation
#
# We record a masking run on four short prompts (`batchspec.trace.record` keeps
# every step and every violation) and ask for the first violation.

# %%
masked = trace.record(
    target,
    draft,
    short,
    "masking",
    num_draft_tokens=4,
    max_new_tokens=12,
    eos_token_id=eos,
    alphabet=setup.alphabet,
)
first = masked.first_violation()
print(caption(first))  # which invariant, where, expected vs actual

# %% [markdown]
# **I1, rectangular alignment** (Spec §3.1): every row must be `p_i` padding
# slots followed by `c_i` content tokens, with no holes. The first round in which
# the rows accepted different numbers of drafts left a hole in the shorter rows:


# %%
def first_ragged_round(recorded):
    """The first round whose rows appended different numbers of tokens (a_i, Spec §1)."""
    for step in recorded.steps:
        d = step["decision"]
        if d and len(set(d["appended"])) > 1:
            return d["round"]


ragged = first_ragged_round(masked)
print("first ragged round:", ragged)
assert (first["invariant"], first["round"]) == ("I1", ragged)
viz.draw_violation(masked);

# %% [markdown]
# The outlined cell is the first hole: a rejected draft (hatched) that stays in
# the grid with mask 0. The caption reads the violation: the row no longer
# satisfies `p_i + c_i = L`.
#
# Is this bad luck with these prompts? At any batch size from 2 up, the first
# violation is I1 in the first ragged round. (The checker stops at the first
# violation when `check_invariants=True`, which makes this cheap.)

# %%
options = dict(method="masking", num_draft_tokens=4, max_new_tokens=12, eos_token_id=eos)
for batch_size in (2, 4, 8):
    try:
        batchspec.generate(
            target, draft, prompts, batch_size=batch_size, check_invariants=True, **options
        )
        caught = None
    except InvariantViolation as error:
        caught = error
    assert caught is not None and caught.invariant == "I1"
    print(
        f"batch {batch_size}: first violation {caught.invariant} "
        f"in round {caught.round}, step {caught.step!r}"
    )
    if setup.pair == "default":  # these prompts are ragged from round 1 on the default pair
        assert caught.round == 1

# %% [markdown]
# ## Then the positions go wrong (I2)
#
# A hole is not harmless. Masking keeps counting positions by slot (`s - p_i`),
# so after a hole every later token of the row is fed a position one step too
# far, for every hole. **I2, position continuity** (Spec §3.2), says content token
# `j` must sit at position `j`: the count of attended slots before it, which is
# `cumsum(mask) - 1` of the mask passed with the call.
#
# Here is the first draft call of the round after the hole: the positions fed,
# outlined where they break I2, and below them the positions I2 expects.

# %%
after_hole = masked.find(ragged + 1, "draft")
i2 = [v for v in after_hole["violations"] if v["invariant"] == "I2"]
print(
    f"round {ragged + 1}, first draft call: {len(i2)} I2 violations, e.g. row {i2[0]['row']}: "
    f"expected position {i2[0]['expected']}, fed {i2[0]['actual']}"
)
assert i2
viz.draw_positions(masked, after_hole);

# %% [markdown]
# ## What it does to the text
#
# The model now reads its own context at the wrong positions, with rejected
# drafts in the cache. We run both methods on eight prompts at batch sizes 1, 2,
# 4 and 8 and compare with the exact output (the target's own `generate`).
# First the text, at batch 4:

# %%
N, sizes = 16, (1, 2, 4, 8)
references = [reference_greedy(target, p, N, eos) for p in prompts]
outputs = {
    (method, batch_size): batchspec.generate(
        target,
        draft,
        prompts,
        method=method,
        num_draft_tokens=4,
        max_new_tokens=N,
        batch_size=batch_size,
        eos_token_id=eos,
    ).sequences
    for method in ("eqspec", "masking")
    for batch_size in sizes
}
for i in range(3):
    print(f"prompt  {setup.text(prompts[i][-30:])!r}")
    print(f"  exact   {setup.text(references[i])!r}")
    print(f"  eqspec  {setup.text(outputs['eqspec', 4][i])!r}")
    print(f"  masking {setup.text(outputs['masking', 4][i])!r}\n")
assert outputs["eqspec", 4] == references
assert outputs["masking", 4] != references

# %% [markdown]
# ## Exact-match rate against batch size
#
# The paper's Table 1 counts how many outputs equal the reference exactly. The
# same measurement on this pair: masking is exact at batch 1 (nothing is ever
# ragged there), and loses exactness once rows can disagree.

# %%
rates = {
    method: [
        100 * sum(o == r for o, r in zip(outputs[method, b], references)) / len(prompts)
        for b in sizes
    ]
    for method in ("eqspec", "masking")
}
for method, values in rates.items():
    print(f"{method:8} exact match (%) by batch size:", dict(zip(sizes, values)))
assert rates["eqspec"] == [100.0] * len(sizes)
assert rates["masking"][0] == 100.0 and min(rates["masking"][1:]) < 100.0

fig, ax = plt.subplots(figsize=(5, 2.8), dpi=90)
for method, marker in (("eqspec", "o"), ("masking", "s")):
    ax.plot(sizes, rates[method], marker=marker, label=method)
ax.set(
    xlabel="batch size",
    ylabel="exact match (%)",
    xticks=sizes,
    ylim=(-5, 105),
    title=f"exact match against batch size ({setup.pair} pair, {len(prompts)} prompts)",
)
ax.legend();

# %% [markdown]
# ## What to remember
#
# * Masking keeps the tensor rectangular by leaving rejected drafts in place,
#   zeroed in the mask. The first ragged round breaks **I1** (a hole in the row).
# * The next call then feeds positions counted over the holes, breaking **I2**,
#   and the cache holds rejected drafts' keys and values.
# * The output stays exact at batch 1 and stops being exact at batch ≥ 2: the
#   failure is silent unless you check, which is what the invariants are for.
