"""``watch`` on every greedy decoding path transformers ships, on six architectures (Spec §3.12).

Batched ``generate`` (left padding, batch 3) with every ``cache_implementation``
transformers accepts on CPU, and assisted generation at batch 1 with each
candidate generator it ships for causal LMs that runs offline: silent and
exact on full-attention models, on models with a sliding window shorter than
the prompts on every layer, and on a model that mixes both. Sampling and beam
search are not greedy: C1 is still checked on their every call, and is silent.
"""

from __future__ import annotations


import pytest
import torch

from _window_models import ARCHITECTURES, build, pair

from batchspec.invariants import InvariantViolation, watch

N = 10
#: every value of ``cache_implementation`` transformers 5.24 accepts on CPU ("offloaded" and
#: "offloaded_static" need CUDA; "quantized" is refused, see test_watch_refusals); the deprecated
#: "sliding_window" and "hybrid" build the static cache, and run on the window models only
IMPLEMENTATIONS = [(name, impl) for name in ARCHITECTURES for impl in (None, "dynamic", "static")] + [
    (name, impl) for name in ("mistral", "gemma3") for impl in ("sliding_window", "hybrid")]
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [21, 22, 23, 24, 25, 26, 27], [31, 32, 33, 34]]


def batch(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding
    return ids, (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()


def cut(rows, eos=1):
    """Each row up to its first EOS (generate pads after it)."""
    return [r[: r.index(eos) + 1] if eos in r else r for r in rows]


@torch.no_grad()
def generate(model, prompts, **kwargs):
    ids, mask = batch(prompts)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=N, pad_token_id=0, **kwargs)
    return cut(out[:, ids.shape[1]:].tolist())


@pytest.mark.slow_except('llama-static', 'mistral-sliding_window', 'gemma3-hybrid')
@pytest.mark.parametrize("name, implementation", IMPLEMENTATIONS)
def test_batched_generate_is_exact_and_silent(name, implementation):
    model = build(name)
    extra = {} if implementation is None else {"cache_implementation": implementation}
    want = generate(model, PROMPTS, do_sample=False, **extra)
    with watch(target=model) as w:  # check="raise"
        got = generate(model, PROMPTS, do_sample=False, **extra)
        w.outputs(PROMPTS, got, max_new_tokens=N, eos_token_id=1)
    assert got == want and w.violations == [] and w.calls >= 2


def clean(target, prompts):
    """The first prompt whose greedy output never holds the pad id 0: transformers' assistant is
    called without a mask, infers one from ``input_ids != pad_token_id`` and so masks a generated
    pad id out (a finding of test_watch_hf_assisted, on the draft only), and prompt lookup and
    early exit share that code."""
    return next(p for p in prompts if 0 not in generate(target, [p], do_sample=False)[0])


SINGLES = [PROMPTS[0], [40, 41, 42, 43, 44, 45, 46, 47], [50, 52, 54, 56, 58, 60, 62], [70, 3, 71, 4, 72, 5]]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_assisted_generation_with_a_draft_model_is_exact_and_silent(name):
    target, draft = pair(name)
    prompt = clean(target, SINGLES)
    want = generate(target, [prompt], do_sample=False)
    with watch(target=target, draft=draft) as w:
        got = generate(target, [prompt], do_sample=False, assistant_model=draft)
        w.outputs([prompt], got, max_new_tokens=N, eos_token_id=1)
    assert got == want and w.violations == [] and w.calls > 4


#: the candidate generators that draft with no second model: prompt lookup (over a prompt that
#: repeats, so that it proposes), and early exit (the target's own first layer drafts)
SELF_DRAFTING = [(name, "lookup") for name in ARCHITECTURES] + [(n, "early_exit") for n in ("llama", "mistral", "gemma3")]


@pytest.mark.parametrize("name, how", SELF_DRAFTING)
def test_self_drafting_generation_is_exact_and_silent(name, how):
    target = build(name)
    if how == "lookup":
        prompt = clean(target, [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [9, 3, 9, 3, 9, 3, 9], [40, 41, 40, 41, 40, 41]])
        extra = {"prompt_lookup_num_tokens": 3}
    else:
        prompt, extra = clean(target, SINGLES), {"assistant_early_exit": 1}
    want = generate(target, [prompt], do_sample=False)
    with watch(target=target) as w:
        got = generate(target, [prompt], do_sample=False, **extra)
        w.outputs([prompt], got, max_new_tokens=N, eos_token_id=1)
    assert got == want and w.violations == []


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3"])
def test_sampling_and_beam_search_keep_one_chain(name):
    """Not greedy, so C2 and C1's third clause (the target's greedy choices) do not
    apply; C1's chain holds on every call and is checked."""
    model = build(name)
    torch.manual_seed(0)
    with watch(target=model, greedy=False) as w:
        generate(model, PROMPTS, do_sample=True, temperature=1.0)
        generate(model, PROMPTS, do_sample=False, num_beams=2)
    assert w.violations == [] and w.calls >= 4


def test_sampling_under_a_greedy_watch_is_flagged_as_off_the_greedy_stream():
    """The other side: told the decoder is greedy, watch flags a sampled token the
    target did not choose as soon as a target call attends it from its cache."""
    model = build("llama")
    torch.manual_seed(0)
    with pytest.raises(InvariantViolation, match="on a stream the target rejected"):
        with watch(target=model):
            generate(model, PROMPTS, do_sample=True, temperature=1.0)
