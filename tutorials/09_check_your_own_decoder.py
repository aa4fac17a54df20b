# %% [markdown]
# # 9. Check your own decoder
#
# Everything so far checked batchspec's own EQSPEC. The invariants are
# predicates over what *any* decoder really did, so they check yours too, in
# two levels (Spec §3.12):
#
# * **correctness, C1–C3**: true of every correct greedy speculative decoder,
#   whatever its padding, layout, cache handling or call schedule. `watch`
#   checks them with no glue at all;
# * **layout, I1–I8**: the paper's compact layout, for a decoder that opts in
#   by describing its grid once per round; each failure names the layout rule.
#
# Here is a batch speculative decoder written from the paper's description
# alone, with no `batchspec` import (`batchspec.examples.outside_decoder`):
# greedy EQSPEC over stock `DynamicCache`s, unpad – append – repad after every
# round. We check it, plant three real outsider bugs, and check transformers'
# own assisted generation the same way. (Two more planted bugs, a bonus token
# taken from the draft and a mask read off the token values, are in the tests:
# `tests/invariants/test_correctness_invariants.py`.)

# %%
import inspect

import torch
from IPython.display import Markdown

from batchspec import viz
from batchspec.examples import outside_decoder as outside
from batchspec.invariants import InvariantViolation, watch
from batchspec.testing import reference_greedy

torch.set_num_threads(1)
setup = viz.tutorial_setup(torch.float64)  # BATCHSPEC_TUTORIAL_PAIR / _DEVICE; float64: the exactness claims are exact
target, draft = setup.target, setup.draft
prompts = [p[-12:] for p in setup.prompts(4)]  # four short prompts of unequal length: ragged from round 1
K, N = 3, 12

# %% [markdown]
# ## The decoder

# %%
Markdown(f"```python\n{inspect.getsource(outside.decode)}```")  # shown as code, highlighted by the site

# %% [markdown]
# ## Checked with no glue
#
# `watch` hooks both models' forward (public PyTorch hooks, gone when the block
# ends). On every call it reads what each row attended and checks **C1**: the
# attended cache slots, then the inputs, are one chain of tokens at positions
# 0, 1, 2, …, each slot holding what some call wrote for that token after that
# very prefix. It knows what a slot holds by its *content*: an exact hash of
# the slot's key and value vectors, mapped to the token, position and prefix
# its writer fed, so rows may move, pad, crop or be rebuilt freely.
#
# One optional line, `w.outputs`, checks **C2** (every returned token is the
# target's greedy choice on exactly the prefix before it, as one of the calls
# computed it) and **C3** (each output stops at an EOS it generated or at its
# budget). Three lines in all:

# %%
with watch(target=target, draft=draft) as w:
    out = outside.decode(target, draft, prompts, K, N)
    w.outputs(prompts, out, max_new_tokens=N)
print(w.report())
expected = [reference_greedy(target, p, N, None) for p in prompts]
assert out == expected and w.violations == []

# %% [markdown]
# The output is the target's own batch-1 greedy decoding, and nothing fired.
# That is the claim a CI job can now make about this decoder.
#
# ## Bug 1: realigning by the batch minimum
#
# A common shortcut: shift the target cache as if every row had accepted the
# batch's *smallest* count. The cache keeps the right shape, so no shape or
# mask check sees it; but the rows that accepted more now attend slots that
# hold padding or a neighbour's key/value. In the default mode the check
# raises at that call, so the decoder stops where it went wrong.

# %%
def caught(bug, rows=prompts, eos=None):
    """The first violation watch raises on the decoder with ``bug`` planted."""
    try:
        with watch(target=target, draft=draft) as w:
            result = outside.decode(target, draft, rows, K, N, bug=bug, eos=eos)
            w.outputs(rows, result, max_new_tokens=N, eos_token_id=eos)
    except InvariantViolation as error:
        return error.violation, w
    raise AssertionError(f"{bug} was not caught")


v, w = caught("batch_min")
print(v)
assert (v.invariant, v.model, v.call) == ("C1", "target", w.calls)

# %% [markdown]
# ## Bug 2: appending the rejected draft
#
# After the accepted drafts, append the draft's (rejected) token instead of
# the target's. Every cache then describes the wrong stream *faithfully*: each
# call's chain is consistent. What gives it away is the target's own verdict:
# it had chosen another token after that very prefix, so the next target call
# that attends the rejected token from its cache is on a stream the target
# rejected (C1's third clause). The violation names the decoder's first wrong
# call, the one that fed the rejected token back as committed, though the
# check raises a round later, at the call that reads it.

# %%
v, w = caught("rejected")
print(v)
assert v.invariant == "C1" and v.call < w.calls and "rejected" in v.detail

# %% [markdown]
# ## Bug 3: an EOS inside the prompt
#
# Stop a row when its row holds the EOS token, prompt included. A prompt that
# quotes the EOS token (here a token the outputs never hold serves as EOS,
# planted in the fourth prompt) then returns nothing. No call is wrong, the
# output is: C3 names the request and says why.

# %%
eos = next(t for t in range(1, 1 << 16) if all(t not in row for row in expected + prompts))
quoting = prompts[:3] + [prompts[3][:4] + [eos] + prompts[3][5:]]
v, w = caught("eos_in_prompt", quoting, eos)
print(v)
assert (v.invariant, v.request) == ("C3", 3) and "prompt holds an EOS" in v.detail

# %% [markdown]
# ## Transformers' assisted generation, checked the same way
#
# No decoder of ours: `target.generate(..., assistant_model=draft)` fuses its
# prefill with the first verification and crops its draft cache one round
# late, a schedule the layout invariants do not describe. The correctness
# invariants do not care.

#
# (transformers' assisted generation calls the draft's own `generate` with a
# `generation_config` and loose arguments together, which transformers itself
# then warns is deprecated; the warning is about its internal call, not ours,
# so its logger is quiet for these two calls.)

# %%
from transformers.utils import logging as hf_logging

with watch(target=target, draft=draft) as w:
    hf = []
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    for p in prompts[:2]:
        ids = torch.tensor([p])
        seq = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft,
                              do_sample=False, max_new_tokens=N, min_new_tokens=N,
                              pad_token_id=setup.eos_token_id)
        hf.append(seq[0, len(p):].tolist())
    hf_logging.set_verbosity(level)
    w.outputs(prompts[:2], hf, max_new_tokens=N)
print(w.report())
assert hf == expected[:2] and w.violations == []

# %% [markdown]
# ## Opting in to the layout checks
#
# A decoder in the compact layout can also say which grid it holds after
# prefill and after each realignment, one `w.boundary(tokens, mask)` call per
# round (the decoder's `on_boundary` callback). Then I1–I8 run too, and the
# batch-minimum crop is also reported as I6, cache provenance, at the
# realignment itself. `w.caught` is that boundary's observation: each cell
# below is a slot of the target's cache labelled with the grid token that
# lives there, blue when the slot holds what some call wrote for that very
# token at that content index, black when it does not, outlined at each row's
# first bad slot.

# %%
with watch(target=target, draft=draft) as w:  # check="raise"
    try:
        outside.decode(target, draft, prompts, K, N, on_boundary=w.boundary, bug="batch_min")
    except InvariantViolation as error:
        print(error.violation)
viz.draw_provenance(w.caught, w.ledger, "target", alphabet=setup.alphabet, last=30);
assert w.caught.step == "realign" and w.violations[0].invariant == "I6"

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
# * `watch` checks what a decoder *did*, from the models' own forward calls,
#   with no glue: C1 on every call, C2 and C3 on what it returned.
# * Slots are known by their content, so any layout and any schedule is
#   checked, transformers' own included.
# * A wrong cache or mask is caught at the call that reads it; a committed
#   token the target had rejected, at the next target call that attends it,
#   named by the first call that fed it back; any other wrong token on the
#   output, traced to the first call that built on it.
# * The layout invariants are an opt-in refinement for the compact layout.
