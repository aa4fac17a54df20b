"""The tensor implementation refines the abstract model of spec/ (Spec §4).

``batchspec.reference.decode`` and the spec's ``decode`` run side by side on
the same real tiny float64 models. The abstract models are the real ones seen
through §1.2: a function from a (token, position) record to the argmax of a
fresh batch-1 forward. After every step the tensor state, mapped to per-row
token lists, must equal the abstract state exactly:

* step name, ``p_i``, ``c_i``, ``L``, each row's content, requests, prompt lengths;
* the round's drafts, the tokens committed at verification, and every
  forward call: model, cache length, input tokens, attention mask, position
  ids, and the argmax of what it returned;
* every cache: its length, and every slot at or after ``p_i`` (committed and
  speculative) holding the keys/values of a fresh single-sequence forward of
  the abstract slot's record (float64, relative error below 1e-9);
* each round's record (``k'``, ``m_i``, ``a_i``, ``L'``, moved), and the outputs.
"""

from __future__ import annotations


import pytest
import torch

from batchspec.reference.draft_policy import Fixed
from _spec_helpers import PROMPTS, Compare, as_function, one_thread, spec_namespace
from batchspec.invariants import watch
from batchspec.models import tiny
from batchspec.oracle import hf_oracle
from batchspec.reference import Models, decode
from batchspec.reference.storage import layer_tensors

@pytest.fixture(scope="module")
def spec():
    return spec_namespace()


def lockstep(spec, target, draft, prompts, k, max_new, eos):
    """Run both decoders, compare after every step; return the number of steps. The tensor
    decoder runs inside ``watch``: its calls keep C1 and its outputs C2 and C3 (Spec §5.8)."""
    with watch(target=target, draft=draft) as w:  # check="raise"
        steps, outputs, moved = _lockstep(spec, target, draft, prompts, k, max_new, eos)
        w.outputs(prompts, [outputs[r]["tokens"] for r in range(len(prompts))], max_new_tokens=max_new,
                  eos_token_id=list(eos))
    assert w.violations == [] and w.outputs_checked == len(prompts)
    return steps, outputs, moved


def _lockstep(spec, target, draft, prompts, k, max_new, eos):
    models = Models(target, draft)
    abstract_models = {"target": as_function(target)}
    if draft is not None:
        abstract_models["draft"] = as_function(draft)
    requests = list(range(len(prompts)))
    eos_tensor = torch.tensor(eos, dtype=torch.long) if eos else None
    real = decode(models, [list(p) for p in prompts], requests, Fixed(k), max_new, eos_tensor)
    abstract = spec["decode"](abstract_models, [list(p) for p in prompts], requests, k, max_new, tuple(eos))
    compare = Compare(spec, hf_oracle({"target": target, "draft": draft}))
    while True:
        try:
            event = next(real)
        except StopIteration as stop:
            real_out = stop.value
            with pytest.raises(StopIteration) as done:
                next(abstract)
            break
        compare(event, next(abstract))
    abstract_out = done.value.value
    assert {r: (o.tokens, o.stop) for r, o in real_out.items()} == {
        r: (o["tokens"], o["stop"]) for r, o in abstract_out.items()}
    return compare.steps, abstract_out, compare.realigned


CASES = [
    # family, draft kind, seed, k, max_new_tokens, EOS = row 0's output at this index (None: no EOS).
    # Ragged rounds (rows accepting different counts, caches moving) occur in the
    # llama/perturbed, qwen3 and gpt2 cases; the others cover all-reject and all-accept.
    ("llama", "perturbed", 3, 3, 9, None),
    ("llama", "unrelated", 3, 2, 7, 2),
    ("qwen3", "perturbed", 3, 2, 8, 4),
    ("gpt2", "perturbed", 5, 3, 8, None),
    ("llama", "self", 3, 2, 7, None),
]


@pytest.mark.slow_except('llama-unrelated-3-2-7-2')
@pytest.mark.parametrize("family,draft_kind,seed,k,max_new,eos_at", CASES)
def test_eqspec_refines_the_spec(spec, family, draft_kind, seed, k, max_new, eos_at):
    with one_thread(), torch.no_grad():
        target, draft = tiny.pair(family, draft_kind, seed=seed)
        eos = []
        if eos_at is not None:
            plain = spec["autoregressive"](as_function(target), PROMPTS[0], max_new, ())
            eos = [plain[eos_at]]
        steps, outputs, moved = lockstep(spec, target, draft, PROMPTS, k, max_new, eos)
    assert steps >= 6
    if family != "llama" or draft_kind == "perturbed":
        assert moved, "no ragged round: the case does not exercise the realignment"
    if eos:
        assert outputs[0]["stop"] == "eos"


def test_autoregressive_refines_the_spec(spec):
    """No draft and k = 0: the same machinery is plain greedy decoding (Spec §4.8)."""
    with one_thread(), torch.no_grad():
        target, _ = tiny.pair("llama", "self", seed=4)
        steps, _, _ = lockstep(spec, target, None, PROMPTS, 0, 4, [])
    assert steps == 1 + 4 * 2  # prefill, then verify and realign per round


def test_refinement_check_can_fail(spec):
    """The comparison is not vacuous: a decoder that keeps a stale cache slot
    (realignment skipped for one row) is caught."""
    import dataclasses

    from batchspec.reference import STEPS
    from batchspec.reference import transitions

    def lazy(state, verdict, plan, lag=0):
        transitions.unpad_append_repad(state, verdict, plan, lag)
        for keys, _ in layer_tensors(state.target_cache):
            keys[0, :, : state.width - 1] += 1.0  # row 0's cached keys no longer match its tokens

    with one_thread(), torch.no_grad():
        target, draft = tiny.pair("llama", "perturbed", seed=3)
        models = Models(target, draft)
        abstract_models = {"target": as_function(target), "draft": as_function(draft)}
        real = decode(models, [list(p) for p in PROMPTS], [0, 1, 2], Fixed(2), 6, None,
                      steps=dataclasses.replace(STEPS, unpad_append_repad=lazy))
        abstract = spec["decode"](abstract_models, [list(p) for p in PROMPTS], [0, 1, 2], 2, 6, ())
        compare = Compare(spec, hf_oracle({"target": target, "draft": draft}))
        with pytest.raises(AssertionError):
            for event in real:
                compare(event, next(abstract))


def to_code_observation(spec, obs):
    """The tensor observation of an abstract one (structural: cache slots hold zeros)."""
    import dataclasses

    from batchspec.invariants import CacheView, ForwardCall, Observation
    from batchspec.reference.state import attention_mask

    batch = obs.batch
    rows, width = len(batch.tokens), spec["width"](batch)
    pad = torch.tensor(batch.pad, dtype=torch.long)
    caches = {name: CacheView([(torch.zeros(rows, 1, len(slots[0]), 1),) * 2])
              for name, slots in batch.caches.items()}
    calls = []
    for call in obs.calls:
        real = ForwardCall(call.model, torch.tensor(call.input_ids), torch.tensor(call.attention_mask),
                           torch.tensor(call.position_ids), call.cache_length)
        outputs = torch.tensor(call.logits)  # [B, n]
        real.logits = torch.nn.functional.one_hot(outputs, spec["VOCAB"]).double()  # [B, n, V]
        calls.append(real)
    fields = {f.name for f in dataclasses.fields(Observation)}
    committed = obs.committed
    if committed is None and obs.step == "verify":  # the code demands it there: "commits nothing" is explicit
        committed = [[] for _ in batch.tokens]
    extra = {"committed": committed} if "committed" in fields else {}
    drafts = torch.tensor(obs.drafts, dtype=torch.long).reshape(rows, -1) if obs.drafts is not None else None
    return Observation(round=1, step=obs.step, tokens=torch.tensor(batch.tokens), mask=attention_mask(pad, width),
                       pad=list(batch.pad), length=list(batch.length), caches=caches, calls=calls,
                       requests=list(batch.requests), draft_tokens=drafts, **extra)


def test_code_predicates_agree_with_the_spec(spec):
    """The registry's predicates, run on the tensor form of the spec's
    counterexamples (§6, §3), fire exactly where the spec's predicates do; and
    on every step of a valid abstract run neither fires."""
    from batchspec.invariants import INVARIANTS, violations

    toy = spec["toy_model"](1)
    masking, _ = spec["masking_round_two"](toy, [[3], [3]])
    dsd_prefill, dsd_verify, _ = spec["dsd_first_steps"](toy)
    stale = spec["Observation"]("realign", spec["BatchState"]([[3, 1]], [0], [2], [0], [2], {"target": [[((3, 0),)] * 2]}))
    cases = {
        "masking": (masking, {"rectangular_alignment", "position_continuity", "draft_target_sync"}),
        "dsd prefill": (dsd_prefill, {"rectangular_alignment", "draft_target_sync"}),  # I4 reads prefill calls too
        "dsd verify": (dsd_verify, {"rectangular_alignment", "position_continuity", "draft_target_sync"}),
        "cache of L slots at a boundary": (stale, {"cache_correspondence"}),
        "draft's bonus": (spec["draft_bonus_step"](toy), {"greedy_verification"}),
    }
    names = dict(spec["INVARIANTS"])
    registered = {p.__name__ for _, p in INVARIANTS}
    for case, (obs, expected) in cases.items():
        expected &= registered  # an invariant the code has not registered yet cannot fire there
        assert {names[i].__name__ for i in spec["violations"](obs)} & registered == expected, case
        assert {v.name for v in violations(to_code_observation(spec, obs))} == expected, case
    run = spec["decode"]({"target": toy, "draft": spec["toy_model"](2)}, [[3, 1, 4], [5], [9, 2]], [0, 1, 2], 2, 7, ())
    checked = 0
    for obs in run:
        if obs.batch.tokens:
            assert spec["violations"](obs) == [] and violations(to_code_observation(spec, obs)) == [], obs.step
            checked += 1
    assert checked > 10


def test_exspec_policies_refine_the_spec(spec):
    """The code's O(W^2) ``nearest_lengths`` finds a choice as good as the
    spec's exhaustive one (least padding, then most waiting), and the authors'
    rule and the default ``laggards_first`` pick the same members as the
    spec's, on random windows (Spec §8.2)."""
    import random

    policy = pytest.importorskip("batchspec.reference.exspec_policy")
    rng = random.Random(0)
    for _ in range(2000):
        width = rng.randint(1, 7)
        batch = rng.randint(1, width)
        window = [(rng.randint(1, 6), rng.choice([0, 0, 0, 1, 2, 9])) for _ in range(width)]
        candidates = [policy.Candidate(length, idle) for length, idle in window]
        for max_idle in (policy.MAX_IDLE, None):
            got = policy.nearest_lengths(candidates, batch, max_idle)
            best = spec["nearest_lengths"](window, batch, max_idle)
            assert len(set(got)) == min(batch, width)
            assert ((spec["padding"](window, got), -sum(window[i][1] for i in got))
                    == (spec["padding"](window, best), -sum(window[i][1] for i in best))), (window, batch)
        assert sorted(policy.full_group_only(candidates, batch)) == sorted(spec["full_group_only"](window, batch))
        # the default policy: same members unless a member is forced in (ties may then
        # resolve differently, so compare what the choice costs)
        got, want = policy.laggards_first(candidates, batch), spec["laggards_first"](window, batch)
        if max(idle for _, idle in window) >= policy.MAX_IDLE:
            assert ((spec["padding"](window, got), -sum(window[i][1] for i in got))
                    == (spec["padding"](window, want), -sum(window[i][1] for i in want))), (window, batch)
        else:
            assert sorted(got) == sorted(want), (window, batch)
