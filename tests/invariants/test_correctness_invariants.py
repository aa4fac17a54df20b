"""The correctness invariants C1-C3 (Spec §3.12) under ``watch`` with no glue.

* Silent on every correct decoder, whatever its shape: batchspec's four
  methods, transformers' assisted generation, and outside decoders with a
  compact layout, holes, right padding, a fused prefill-and-verify call, a
  lazily cropped draft cache, a draft re-run from scratch, draft calls on a
  subset of rows.
* Each planted bug caught at the decoder's *first wrong call*, found without
  the checker: the first call whose inputs, mask, positions, cache length or
  returned logits differ from a correct run of the same decoder on the same
  prompts (``first_divergence``), recorded by a hook of this test's own.
"""

from __future__ import annotations


import pytest
import torch

from batchspec.examples import outside_decoder as outside
import _outside_shapes as shapes
from _broken_helpers import K, N, WITH_PAD_ID, lazy_sources, pair, reference
from _call_diff import first_divergence

import batchspec
from batchspec import faults
from batchspec.invariants import InvariantViolation, watch
from batchspec.models import tiny


def checked(target, draft, run, prompts, max_new_tokens=N, eos=None):
    """``run()``'s outputs under a no-glue ``watch`` (record mode), checked with ``w.outputs``."""
    with watch(target=target, draft=draft, check="record") as w:
        out = run()
        w.outputs(prompts, out, max_new_tokens=max_new_tokens, eos_token_id=eos)
    return out, w


def first_violation(target, draft, run, prompts):
    """The first violation ``watch`` raises (``check="raise"``) on ``run()``, outputs checked."""
    with pytest.raises(InvariantViolation) as caught:
        with watch(target=target, draft=draft) as w:
            out = run()
            w.outputs(prompts, out, max_new_tokens=N)
    return caught.value.violation


# --- silent on correct decoders ----------------------------------------------------------------

@pytest.mark.parametrize("method", ["eqspec", "exspec", "autoregressive", "rollback"])
def test_batchspec_methods_are_silent(method):
    target, draft = pair("qwen3")
    draft = None if method == "autoregressive" else draft
    k = {"num_draft_tokens": K} if draft else {}
    run = lambda: batchspec.generate(target, draft, WITH_PAD_ID, method=method, max_new_tokens=N,  # noqa: E731
                                     check_invariants=False, **k).sequences
    out, w = checked(target, draft, run, WITH_PAD_ID)
    assert out == reference("qwen3", WITH_PAD_ID)
    assert w.violations == [] and w.outputs_checked == len(WITH_PAD_ID)
    assert w.calls == N if draft is None else w.calls > N  # autoregressive: one call per token (Spec §4.8)


@pytest.mark.slow_except('qwen3')
@pytest.mark.parametrize("family", sorted(tiny.FAMILIES))
def test_outside_compact_and_holes_decoders_are_silent(family):
    target, draft = pair(family)
    for decode in (outside.decode, outside.decode_holes):
        out, w = checked(target, draft, lambda: decode(target, draft, WITH_PAD_ID, K, N), WITH_PAD_ID)
        assert out == reference(family, WITH_PAD_ID) and w.violations == [], w.report()


SHAPES = {
    "fused prefill and verify": dict(fused=True),
    "lazily cropped draft cache": dict(lazy=True),
    "draft re-run from scratch": dict(redraft=True),
    "fused and lazy (transformers' own schedule)": dict(fused=True, lazy=True),
}


@pytest.mark.slow_except("fused and lazy (transformers' own schedule)-llama")
@pytest.mark.parametrize("family", ["qwen3", "llama", "gpt2"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_outside_batch_one_shapes_are_silent(family, shape):
    target, draft = pair(family)
    run = lambda: [shapes.decode_one(target, draft, p, K, N, **SHAPES[shape]) for p in WITH_PAD_ID]  # noqa: E731
    out, w = checked(target, draft, run, WITH_PAD_ID)
    assert out == reference(family, WITH_PAD_ID) and w.violations == [], w.report()


@pytest.mark.parametrize("family", ["qwen3", "llama", "gpt2"])
def test_draft_calls_on_a_subset_of_rows_and_right_padding_are_silent(family):
    target, draft = pair(family)
    budgets = [N, 4, N, 7]  # rows leave the draft's calls as they finish
    out, w = checked(target, draft, lambda: shapes.decode_subset(target, draft, WITH_PAD_ID, K, budgets),
                     WITH_PAD_ID, max_new_tokens=None)
    assert out == [r[:b] for r, b in zip(reference(family, WITH_PAD_ID), budgets)] and w.violations == []
    out, w = checked(target, draft, lambda: shapes.decode_right(target, draft, WITH_PAD_ID, K, N), WITH_PAD_ID)
    assert out == reference(family, WITH_PAD_ID) and w.violations == [], w.report()


def test_a_watch_that_saw_no_call_does_not_pass():
    target, draft = pair("qwen3")
    with pytest.raises(ValueError, match="no forward call"):
        with watch(target=target, draft=draft):
            pass


# --- caught at the first wrong call --------------------------------------------------------

#: outside bug -> the invariant that must catch it (a committed rejected token at the next target call that
#: attends it from its cache: C1's third clause, Spec §3.12.2)
OUTSIDE_BUGS = {"batch_min": "C1", "rejected": "C1", "bonus_draft": "C1", "pad_from_ids": "C1"}


@pytest.mark.parametrize("bug", sorted(OUTSIDE_BUGS))
def test_each_outside_bug_is_caught_at_its_first_wrong_call(bug):
    target, draft = pair("qwen3")
    run = lambda b=None: outside.decode(target, draft, WITH_PAD_ID, K, N, bug=b)  # noqa: E731
    first = first_divergence(target, draft, run, lambda: run(bug))
    v = first_violation(target, draft, lambda: run(bug), WITH_PAD_ID)
    assert (v.invariant, v.call) == (OUTSIDE_BUGS[bug], first), str(v)
    if bug != "batch_min":  # the batch-minimum crop only slows the decoder down here; the others change tokens
        assert run(bug) != reference("qwen3", WITH_PAD_ID)


def test_a_row_stopped_by_an_eos_inside_its_prompt_is_caught():
    target, draft = pair("qwen3")
    eos = reference("qwen3", WITH_PAD_ID)[0][3]
    prompts = WITH_PAD_ID[:3] + [WITH_PAD_ID[3][:2] + [eos] + WITH_PAD_ID[3][3:]]
    good, w = checked(target, draft, lambda: outside.decode(target, draft, prompts, K, N, eos=eos), prompts, eos=eos)
    assert w.violations == [], w.report()
    _, w = checked(target, draft, lambda: outside.decode(target, draft, prompts, K, N, bug="eos_in_prompt", eos=eos),
                   prompts, eos=eos)
    assert [(v.invariant, v.request) for v in w.violations] == [("C3", 3)]
    assert "its prompt holds an EOS" in str(w.violations[0])


@pytest.mark.parametrize("fault", sorted(faults.CATALOGUE))
def test_every_catalogue_fault_is_caught_at_its_first_wrong_call(fault):
    target, draft = pair("qwen3")
    correct = lambda: batchspec.generate(target, draft, WITH_PAD_ID, num_draft_tokens=K, max_new_tokens=N,  # noqa: E731
                                         check_invariants=False).sequences
    faulty = lambda: faults.run(fault, target, draft, WITH_PAD_ID, num_draft_tokens=K, max_new_tokens=N,  # noqa: E731
                                check_invariants=False).sequences
    first = first_divergence(target, draft, correct, faulty)
    assert first_violation(target, draft, faulty, WITH_PAD_ID).call == first


@pytest.mark.parametrize("method", ["masking", "dsd"])
def test_masking_and_dsd_are_caught(method):
    """Their calls differ from EQSPEC's from the prefill on (another layout), so the
    first divergence names no wrong call here; the catch is by C1, in the round
    where the batch first turns ragged."""
    target, draft = pair("qwen3")
    broken = lambda: batchspec.generate(target, draft, WITH_PAD_ID, method=method, num_draft_tokens=K,  # noqa: E731
                                        max_new_tokens=N, check_invariants=False).sequences
    v = first_violation(target, draft, broken, WITH_PAD_ID)
    assert v.invariant == "C1" and broken() != reference("qwen3", WITH_PAD_ID), str(v)


def test_raise_mode_stops_the_decoder_at_the_wrong_call():
    target, draft = pair("qwen3")
    first = first_divergence(target, draft, lambda: outside.decode(target, draft, WITH_PAD_ID, K, N),
                             lambda: outside.decode(target, draft, WITH_PAD_ID, K, N, bug="batch_min"))
    with pytest.raises(InvariantViolation) as caught:
        with watch(target=target, draft=draft) as w:
            outside.decode(target, draft, WITH_PAD_ID, K, N, bug="batch_min")
    assert caught.value.call == first == w.calls


def test_layout_checks_on_a_subset_of_rows_say_so_instead_of_crashing():
    """The layout level needs calls over the whole grid; a draft call on the running
    rows only (the paper's code) is named, where the earlier checker raised IndexError."""
    from transformers import DynamicCache

    target, draft = pair("qwen3")
    tokens, mask = outside.left_pad(WITH_PAD_ID)
    with pytest.raises(ValueError, match="called on 2 rows, but the grid of the last boundary"):
        with watch(target=target, draft=draft, check="record") as w, torch.no_grad():
            prefilled = [DynamicCache(config=model.config) for model in (target, draft)]  # held at the boundary
            for model, cache in zip((target, draft), prefilled):
                model(input_ids=tokens[:, :-1], attention_mask=mask[:, :-1], cache=cache)
            w.boundary(tokens, mask)
            cache = DynamicCache(config=draft.config)
            draft(input_ids=tokens[:2, :-2], attention_mask=mask[:2, :-2], cache=cache)
            draft(input_ids=tokens[:2, -2:-1], attention_mask=mask[:2, :-1], cache=cache)


def test_a_boundary_after_the_decoder_dropped_its_cache_names_the_model():
    """watch holds the cache a model last ran with weakly (a decoder that rebuilds its
    caches every round would otherwise keep two alive): a boundary() whose default
    cache the decoder has dropped says which model's to pass, instead of checking a
    cache the decoder no longer holds."""
    from transformers import DynamicCache

    target, draft = pair("qwen3")
    tokens, mask = outside.left_pad(WITH_PAD_ID)
    with pytest.raises(ValueError, match="the cache object the draft model last ran with is gone.*pass draft_cache="):
        with watch(target=target, draft=draft, check="record") as w, torch.no_grad():
            kept = DynamicCache(config=target.config)
            target(input_ids=tokens[:, :-1], attention_mask=mask[:, :-1], cache=kept)
            draft(input_ids=tokens[:, :-1], attention_mask=mask[:, :-1], cache=DynamicCache(config=draft.config))
            w.boundary(tokens, mask)


def test_watch_keeps_alive_no_cache_or_logits_the_decoder_dropped():
    """The checker reads a call's cache and logits inside its hooks and keeps neither:
    a decoder that rebuilds its caches every round (unpad-append-repad) would
    otherwise hold an old cache per model, and every [B, n, V] logits tensor of the
    calls whose labels wait for the table, besides its own."""
    import gc
    import weakref

    from transformers import DynamicCache

    target, _ = pair("qwen3")
    tokens, mask = outside.left_pad(WITH_PAD_ID)
    with watch(target=target) as w, torch.no_grad():
        cache = DynamicCache(config=target.config)
        logits = outside.forward(target, cache, tokens[:, :-1], mask[:, :-1])
        gone = weakref.ref(cache), weakref.ref(logits)
        del cache, logits
        gc.collect()
        assert gone[0]() is None, "watch keeps the dropped cache alive"
        assert gone[1]() is None, "watch keeps the call's logits alive"
        outside.forward(target, DynamicCache(config=target.config), tokens, mask)  # a rebuilt cache
    assert w.calls == 2 and not w.violations


def test_a_finished_watch_is_freed_when_dropped_without_a_garbage_collection():
    """No reference cycle runs through a watch's state (its parts report to a
    Findings, not to the Watch; a call's Chains hold their History weakly): a
    finished watch is freed the moment it is dropped. Otherwise a test suite, or a
    benchmark, that watches run after run in one process holds every finished run's
    memory until Python's next full collection, which a large heap makes rare."""
    import gc
    import weakref

    target, draft = pair("qwen3")
    gc.collect()
    gc.disable()
    try:
        with watch(target=target, draft=draft, check="record") as w:
            out = batchspec.generate(target, draft, WITH_PAD_ID, num_draft_tokens=3, max_new_tokens=6,
                                     check_invariants=False).sequences
            w.outputs(WITH_PAD_ID, out, max_new_tokens=6)
        assert w.calls > 4 and w.violations == []
        gone = [weakref.ref(x) for x in (w, w.correctness, w.layout, w.history)]
        gone.append(weakref.ref(w.history.carried["target"]))
        del w
        alive = [type(ref()).__name__ for ref in gone if ref() is not None]
    finally:
        gc.enable()
    assert alive == [], f"kept alive by a reference cycle after the watch was dropped: {alive}"


def test_lazy_labels_stay_a_bounded_chain_over_a_long_run():
    """Each call's context labels are read lazily from the previous call's; the chain of
    such reads is cut every DEPTH calls, so a long run neither recurses past Python's
    limit when a label is finally needed nor keeps every call's tensors alive."""
    from batchspec.invariants.chains import DEPTH

    target, _ = pair("qwen3")
    with watch(target=target) as w:
        out = batchspec.generate(target, None, WITH_PAD_ID[:2], method="autoregressive", max_new_tokens=3 * DEPTH,
                                 check_invariants=False).sequences
        w.outputs(WITH_PAD_ID[:2], out, max_new_tokens=3 * DEPTH)
    assert w.violations == [] and w.calls == 3 * DEPTH  # one call per token (Spec §4.8)
    assert len(lazy_sources(w.history.carried["target"])) < DEPTH
    assert w.history.carried["target"].labels().shape[1] > 3 * DEPTH  # built without deep recursion
    # EQSPEC realigns both caches every round: its calls' contexts are lazy, and cut
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft) as w:
        out = batchspec.generate(target, draft, WITH_PAD_ID[:2], num_draft_tokens=K, max_new_tokens=3 * DEPTH,
                                 check_invariants=False).sequences
        w.outputs(WITH_PAD_ID[:2], out, max_new_tokens=3 * DEPTH)
    assert w.violations == [] and w.calls > 2 * DEPTH
    assert 0 < len(lazy_sources(w.history.carried["draft"])) < DEPTH
    assert len(lazy_sources(w.history.carried["target"])) < DEPTH
    assert w.history.carried["draft"].labels().shape[1] > 3 * DEPTH
