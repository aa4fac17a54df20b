# %% [markdown]
# # 4. DSD-style decoding — what it breaks, and where
#
# A third design, after DSD (dynamic speculative decoding, one of the batch
# implementations the paper measured, at about 0 % exact match; Spec §6.3),
# makes three choices at once:
#
# * **no attention mask**: every call attends every slot, padding included,
#   and position ids are plain slot indices;
# * **padding that only grows**: after a round each row is left-padded by
#   `A - a_i` more slots and its caches are shifted right to match; nothing is
#   ever unpadded;
# * **the draft's bonus**: after the accepted drafts it commits the draft's
#   own next token instead of the target's.
#
# Each choice breaks a different invariant, and the checker tells them apart.

# %%
import matplotlib.pyplot as plt

import batchspec
from batchspec import trace, viz
from batchspec.testing import reference_greedy
from batchspec.viz.cells import caption

setup = viz.tutorial_setup()
target, draft, eos = setup.target, setup.draft, setup.eos_token_id
prompts = setup.prompts(4)
short = [p[-n:] for p, n in zip(prompts, (6, 9, 12, 15))]
options = dict(num_draft_tokens=4, max_new_tokens=12, eos_token_id=eos, alphabet=setup.alphabet)

# %% [markdown]
# ## At batch 1: the bonus (I5)
#
# With one row there is no padding, so the mask and the positions are right.
# What remains is the bonus. **I5, greedy verification** (Spec §3.5), checks
# every committed token against the target's logits of that verify call: the
# token after the accepted drafts must be the target's argmax there.

# %%
single = trace.record(target, draft, short[:1], "dsd", **options)
first = single.first_violation()
print(caption(first))  # which invariant, where, expected vs actual
rejecting = next(
    s["decision"]["round"]
    for s in single.steps
    if s["decision"] and s["decision"]["accepted"][0] < s["decision"]["drafted"]
)
assert (first["invariant"], first["step"], first["round"]) == ("I5", "verify", rejecting)
viz.draw_violation(single);

# %% [markdown]
# The first round in which the draft was rejected is the first round that
# commits a token the target did not choose. From there the output is no
# longer the target's:

# %%
reference = reference_greedy(target, short[0], 12, eos)
print("exact", repr(setup.text(reference)))
print("dsd  ", repr(setup.text(single.result["sequences"][0])))
assert single.result["sequences"][0] != reference

# %% [markdown]
# ## At batch 4: padding that is attended (I1)
#
# With prompts of different lengths the shorter rows are left-padded, and DSD
# passes no mask: the padding is attended like content. **I1** catches it at
# prefill, before a single token is drafted.

# %%
batch = trace.record(target, draft, short, "dsd", **options)
first = batch.first_violation()
print(caption(first))  # which invariant, where, expected vs actual
assert (first["invariant"], first["step"]) == ("I1", "prefill")

# %% [markdown]
# Note what **I2** says at that step: nothing. Positions are slot indices, and
# with an all-ones mask `cumsum(mask) - 1` *is* the slot index, so positions and
# mask agree with each other. They are consistently wrong: the padding counts
# as context. Only I1, which compares the mask with the row's `p_i`, can see it.

# %%
prefill = batch.steps[0]
assert not [v for v in prefill["violations"] if v["invariant"] == "I2"]
viz.draw_positions(batch, prefill, last=20);

# %% [markdown]
# ## Padding that only grows
#
# After each round a row is padded by `A - a_i` more slots. EQSPEC also re-pads
# every round, but it *unpads* first, so its grid is always as narrow as the
# longest row (Spec §5.1.1: the grid is tight). Each row's padding `p_i`, round
# by round (a line ends when its row finishes):

# %%
eqspec = trace.record(target, draft, short, "eqspec", **options)


def padding_per_round(recorded):
    """Per request, its p_i after prefill and after each round it stayed for."""
    out = {}
    for s in recorded.steps:
        if s["step"] in ("prefill", "realign"):
            for request, p in zip(s["observation"]["requests"], s["observation"]["pad"]):
                out.setdefault(request, []).append(p)
    return out


grows, tight = padding_per_round(batch), padding_per_round(eqspec)
for request in grows:
    print(f"request {request}: p_i per round  dsd {grows[request]}   eqspec {tight[request]}")
    assert grows[request] == sorted(grows[request])  # never unpadded
assert any(p[-1] > p[0] for p in grows.values())
for s in eqspec.steps:  # tight: some row has no padding at all after every realignment
    if s["step"] in ("prefill", "realign"):
        assert min(s["observation"]["pad"]) == 0

fig, ax = plt.subplots(figsize=(5.5, 2.8), dpi=90)
for request in grows:
    ax.plot(grows[request], "s-", color="#D55E00", label="dsd" if request == 0 else None)
    ax.plot(tight[request], "o--", color="#0072B2", label="eqspec" if request == 0 else None)
ax.set(
    xlabel="round",
    ylabel="p_i (padding of the row)",
    title="each row's padding, round by round",
)
ax.legend();

# %% [markdown]
# The final grid shows it: every row carries the padding of every earlier round.

# %%
viz.draw_grid(batch, [s for s in batch.steps if s["step"] == "realign"][-1], last=40);

# %% [markdown]
# ## What to remember
#
# * The **draft's bonus** breaks I5 at the first rejection, even at batch 1: a
#   committed token must always be the target's choice.
# * **No mask** breaks I1 as soon as any row is padded, at prefill. I2 alone
#   cannot see it, because the positions agree with the (wrong) mask.
# * **Padding without unpadding** grows the grid every round; EQSPEC's unpad –
#   append – repad keeps it tight.
