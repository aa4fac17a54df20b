"""The recorder on an outside decoder (Spec §3.9): silent on a correct one on every
tiny architecture, each outsider bug caught at the round where it first acts,
and what each check mode sees (the catch table of Spec §7.7, outsider rows).

The decoder (``batchspec/examples/outside_decoder.py``) imports nothing from batchspec; the
glue is the ``with`` block below plus its two ``on_boundary`` calls.
"""

from __future__ import annotations


import pytest
import torch

from batchspec.examples import outside_decoder as outside
from _broken_helpers import K, N, WITH_PAD_ID, pair, reference

from batchspec.invariants import InvariantViolation, watch
from batchspec.models import tiny
from batchspec.oracle import hf_oracle


def checked(target, draft, prompts=WITH_PAD_ID, bug=None, **options):
    """The outside decoder's output under ``watch``, and the recorder."""
    with watch(target=target, draft=draft, **options) as w:
        out = outside.decode(target, draft, prompts, K, N, on_boundary=w.boundary, bug=bug)
    return out, w


def gains(family: str) -> list[list[int]]:
    """Tokens each row gains per round in a correct run, read at each boundary."""
    grids = []
    target, draft = pair(family)
    outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=lambda t, m, **_: grids.append(m.sum(1)))
    return [(after - before).tolist() for before, after in zip(grids, grids[1:])]


def first_round(bug: str, family: str) -> int:
    """The round where ``bug`` first changes anything, from a correct run."""
    for r, a in enumerate(gains(family), start=1):
        if (bug == "batch_min" and len(set(a)) > 1) or (bug == "rejected" and min(a) < K + 1):
            return r
    raise AssertionError(f"{bug} never acts")


@pytest.mark.slow_except('llama')
@pytest.mark.parametrize("family", sorted(tiny.FAMILIES))
def test_a_correct_outside_decoder_is_exact_and_silent(family):
    target, draft = pair(family)
    with watch(target=target, draft=draft) as w:  # check="raise": any violation raises here
        out = outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=w.boundary)
    assert out == reference(family, WITH_PAD_ID)
    assert w.violations == [] and w.steps > 10 and "no violation" in w.report()


#: bug -> first violation (invariant, step, model) in the default mode
DEFAULT = {"batch_min": ("I6", "realign", "target"), "rejected": ("I7", "realign", None)}


@pytest.mark.parametrize("family", ["qwen3", "llama"])
@pytest.mark.parametrize("bug", sorted(DEFAULT))
def test_the_default_check_catches_each_outsider_bug_where_it_acts(bug, family):
    target, draft = pair(family)
    with pytest.raises(InvariantViolation) as caught:
        checked(target, draft, bug=bug)
    v = caught.value
    assert (v.invariant, v.step, v.model) == DEFAULT[bug]
    assert v.round == first_round(bug, family)


@pytest.mark.slow
def test_what_each_mode_sees_of_the_outsider_bugs():
    """Structural checks see neither bug (right shapes, and I5 holds on the target's own
    logits); semantic I3 sees the batch-minimum crop but not the rejected draft appended:
    its caches describe the wrong stream faithfully. Only I7 sees that one at the layout level."""
    target, draft = pair("qwen3")
    oracle = hf_oracle({"target": target, "draft": draft})
    seen = {}
    for bug in DEFAULT:
        for mode, options in (("structural", {"structural": True}),
                              ("semantic", {"structural": True, "oracle": oracle})):
            out, w = checked(target, draft, bug=bug, check="record", **options)
            layout = [v.invariant for v in w.violations if v.invariant.startswith("I")]
            seen[bug, mode] = layout[0] if layout else None
            # the correctness level (Spec §3.12) runs in every mode: C1 sees the crop, and the rejected
            # draft committed once a target call attends it from its cache (C1's third clause); C2 the draft
            correctness = [v.invariant for v in w.violations if v.invariant.startswith("C")]
            assert correctness[:1] == ["C1"], w.report()
            if bug == "rejected":
                assert [v.invariant for v in w.outputs(WITH_PAD_ID, out, max_new_tokens=N)][:1] == ["C2"]
    assert seen == {("batch_min", "structural"): None, ("batch_min", "semantic"): "I3",
                    ("rejected", "structural"): None, ("rejected", "semantic"): None}
    assert out != reference("qwen3", WITH_PAD_ID)  # the rejected-draft bug changes the output


def test_the_hooks_leave_with_the_block():
    target, draft = pair("qwen3")
    _, w = checked(target, draft)
    calls = w.calls
    outside.decode(target, draft, WITH_PAD_ID[:1], K, 2)  # outside the block: not recorded
    assert w.calls == calls > 0


def test_glue_mistakes_are_named():
    target, draft = pair("qwen3")
    with pytest.raises(ValueError, match="check must be"):
        with watch(target=target, draft=draft, check="warn"):
            pass
    with pytest.raises(ValueError, match="no forward call"):  # and a block that ran no model checked nothing
        with watch(target=target, draft=draft) as w:
            tokens, mask = outside.left_pad([[1, 2, 3], [4, 5]])
            w.boundary(tokens, mask)
            with pytest.raises(ValueError, match="pass requests="):
                w.boundary(tokens[:1], mask[:1])


def test_a_replaced_cache_must_be_announced():
    """A decoder that rebuilds its caches and does not tell ``boundary`` would be
    checked against the stale object: refused, naming the argument. At the
    boundary when the decoder dropped the object the model last ran with
    (watch holds it weakly); at the model's next call when the old object is
    still alive but the call runs on another."""
    from transformers import DynamicCache

    target, draft = pair("qwen3")

    def forgetful(tokens, mask, **caches):
        w.boundary(tokens, mask)  # drops target_cache= / draft_cache=

    with watch(target=target, draft=draft) as w:
        with pytest.raises(ValueError, match="^boundary: .* pass target_cache="):
            outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=forgetful)

    tokens, mask = outside.left_pad(WITH_PAD_ID)
    with watch(target=target, draft=draft) as w, torch.no_grad():
        held = [DynamicCache(config=model.config) for model in (target, draft)]
        for model, cache in zip((target, draft), held):
            outside.forward(model, cache, tokens[:, :-1], mask[:, :-1])
        w.boundary(tokens, mask)
        width = tokens.shape[1] - 1
        rebuilt = outside.repad(draft, held[1], [0] * len(WITH_PAD_ID), [width] * len(WITH_PAD_ID), width)
        with pytest.raises(ValueError, match="another cache object than the one boundary.. last saw; pass draft_cache="):
            outside.forward(draft, rebuilt, tokens[:, -1:], mask)


def gumbel(seed: int):
    """A forward hook that adds Gumbel noise to the logits the decoder sees: its
    argmax is then a sample from the softmax (the Gumbel-max trick), so the
    outside decoder drafts by sampling. Registered after ``watch``'s own hook,
    which has recorded the model's true logits by then."""
    g = torch.Generator().manual_seed(seed)

    def hook(_module, _args, output):
        u = torch.rand(output.logits.shape, generator=g, dtype=output.logits.dtype).clamp_min(1e-12)
        output.logits = output.logits - torch.log(-torch.log(u))
        return output

    return hook


def test_a_sampling_decoder_is_refused_not_misreported():
    """The recorder derives drafts and commits by argmax; a decoder that drafts by
    sampling gets a ValueError naming that, not I4/I5/I7 violations. Negative
    control: the same decoder without the noise is silent (greedy drafts)."""
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft) as w:
        handle = draft.register_forward_hook(gumbel(0))
        try:
            with pytest.raises(ValueError, match="greedy decoders only") as refused:
                outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=w.boundary)
        finally:
            handle.remove()
    assert "not the draft model's greedy choice" in str(refused.value) and w.violations == []
    _, clean = checked(target, draft)
    assert clean.violations == []


def test_the_picture_marks_exactly_the_slots_I6_rejects():
    """``provenance_cells`` (chapter 9's picture): at the batch-minimum bug's boundary
    the outlined cell is the violation's slot, rows realigned by their own count
    are clean, and the draft cache (realigned correctly) has no bad slot."""
    from batchspec.viz.recorded import provenance_cells

    target, draft = pair("qwen3")
    with watch(target=target, draft=draft) as w:
        with pytest.raises(InvariantViolation) as caught:
            outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=w.boundary, bug="batch_min")
    v, cells = caught.value.violation, provenance_cells(w.caught, w.ledger, "target")
    row, slot = cells.marks[0]
    assert (row, f"slot {slot} ") == (v.row, v.detail[: len(f"slot {slot} ")])
    assert {i for i, _ in cells.marks} == {x.row for x in (v, *caught.value.others) if x.model == "target"}
    assert any("unknown" not in kinds for kinds in cells.kinds)
    draft_cells = provenance_cells(w.caught, w.ledger, "draft")
    assert draft_cells.marks == [] and not any("unknown" in kinds for kinds in draft_cells.kinds)


def test_a_caught_observation_keeps_its_calls_logits(monkeypatch):
    """The chains the checker carries from call to call keep a copy of each call without
    its logits; an observation the layout checks caught keeps the calls as they were,
    logits included (I5 reads them)."""
    from types import SimpleNamespace

    from batchspec.invariants import watch_layout

    def flag_verify(obs, *args):  # a stand-in finding at the first verification step
        return [SimpleNamespace(call=None, invariant="I5")] if obs.step == "verify" else []

    monkeypatch.setattr(watch_layout, "check_all", flag_verify)
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft, check="record") as w:
        outside.decode(target, draft, WITH_PAD_ID, K, N, on_boundary=w.boundary)
    assert w.caught is not None and w.caught.step == "verify"
    assert w.caught.calls[-1].model == "target" and w.caught.calls[-1].logits is not None
