# %% [markdown]
# # 1. The ragged problem
#
# Speculative decoding lets a small **draft** model guess `k` tokens and a large
# **target** model check all of them in one forward pass. With greedy decoding the
# output must be *exactly* what the target alone would have produced: the draft
# only changes how fast we get there.
#
# At batch size 1 this takes about thirty lines. This chapter writes them, checks
# them against the target's own `generate`, and then runs the same step on two
# prompts at once, where it breaks: the rows accept different numbers of drafts
# and the batch stops being a rectangle. The rest of the tutorials are about what
# to do then.
#
# The pictures label row `i` of a batch with its padding `p_i` and its content
# length `c_i` (prompt plus committed tokens); in a round it accepts `m_i` of the
# `k` drafts and commits `a_i = m_i + 1` tokens, and a realignment shifts it by
# `δ_i` slots. All symbols, with their names in the code:
# [Spec §1 Notation](../../spec/01-notation/).
#
# The first cell picks the model pair and the device (the environment variables
# `BATCHSPEC_TUTORIAL_PAIR` and `BATCHSPEC_TUTORIAL_DEVICE`; by default the small
# pair that ships inside batchspec, on CPU, in float64).

# %%
import torch

from batchspec import trace, viz
from batchspec.testing import reference_greedy
from batchspec.viz.cells import Cells

setup = viz.tutorial_setup()
target, draft = setup.target, setup.draft
device = setup.device

# %% [markdown]
# ## One speculative step at batch 1
#
# Three moves, as in the paper (and gpt-fast's `speculative_decode`):
#
# 1. **draft**: the draft proposes `k` tokens, one at a time;
# 2. **verify**: one target pass over the prompt plus the `k` drafts gives the
#    target's own greedy choice after every prefix;
# 3. **accept**: keep the longest run of drafts the target agrees with (`m` of
#    them), then append the target's own next token, the **bonus**. So each step
#    commits `a = m + 1` tokens, between 1 and `k + 1`.
#
# To keep it short there is no KV cache here: every call recomputes the whole
# sequence. batchspec's real implementation keeps caches, which is exactly
# where batching gets hard.


# %%
@torch.no_grad()
def speculative_step(target, draft, tokens, k):
    """One greedy speculative step on ``tokens`` [1, n]; returns (tokens [1, n + a], m)."""
    n = tokens.shape[1]
    proposal = tokens
    for _ in range(k):  # 1. draft k tokens, one at a time
        next_token = draft(proposal).logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        proposal = torch.cat([proposal, next_token], dim=1)
    drafts = proposal[:, n:]  # [1, k]
    choice = target(proposal).logits[:, n - 1 :].argmax(-1)  # 2. verify: [1, k + 1]
    agree = (drafts == choice[:, :k]).long().cumprod(dim=1)  # 3. accept the agreeing prefix
    m = int(agree.sum())
    bonus = choice[:, m : m + 1]  # the target's token after the m accepted drafts
    return torch.cat([tokens, drafts[:, :m], bonus], dim=1), m


def speculative_generate(target, draft, prompt, max_new_tokens, k=4):
    tokens = torch.tensor([prompt], device=device)
    accepted = []
    while tokens.shape[1] - len(prompt) < max_new_tokens:
        tokens, m = speculative_step(target, draft, tokens, k)
        accepted.append(m)
    return tokens[0, len(prompt) : len(prompt) + max_new_tokens].tolist(), accepted


# %% [markdown]
# Is it right? The definition of right is the target's own batch-1 greedy
# `generate`. We compare token for token.

# %%
prompts = setup.prompts(8)
prompt = prompts[0]
ours, accepted = speculative_generate(target, draft, prompt, 24)
reference = reference_greedy(target, prompt, 24)
print("prompt      ", repr(setup.text(prompt[-40:])))
print("speculative ", repr(setup.text(ours)))
print("generate    ", repr(setup.text(reference)))
print("drafts accepted per step:", accepted)
assert ours == reference, "the batch-1 speculative step must equal the target's greedy output"

# %% [markdown]
# Identical, and in fewer target calls than tokens: each step verified up to
# `k + 1 = 5` tokens with one target pass.
#
# ## The same step at batch 2
#
# Now two prompts of the same length, stacked into one `[2, n]` tensor. Drafting
# and verifying work row by row as before. Acceptance does not: each row finds
# its own `m_i`.


# %%
@torch.no_grad()
def accepted_counts(target, draft, tokens, k):
    """Draft and verify a [B, n] batch; return each row's m_i and its k + 1 proposal."""
    n = tokens.shape[1]
    proposal = tokens
    for _ in range(k):
        proposal = torch.cat(
            [proposal, draft(proposal).logits[:, -1].argmax(-1, keepdim=True)], dim=1
        )
    choice = target(proposal).logits[:, n - 1 :].argmax(-1)  # [B, k + 1]
    m = (proposal[:, n:] == choice[:, :k]).long().cumprod(dim=1).sum(dim=1)  # [B]
    return m.tolist(), proposal[:, n:], choice


# Equal-length prompts, so that the batch starts as a true rectangle.
n = 24
pairs = [(a[-n:], b[-n:]) for a, b in zip(prompts, prompts[1:]) if len(a) >= n and len(b) >= n]
for first, second in pairs:
    batch = torch.tensor([first, second], device=device)
    m, drafts, choice = accepted_counts(target, draft, batch, 4)
    if m[0] != m[1]:
        break
print("accepted drafts per row, m_i =", m)
assert m[0] != m[1], "some pair of prompts should accept different numbers of drafts"

# %% [markdown]
# Row 0 wants to grow by `a_0 = m_0 + 1` tokens and row 1 by `a_1 = m_1 + 1`.
# A tensor cannot hold rows of different lengths:

# %%
rows = [torch.cat([batch[i], drafts[i, : m[i]], choice[i, m[i] : m[i] + 1]]) for i in range(2)]
print("row lengths after the step:", [len(r) for r in rows])
try:
    torch.stack(rows)
    stacked = True
except RuntimeError as error:
    stacked = False
    print("torch.stack:", str(error).splitlines()[0])
assert not stacked

# %% [markdown]
# Here is the batch before and after the step. Blue is the prompt, green the
# accepted drafts, pink the bonus; the grey cells on the right are the holes a
# rectangular tensor would need filled with *something*.


# %%
def row_cells(row, prompt_length, width):
    kinds = (
        ["prompt"] * prompt_length + ["accepted"] * (len(row) - prompt_length - 1) + ["bonus"]
    )
    kinds = kinds[: len(row)] + ["pad"] * (width - len(row))
    return kinds, row.tolist() + [None] * (width - len(row))


width = max(len(r) for r in rows)
before = Cells(
    [["prompt"] * n] * 2,
    batch.tolist(),
    [f"row {i}: c={n}" for i in range(2)],
    "before the step: a [2, n] rectangle",
)
after_rows = [row_cells(r, n, width) for r in rows]
after = Cells(
    [k for k, _ in after_rows],
    [t for _, t in after_rows],
    [f"row {i}: m={m[i]}, a={m[i] + 1}" for i in range(2)],
    "after the step: ragged",
)
viz.draw_cells(before, alphabet=setup.alphabet, last=12)
viz.draw_cells(after, alphabet=setup.alphabet, last=12 + width - n);

# %% [markdown]
# ## Three ways out
#
# * **Masking** (BSP-style, after BSP, a batch implementation the paper
#   measured): keep the tensor rectangular, leave the rejected
#   drafts in place and zero them in the attention mask. Chapter 2 shows it
#   breaking the alignment (I1) and position (I2) invariants.
# * **Rollback**: cut every row to the smallest `a_i`. Correct, but it throws
#   verified tokens away (chapter 3).
# * **Unpad – append – repad** (EQSPEC): append each row's own `a_i` tokens and
#   re-pad on the left so the batch is a rectangle again, shifting each row's
#   KV cache by `δ_i` (chapter 5).
#
# A preview of the last one, on the same kind of batch, as batchspec records it
# (see `batchspec.trace`): after verification each row commits its own
# `a_i` tokens and the left padding absorbs the difference.

# %%
recorded = trace.record(
    target,
    draft,
    prompts[:4],
    "eqspec",
    num_draft_tokens=4,
    max_new_tokens=8,
    eos_token_id=setup.eos_token_id,
    alphabet=setup.alphabet,
)
viz.draw_round(recorded, 1, last=16)
assert recorded.first_violation() is None

# %% [markdown]
# ## What to remember
#
# * A batch-1 speculative step is short and easy to get right: draft `k`,
#   verify once, accept the agreeing prefix plus the target's bonus token.
# * At batch size `B > 1` each row accepts its own `m_i`, so rows grow by
#   different `a_i = m_i + 1`: the **ragged** problem.
# * Every batch method must turn the ragged result back into something a model
#   can consume, and keep positions, masks and caches consistent while doing so.
#   The invariants say exactly what "consistent" means, in two levels (Spec §3):
#   C1–C3, true of every correct decoder whatever its layout, and I1–I8, the
#   paper's compact layout, which refine them.
