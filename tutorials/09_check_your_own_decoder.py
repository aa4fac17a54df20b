# %% [markdown]
# # 9. Check your own decoder
#
# Everything so far checked batchspec's own EQSPEC. The invariants (Spec §3)
# are predicates over what *any* decoder really did, so they check yours too.
# Here is a batch speculative decoder written from the paper's description
# alone, with no `batchspec` import: greedy EQSPEC over stock `DynamicCache`s,
# unpad – append – repad after every round. We check it with the recorder,
# `batchspec.invariants.watch`, then plant two real outsider bugs and watch
# which check sees each one.

# %%
import inspect
import sys
from pathlib import Path

import torch

from batchspec import viz
from batchspec.invariants import InvariantViolation, watch
from batchspec.testing import reference_greedy

torch.set_num_threads(1)
setup = viz.tutorial_setup(torch.float64)  # BATCHSPEC_TUTORIAL_PAIR / _DEVICE; float64: the exactness claims are exact
target, draft = setup.target, setup.draft
prompts = [p[-12:] for p in setup.prompts(4)]  # four short prompts of unequal length: ragged from round 1
K, N = 3, 12

# the outside decoder lives with the tests, which run it on every tiny architecture
root = Path.cwd() if (Path.cwd() / "tests").is_dir() else Path.cwd().parent
sys.path.insert(0, str(root / "tests"))
import _outside_decoder as outside  # noqa: E402

# %% [markdown]
# ## The decoder
#
# About sixty lines with its two helpers. Its one concession to the checker is
# the `on_boundary(tokens, mask, ...)` callback, called after prefill and after
# each realignment: the grid a decoder holds between rounds is the one thing no
# forward call shows.

# %%
print(inspect.getsource(outside.decode))

# %% [markdown]
# ## The glue: a `with` block
#
# `watch` hooks both models' forward (public PyTorch hooks, gone when the block
# ends) and records every call: input ids, mask, position ids, the cache length
# before the call, the cache, the logits. From those it derives each call's
# step, the drafts, the tokens each round commits, and `p_i`, `c_i`; it checks
# after every call. Two lines of glue, plus the decoder's two callback calls:

# %%
with watch(target=target, draft=draft) as w:
    out = outside.decode(target, draft, prompts, K, N, on_boundary=w.boundary)
print(w.report())
expected = [reference_greedy(target, p, N, None) for p in prompts]
assert out == expected and w.violations == []

# %% [markdown]
# The output is the target's own batch-1 greedy decoding, and no invariant
# fired. That is the claim a CI job can now make about this decoder.
#
# ## Bug 1: realigning by the batch minimum
#
# A common shortcut: shift the target cache as if every row had accepted the
# batch's *smallest* count. The cache keeps the right shape, so no shape or
# mask check can see it. The default check keeps, for every slot any call
# wrote, a *fingerprint* (a fixed random projection of the key at the first
# and last layer) and verifies at every boundary that the slot where each
# committed token now lives holds that token's fingerprint: I6, cache
# provenance (Spec §3.6).

# %%
def first_violation(bug, **options):
    with watch(target=target, draft=draft, check="record", **options) as w:
        result = outside.decode(target, draft, prompts, K, N, on_boundary=w.boundary, bug=bug)
    return (w.violations[0] if w.violations else None), result


def first_ragged_round():
    """The first round whose rows gained different numbers of tokens (correct run)."""
    gains = []
    outside.decode(target, draft, prompts, K, N, on_boundary=lambda t, m, **_: gains.append(m.sum(1)))
    return next(r for r, (a, b) in enumerate(zip(gains, gains[1:]), 1) if len(set((b - a).tolist())) > 1)


v, result = first_violation("batch_min")
print(v)
assert (v.invariant, v.model, v.round) == ("I6", "target", first_ragged_round())
structural, _ = first_violation("batch_min", structural=True)
print("structural checks only:", structural)
assert structural is None

# %% [markdown]
# Caught at the first ragged round, in the target's cache; the structural
# checks (I1–I5 on each step alone) see nothing.
#
# ## What the recorder saw
#
# Run it once more with `check="raise"`: the decoder stops at the violating
# boundary, so its caches are still as the check read them, and `w.caught` is
# that observation. Each cell below is a slot of the target's cache, labelled
# with the grid token that lives there: blue when the slot holds the key some
# forward call wrote for that very token at that content index, black when it
# does not, outlined at each row's first bad slot. The rows that accepted as
# few tokens as the batch minimum are fine; the others were shifted by the
# wrong `δ_i`, and every slot of theirs now holds a neighbour's key.

# %%
with watch(target=target, draft=draft) as w:  # check="raise"
    try:
        outside.decode(target, draft, prompts, K, N, on_boundary=w.boundary, bug="batch_min")
    except InvariantViolation as caught:
        print(caught.violation)
viz.draw_provenance(w.caught, w.ledger, "target", alphabet=setup.alphabet, last=30);
assert w.caught.step == "align" and w.violations[0].round == first_ragged_round()
#
# ## Bug 2: appending the rejected draft
#
# Another: after the accepted drafts, append the draft's (rejected) token
# instead of the target's. The caches then describe the wrong stream
# *faithfully*, so even recomputing every key/value (the semantic mode) finds
# nothing. What gives it away is that the grid did not gain the tokens the
# target chose: I7, committed stream (Spec §3.7).

# %%
v, result = first_violation("rejected")
print(v)
assert v.invariant == "I7"
assert result != expected
structural, _ = first_violation("rejected", structural=True)
assert structural is None

# %% [markdown]
# ## Without Hugging Face models, or without Python
#
# A decoder that does not call Hugging Face models fills one
# `batchspec.invariants.Observation` per step (every field is documented on
# the class) and calls `check(obs, ledger=ledger)` with one `Ledger` per run.
# An implementation in another language runs the conformance vectors:
# `batchspec conformance export DIR` writes small models (safetensors), prompts,
# `k`, EOS sets and the expected outputs and per-round `a_i`, `L'`, `δ_i`;
# `batchspec conformance check DIR --command CMD` runs it on each.
#
# ## What to remember
#
# * The invariants check what a decoder *did*: `watch` records it from the
#   models' own forward calls, and a decoder adds one `boundary` call per round.
# * Cache contents are checked by default, without a fresh forward: every
#   committed slot must hold the fingerprint written for its token (I6).
# * `committed` is never taken on trust: the grid must gain exactly what the
#   target chose (I7), which catches a bug the semantic mode cannot.
# * Structural checks alone miss both bugs here; exact output on one pair is
#   evidence, the invariants are the check.
