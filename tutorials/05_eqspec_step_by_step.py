# %% [markdown]
# # 5. EQSPEC step by step
#
# EQSPEC is the paper's answer to the ragged batch: after verification, give
# every row its own `a_i` tokens and make the batch rectangular again by
# **unpad – append – repad** (Spec §4.4), shifting each row's KV cache by the
# same amount `δ_i` (Spec §4.5). This chapter follows one ragged round on a
# small case, checks every invariant after every step (in the *semantic* mode,
# which also recomputes every cached key and value from scratch), and then
# breaks the algorithm on purpose to see which invariant notices.
#
# The pictures label row `i` of a batch with its padding `p_i` and its content
# length `c_i` (prompt plus committed tokens); in a round it accepts `m_i` of the
# `k` drafts and commits `a_i = m_i + 1` tokens, and a realignment shifts it by
# `δ_i` slots. All symbols, with their names in the code:
# [Spec §1 Notation](../../spec/01-notation/).

# %%
import batchspec
from batchspec import faults, trace, viz
from batchspec.invariants import InvariantViolation
from batchspec.testing import reference_greedy
from batchspec.viz.cells import caption

setup = viz.tutorial_setup()
target, draft, eos = setup.target, setup.draft, setup.eos_token_id
prompts = [p[-n:] for p, n in zip(setup.prompts(4), (6, 9, 12, 15))]
k = 4
recorded = trace.record(
    target,
    draft,
    prompts,
    "eqspec",
    num_draft_tokens=k,
    max_new_tokens=8,
    eos_token_id=eos,
    alphabet=setup.alphabet,
    semantic=True,
)

# %% [markdown]
# ## The batch after prefill
#
# Four prompts of lengths 6 to 15, left-padded into one grid of width `L = 15`.
# Row `i` has `p_i` padding slots, then `c_i` content tokens: `p_i + c_i = L`
# (invariant I1). The prefill makes no call: both caches are still empty
# (Spec §4.1). Round 1's first draft call feeds the whole prompt, and its
# verification feeds the prompt and the drafts, so the target's first token
# comes from the call that verifies the first drafts, as in transformers'
# `generate`. From then on each cache holds slots `0 .. L-2` at every round
# boundary; the newest token of every row leads the next call (Spec §2.3).

# %%
assert [cache["length"] for cache in recorded.steps[0]["observation"]["caches"].values()] == [0, 0]
viz.draw_grid(recorded, recorded.steps[0]);

# %% [markdown]
# ## Steps 1–2: draft, then verify
#
# The draft proposes `k = 4` tokens per row (yellow), then one target call
# verifies all of them. Each row keeps its own `m_i` accepted drafts (green),
# then the target's bonus (pink); the rest are rejected (hatched).

# %%
ragged = next(
    s["decision"]
    for s in recorded.steps
    if s["decision"] and len(set(s["decision"]["appended"])) > 1
)
r = ragged["round"]
print(f"round {r}: m_i = {ragged['accepted']}, a_i = {ragged['appended']}")
viz.draw_grid(recorded, recorded.find(r, "verify"));

# %% [markdown]
# ## Step 5: unpad – append – repad
#
# Spec §4.4: with `c_i` the row's length before the round and `a_i` the tokens
# it commits,
#
# * `L' = max_i (c_i + a_i)`, the new width;
# * `p'_i = L' - c_i - a_i`, the new padding;
# * `δ_i = p'_i - p_i`, how far the row moves right (left when negative).
#
# We recompute them from the verify step's grid and compare with what the
# round recorded after its realignment:

# %%
verify = recorded.find(r, "verify")["observation"]
after = recorded.find(r, "realign")
c, p, a = verify["length"], verify["pad"], ragged["appended"]
width = max(ci + ai for ci, ai in zip(c, a))
new_pad = [width - ci - ai for ci, ai in zip(c, a)]
delta = [q - pi for q, pi in zip(new_pad, p)]
print(f"L' = {width}, p'_i = {new_pad}, δ_i = {delta}")
assert width == ragged["width"] == len(after["observation"]["tokens"][0])
assert new_pad == after["observation"]["pad"] and delta == ragged["delta"]
viz.draw_round(recorded, r, last=22);

# %% [markdown]
# ## The cache realignment
#
# The grid moved; the caches must move with it, or slot `s` of a row would hold
# the key of a different token than the grid says. EQSPEC realigns every cache
# row in place, shifting it by `δ_i`: new slot `s` holds old slot `s - δ_i`
# (Spec §4.5). The trace records, for every cache slot, which token and
# position its key came from (its *provenance*), so we can draw the
# realignment as it really happened: each arrow goes from the slot a key was
# copied from to where it landed.

# %%
before = recorded.steps[after["index"] - 1]
for j, request in enumerate(after["observation"]["requests"]):
    sources = after["observation"]["caches"]["target"]["source"][j]
    pad_j, width_j = after["observation"]["pad"][j], len(after["observation"]["tokens"][j])
    d = ragged["delta"][ragged["requests"].index(request)]
    assert all(sources[s] == [request, s - d] for s in range(pad_j, width_j - 1))
viz.draw_shift(recorded, before, after, last=22);

# %% [markdown]
# ## Positions in the next round
#
# The first draft call of the next round feeds each row's newest token, and
# the token before it when the round deferred its catch-up: a row that
# accepted every draft left the draft cache one slot short, and this call
# feeds that slot instead of a call of its own (Spec §4.2.1). Each position
# must continue the row: content token `j` at position `j`, whatever the
# padding (I2). Nothing is outlined: every position is what I2 expects.

# %%
next_draft = recorded.find(r + 1, "draft")
viz.draw_positions(recorded, next_draft, last=22);

# %% [markdown]
# ## Every invariant after every step
#
# I1 alignment, I2 positions, I3 cache correspondence (here in the semantic mode:
# every cached key and value is compared with a fresh batch-1 forward of the
# row), I4 draft/target sync, I5 greedy verification (Spec §3). The recorded
# trace holds each step's violations:

# %%
for rnd in range(recorded.steps[-1]["round"] + 1):
    steps = recorded.round_steps(rnd)
    names = " → ".join(s["step"] for s in steps)
    print(
        f"round {rnd}: {len(steps):>2} steps, "
        f"{sum(len(s['violations']) for s in steps)} violations  ({names})"
    )
assert recorded.violations == []
assert recorded.result["sequences"] == [reference_greedy(target, q, 8, eos) for q in prompts]

# %% [markdown]
# ## The fault catalogue
#
# `batchspec.faults` holds real bugs of this field, each injected into EQSPEC
# through the one documented hook (a replaced step, no flag in the loop). We run
# each one on the same prompts with semantic checks, which raise at the first
# violation, and note which invariant caught it and when.

# %%
rows = []
for name, fault in faults.CATALOGUE.items():
    try:
        result = faults.run(
            name,
            target,
            draft,
            prompts,
            num_draft_tokens=k,
            max_new_tokens=8,
            eos_token_id=eos,
            check_invariants="semantic",
        )
        caught, exact = None, result.sequences == recorded.result["sequences"]
    except InvariantViolation as error:
        caught, exact = (error.invariant, error.round, error.step), None
    rows.append((name, caught, exact))
    where = (
        f"{caught[0]} in round {caught[1]}, step {caught[2]!r}"
        if caught
        else f"not caught; output {'exact' if exact else 'WRONG'}"
    )
    print(f"{name:<20} {where:<34} ({fault.shape})")
assert all(caught or exact for _, caught, exact in rows), "a fault changed the output unseen"
assert sum(caught is not None for _, caught, _ in rows) >= 5

# %% [markdown]
# A fault that is not caught here did not fire on these prompts: for instance
# `pad_from_token_id` needs the model to emit the pad id, which this pair's
# text never does; its output stays exact, as the assertion above checks.
#
# ## One fault, up close
#
# `permuted_rows` takes each cache row from the wrong batch row during the
# realignment. The grid is right, so the structural checks cannot see it; the
# semantic I3 does, and the provenance shows the foreign keys (orange, crossed).

# %%
broken = trace.record(
    target,
    draft,
    prompts,
    "eqspec",
    fault="permuted_rows",
    num_draft_tokens=k,
    max_new_tokens=8,
    eos_token_id=eos,
    alphabet=setup.alphabet,
    semantic=True,
)
first = broken.first_violation()
print(caption(first))  # which invariant, where, expected vs actual
assert first["invariant"] == "I3"
step = next(s for s in broken.steps if first in s["violations"])
viz.draw_violation(broken, last=22)
viz.draw_shift(broken, broken.steps[step["index"] - 1], step, last=22);

# %% [markdown]
# ## What to remember
#
# * After verification each row commits its own `a_i`; unpad – append – repad
#   rebuilds a tight rectangle with `L' = max(c_i + a_i)`, `p'_i = L' - c_i - a_i`
#   and moves each row by `δ_i = p'_i - p_i` (Spec §4.4).
# * The caches move by the same `δ_i`, in place: one copy per moving row (Spec §4.5);
#   the trace's provenance shows every slot landing where the grid says.
# * All five invariants hold after every step, even in the semantic mode; each
#   catalogued bug that changes anything is caught, most in the round it fires.
