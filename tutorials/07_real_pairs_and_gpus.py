# %% [markdown]
# # 7. Real pairs and GPUs
#
# Everything so far ran on the small pair that ships inside batchspec, on CPU,
# in float64. This chapter runs the same checks where they matter in practice:
#
# * the **Qwen2.5-Coder** pair (1.5B target, 0.5B draft), once it has been
#   fetched with `batchspec models fetch qwen2.5-coder`;
# * the **paper's pairs** (Vicuna-7B/68M, Qwen3-8B/0.6B, GLM-4-9B/0.6B), when
#   their checkpoints are in the local Hugging Face cache;
# * a **CUDA** device in **float16 / bfloat16**, where batched and batch-1
#   kernels round differently and outputs can differ for reasons that are not
#   bugs. The auditor (`batchspec.audit`) labels every mismatch as a numeric
#   near-tie or an algorithmic error.
#
# The pair and the device come from `BATCHSPEC_TUTORIAL_PAIR` and
# `BATCHSPEC_TUTORIAL_DEVICE` (by default the embedded pair on the CPU), the
# precision from `BATCHSPEC_TUTORIAL_DTYPE` (by default float64). When the
# pair or the GPU asked for is not available, the notebook says so below and runs
# the same cells on the default pair and the CPU, so every line still executes.

# %%
import torch

import batchspec
from batchspec import audit, trace, viz
from batchspec.models import presets, registry
from batchspec.testing import reference_greedy

for name, entry in registry.PAIRS.items():
    available, _ = registry.availability(name)
    print(f"{name:<15} {'available' if available else 'not here':<10} {entry.description}")

# Only the environment picks the pair and the device (default: the embedded pair on
# the CPU). A real pair fetched into the cache is not taken unasked: the test suite and
# the docs build run this notebook too, and must run it on the pair they were told to use.
setup = viz.tutorial_setup()

# %% [markdown]
# ## Exact, token for token
#
# First the claim of every earlier chapter, on this pair and device: EQSPEC's
# batched output equals the target's own batch-1 greedy `generate`, token for
# token, with every invariant checked. Float64 keeps rounding out of the
# claim; a real pair in float64 needs 19 GB for its two models, so on a
# 24 GiB machine it runs in float32 (`BATCHSPEC_TUTORIAL_DTYPE=float32`),
# where exactness is a measurement, not a theorem.

# %%
prompts = setup.prompts(4)
N, k = 16, 4
references = [reference_greedy(setup.target, p, N, setup.eos_token_id) for p in prompts]
result = batchspec.generate(
    setup.target,
    setup.draft,
    prompts,
    method="eqspec",
    num_draft_tokens=k,
    max_new_tokens=N,
    batch_size=4,
    eos_token_id=setup.eos_token_id,
    check_invariants=True,
)
print(
    f"{setup.pair} on {setup.device}, {str(setup.dtype).replace('torch.', '')}: "
    f"{sum(a == b for a, b in zip(result.sequences, references))}/{len(prompts)} exact, "
    f"{result.stats.tokens_per_target_call:.2f} tokens per target call"
)
for p, out in list(zip(prompts, result.sequences))[:2]:
    print(f"  {setup.text(p)[-30:]!r} -> {setup.text(out)!r}")
assert result.sequences == references

# %% [markdown]
# The first round on this pair, as recorded: the same pictures as in the
# earlier chapters, whatever the model (token ids are shown as ids when the
# pair's tokens are not bytes).

# %%
recorded = trace.record(
    setup.target,
    setup.draft,
    prompts,
    "eqspec",
    num_draft_tokens=k,
    max_new_tokens=8,
    eos_token_id=setup.eos_token_id,
    alphabet=setup.alphabet,
)
assert recorded.first_violation() is None
viz.draw_round(recorded, 1, last=16);

# %% [markdown]
# ## Lower precisions, audited
#
# In float16 and bfloat16 a batched forward and a batch-1 forward add their
# numbers in different orders, so two logits that are nearly tied can swap, and
# the batched output can part from `generate` with no bug anywhere. The auditor
# decides each mismatch: at the first divergence it asks the target (in the
# setup's precision) whether both tokens lie within a few ulps of the top logit. If they
# do, it is a **numeric near-tie**; otherwise it is **algorithmic**, a real bug.

# %%
margin_model = setup.target  # the setup's precision (float64 by default): accurate margins
verdicts = {}
for dtype in (torch.float16, torch.bfloat16):
    low = viz.tutorial_setup(pair=setup.pair, device=setup.device, dtype=dtype, quiet=True)
    low_references = [reference_greedy(low.target, p, N, low.eos_token_id) for p in prompts]
    low_result = batchspec.generate(
        low.target,
        low.draft,
        prompts,
        method="eqspec",
        num_draft_tokens=k,
        max_new_tokens=N,
        batch_size=4,
        eos_token_id=low.eos_token_id,
    )
    report = audit(
        prompts, low_references, low_result.sequences, margin_model.to(setup.device), dtype
    )
    verdicts[dtype] = report
    print(
        f"{str(dtype).replace('torch.', ''):<9} exact {100 * report.exact_rate:5.1f}%"
        f"   counts {report.counts}"
    )
    del low  # one lower precision in memory at a time
    for verdict in report.prompts:
        if not verdict.exact:
            print(
                f"    prompt {verdict.index}: diverges at token {verdict.first_divergence}: "
                f"{verdict.classification} (gap {verdict.gap:.3g}, "
                f"tolerance {verdict.tolerance:.3g})"
            )
for report in verdicts.values():
    assert (
        report.counts.get("algorithmic", 0) == 0
    ), "a low-precision mismatch that rounding cannot explain"

# %% [markdown]
# Any mismatch printed above is labelled; none is algorithmic. An exact rate
# below 100 % in float16 is therefore not evidence of a bug, and an algorithmic
# label would be, whatever the precision. For contrast, chapter 2's masking
# baseline, audited the same way in the setup's precision:

# %%
masked = batchspec.generate(
    setup.target,
    setup.draft,
    prompts,
    method="masking",
    num_draft_tokens=k,
    max_new_tokens=N,
    batch_size=4,
    eos_token_id=setup.eos_token_id,
)
masking_report = audit(prompts, references, masked.sequences, margin_model, setup.dtype)
print(f"masking, {str(setup.dtype).replace('torch.', '')}:", masking_report.counts)
assert masking_report.counts.get("algorithmic", 0) > 0

# %% [markdown]
# The auditor calls those divergences algorithmic: no rounding at this
# precision comes close to explaining them.
#
# ## The paper's pairs
#
# The presets name the checkpoints of the paper's experiments. batchspec never
# downloads them on its own; each line says whether it is here, and how to get
# it if not.

# %%
for name, preset in presets.PRESETS.items():
    available, reason = registry.availability(name)
    print(f"{name:<15} {'present' if available else 'absent'}: {preset.description}")
    if not available:
        print(f"{'':<15} get it with: {presets.download_command(preset)}")
print(f"\nThis notebook ran on pair {setup.pair!r}, device {setup.device!r}.")
if setup.fell_back or setup.pair == "default":
    print(
        "To run it on a real pair on a GPU: BATCHSPEC_TUTORIAL_PAIR=qwen2.5-coder "
        "BATCHSPEC_TUTORIAL_DEVICE=cuda, after `batchspec models fetch qwen2.5-coder`."
    )

# %% [markdown]
# ## What to remember
#
# * The same notebook runs on any pair `batchspec models list` shows as
#   available and on any device: set `BATCHSPEC_TUTORIAL_PAIR` and
#   `BATCHSPEC_TUTORIAL_DEVICE`.
# * In float64 the batched output is exact on every pair; check it there first
#   (or in float32 where float64 does not fit, as a measurement).
# * In float16 / bfloat16, exact match is not the test: audit the mismatches.
#   A numeric near-tie is rounding; an algorithmic divergence is a bug.
