# %% [markdown]
# # 6. EXSPEC: avoid the realignment by scheduling
#
# EQSPEC pays for every ragged round with a realignment: every row that moves
# is shifted by `δ_i`, in every layer's keys and values. The paper's second algorithm, **EXSPEC** (Spec §8), avoids it
# when it can. It keeps a **pool** of active sequences, each with its own
# unpadded batch-1 caches, and each round stacks `B` of them that have the
# **same current length**. Such a batch needs no padding, no position fix-up
# and no cache shift (Spec §5.3: all `δ_i = 0`). Only when no same-length group
# exists does it **fall back** to EQSPEC's left-padded layout.
#
# The pool looks at a **window** of at most `W` sequences; a larger window
# finds same-length groups more often and holds more caches in memory.

# %%
import matplotlib.pyplot as plt

import batchspec
from batchspec import trace, viz
from batchspec.scheduler import Scheduler
from batchspec.testing import reference_greedy

setup = viz.tutorial_setup()
target, draft, eos = setup.target, setup.draft, setup.eos_token_id
# Sixteen prompts of three nearby lengths, so that equal lengths are common.
base = setup.prompts(16)
n = min(map(len, base))
prompts = [p[: n - 2 * (i % 3)] for i, p in enumerate(base)]
print("prompt lengths:", sorted(len(p) for p in prompts))
k, N, B = 4, 16, 4

# %% [markdown]
# ## A grouped round and a fallback round
#
# We record eight of the prompts at batch 4 with a window of 8 and look at two
# verify steps: one from a round that found a same-length group (no padding at
# all) and one from a fallback round (left-padded, as EQSPEC would).

# %%
recorded = trace.record(
    target,
    draft,
    prompts[:8],
    "exspec",
    num_draft_tokens=k,
    max_new_tokens=8,
    batch_size=B,
    window_size=8,
    eos_token_id=eos,
    alphabet=setup.alphabet,
)
decisions = [s["decision"] for s in recorded.steps if s["decision"]]
grouped = next(d["round"] for d in decisions if d["grouped"])
fallback = next(d["round"] for d in decisions if not d["grouped"])
print(
    f"{sum(d['grouped'] for d in decisions)} of {len(decisions)} rounds were same-length groups"
)
assert recorded.first_violation() is None
group_verify, fallback_verify = recorded.find(grouped, "verify"), recorded.find(
    fallback, "verify"
)
assert set(group_verify["observation"]["pad"]) == {0}
assert max(fallback_verify["observation"]["pad"]) > 0
viz.draw_grid(recorded, group_verify, last=None)
viz.draw_grid(recorded, fallback_verify, last=None);

# %% [markdown]
# Between rounds the rows go back to the pool unaligned; the members that sat a
# round out are listed in the round's record (`waiting`), which is where
# head-of-line blocking shows up below.
#
# ## Exact, and how often a group is found
#
# All sixteen prompts at batch 4, windows of `W = B`, `2B` and `4B` (the
# default). Every output must equal the target's own greedy `generate`; the
# *group rate* is the share of rounds whose batch was one same-length group.

# %%
references = [reference_greedy(target, p, N, eos) for p in prompts]
window_sizes = (B, 2 * B, 4 * B)
stats = {}
for window_size in window_sizes:
    result = batchspec.generate(
        target,
        draft,
        prompts,
        method="exspec",
        num_draft_tokens=k,
        max_new_tokens=N,
        batch_size=B,
        window_size=window_size,
        eos_token_id=eos,
    )
    assert result.sequences == references, window_size
    stats[window_size] = result.stats
    print(
        f"W = {window_size:>2}: group rate {result.stats.group_rate:.2f}, "
        f"{result.stats.fallbacks} fallback rounds of {result.stats.rounds}"
    )
rates = [stats[w].group_rate for w in window_sizes]
assert rates[-1] > rates[0]

fig, ax = plt.subplots(figsize=(5, 2.8), dpi=100)
ax.plot(window_sizes, rates, "o-", color="#009E73")
ax.set(
    xlabel="window size W",
    ylabel="group rate",
    xticks=window_sizes,
    ylim=(0, 1),
    title=f"same-length groups found (B = {B}, {len(prompts)} prompts)",
);

# %% [markdown]
# ## Online: the `Scheduler`
#
# In a server requests arrive while others run. `batchspec.scheduler.Scheduler`
# is EXSPEC for that use: `submit` a prompt at any time, `step` runs one round.
# We submit the sixteen prompts in four waves of four, three rounds apart, and
# measure how long each request waited (rounds it spent queued or passed over).

# %%
scheduler = Scheduler(
    target,
    draft,
    num_draft_tokens=k,
    max_new_tokens=N,
    batch_size=B,
    eos_token_id=eos,
    check_invariants=True,  # every step of every round, as in generate
)
requests = []
for wave in range(4):
    requests += [scheduler.submit(p) for p in prompts[4 * wave : 4 * wave + 4]]
    for _ in range(3):
        scheduler.step()
completed = scheduler.run()
assert [completed[r].tokens for r in requests] == references
waits = scheduler.stats.waiting_rounds
percentiles = scheduler.stats.waiting_percentiles()
print(
    "waiting rounds P50 / P90 / P99:",
    [round(percentiles["rounds"][q], 1) for q in (50, 90, 99)],
)
print(
    "waiting seconds P50 / P90 / P99:",
    [round(percentiles["seconds"][q], 2) for q in (50, 90, 99)],
)


# %% [markdown]
# What would the same requests have waited without EXSPEC? The baseline is
# EQSPEC as a plain server runs it: one batch of `B` = 4 per wave, first come
# first served. A wave waits from its arrival until the batch before it has
# finished; once started, its rows run every round to the end.

# %%
eqspec_waits, free = {}, 0
for wave in range(4):
    rounds = batchspec.generate(
        target,
        draft,
        prompts[4 * wave : 4 * wave + 4],
        method="eqspec",
        num_draft_tokens=k,
        max_new_tokens=N,
        batch_size=B,
        eos_token_id=eos,
    ).stats.rounds
    start = max(free, 3 * wave)  # the wave arrived at round 3 * wave
    eqspec_waits.update({r: start - 3 * wave for r in requests[4 * wave : 4 * wave + 4]})
    free = start + rounds
print("EQSPEC baseline, waiting rounds per wave:", [eqspec_waits[r] for r in requests[::4]])

fig, ax = plt.subplots(figsize=(8, 2.8), dpi=100)
x = range(len(requests))
ax.bar([i - 0.2 for i in x], [waits[r] for r in requests], width=0.4, color="#56B4E9", label="EXSPEC (Scheduler)")
ax.bar([i + 0.2 for i in x], [eqspec_waits[r] for r in requests], width=0.4, color="#E69F00",
       label="EQSPEC, one batch per wave")
ax.set_xticks(list(x), [str(r) for r in requests])
ax.set(xlabel="request (in submission order)", ylabel="rounds waited", title="waiting per request")
ax.legend(fontsize=9, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1));

# %% [markdown]
# The two schedules put the waiting in different places: EXSPEC passes over
# the first requests while it forms same-length groups with later arrivals,
# and the plain EQSPEC server makes each later wave wait for the batch
# before it. Every request finished with the exact output, whatever the
# order the scheduler served them in. The default policy (`laggards_first`) pads least;
# the scheduler's docstring records what that costs in tail waiting under
# overload, against the authors' first-come rule.
#
# ## What to remember
#
# * EXSPEC stacks same-length sequences from a pool, so a grouped round needs
#   no padding and no realignment; otherwise it falls back to EQSPEC's layout.
# * A larger window finds groups more often (here the group rate rose from
#   W = B to W = 4B) and holds more caches.
# * Exactness does not depend on the schedule: every output equals the target's
#   own, offline or online.
