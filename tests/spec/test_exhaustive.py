"""Bounded exhaustive check: every acceptance pattern, every EOS placement (Spec §5.6).

The enumeration runs on the spec's abstract model, with the real tiny models
seen as its functions (one memoised forward per record): a scripted draft
(Spec §5.6) forces every pattern ``(m_1, .., m_B)`` of every round; after
every step I1–I5 and tightness must hold, after every round the forced
``m_i``, §5.1, §5.3 and §5.4, and at every leaf each output must be the
target's batch-1 greedy output cut at EOS and budget. The tensor code
(``batchspec.reference``, with ``batchspec.models.scripted.ScriptedDraft``
around a real draft model) then runs every ``N``-th leaf in lockstep with the
abstract model: its state must map onto the abstract one after every step
(tokens, padding, every call, every cache slot against a fresh forward) and
the code's invariant checker must stay silent.

Default (CI), ``test_default``: batch 1..3, ``k`` 1..3, two rounds, every EOS
placement for batch <= 2; every 29th leaf replayed on tensors. ``-m exhaustive``,
``test_full``: batch 1..3, ``k`` 1..3, three rounds (the cell batch 3 / ``k``
3 alone has 4^9 = 262,144 patterns), every EOS placement for batch <= 2;
every 97th leaf replayed. Counts and the command: Spec §5.6; times: docs/design.md.
"""

from __future__ import annotations

import time

import pytest
import torch

from batchspec.reference.draft_policy import Fixed
from _exhaustive import AbstractWalk, Cell, Failure, Pair, Replay, Tally, Tree, cells, sweep, trees_of
from _spec_helpers import PROMPTS, as_function, cut, greedy_continuation, one_thread, spec_namespace
from batchspec.faults import CATALOGUE
from batchspec.models import tiny
from batchspec.models.scripted import Script, ScriptedDraft
from batchspec.reference import STEPS, Models
from batchspec.reference.eqspec import eqspec_round
from batchspec.reference.state import RowOutput

#: Default (CI): two rounds, batch 1..3, k 1..3, every EOS placement for batch 1..2.
DEFAULT = cells((1, 2, 3), (1, 2, 3), 2, eos_batches=(1, 2), eos_ks=(1, 2, 3))
DEFAULT_EVERY = 29
#: What the default covered before the abstract enumeration (k 1..2): it must stay covered.
TODAY = cells((1, 2, 3), (1, 2), 2, eos_batches=(1, 2), eos_ks=(1, 2))
#: ``-m exhaustive``: three rounds, batch 1..3, k 1..3, every EOS placement for batch 1..2.
FULL = cells((1, 2, 3), (1, 2, 3), 3, eos_batches=(1, 2), eos_ks=(1, 2, 3))
FULL_EVERY = 97
HORIZON = 3 * 4 + 1  # the scripts' length: more than any cell's rounds * (k + 1)


@pytest.fixture(scope="module")
def spec():
    return spec_namespace()


@pytest.fixture(scope="module")
def pair(spec):
    """A real tiny Llama target, a real smaller draft under the script, and the
    target's greedy continuations (computed once), which are HF ``generate``'s
    and the spec's batch-1 reference (§5.2)."""
    with one_thread(), torch.no_grad():
        target, inner = tiny.pair("llama", "unrelated", seed=0)
        continuations = [greedy_continuation(target, p, HORIZON) for p in PROMPTS]
        ids = torch.tensor([PROMPTS[0]])
        generated = target.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=HORIZON, eos_token_id=None, pad_token_id=0)
        assert generated[0, len(PROMPTS[0]):].tolist() == continuations[0]
        models = Pair(target, inner, continuations, as_function(target), as_function(inner))
        for prompt, continuation in zip(PROMPTS, continuations):
            eos = {continuation[4]}
            assert spec["autoregressive"](models.target_fn, prompt, HORIZON, eos) == cut(continuation, eos, HORIZON)
        yield models


def run(spec, pair, trees, every, steps=STEPS):
    with one_thread():
        return sweep(spec, pair, trees, every, steps)


def assert_complete(trees, total, each, every) -> None:
    """The walk was not cut short: every tree with no EOS and the full budget
    (no row ever leaves) has (k+1)^(B*R) leaves and sum_r (k+1)^(B*r) rounds,
    all three stop kinds occurred, and the replay took every N-th leaf."""
    for tree in trees:
        c = tree.cell
        if not tree.eos and tree.budget == c.horizon:
            rounds = sum((c.k + 1) ** (c.batch * r) for r in range(1, c.rounds + 1))
            assert (each[tree].patterns, each[tree].rounds) == ((c.k + 1) ** (c.batch * c.rounds), rounds), tree
    assert total.finished["eos"] > 0 and total.finished["length"] > 0 and total.finished[None] > 0
    assert total.replayed == -(-total.patterns // every) and total.tensor_states > total.replayed


def report(name, spec, pair, cells, every) -> None:
    trees = trees_of(cells, pair.continuations)
    start, cpu = time.perf_counter(), time.process_time()
    total, each = run(spec, pair, trees, every)
    print(f"\nexhaustive {name}: {total}; {time.perf_counter() - start:.1f}s wall, "
          f"{time.process_time() - cpu:.1f}s CPU", flush=True)
    for cell in cells:
        part = Tally()
        for tree in cell.trees(pair.continuations):
            part.add(each[tree])
        print(f"  {cell}: {part}")
    assert_complete(trees, total, each, every)
    return total, each


def test_scripted_draft_forces_the_pattern(pair):
    """The forcing device on tensors: deviation at generated index 1 of row 0
    and none on row 1 gives m = (1, k') in the first round, and the draft
    cache is the real one (its call changed the cache)."""
    scripts = {r: Script(len(p), pair.continuations[r], {1} if r == 0 else set()) for r, p in enumerate(PROMPTS[:2])}
    draft = ScriptedDraft(pair.inner, scripts)
    draft.follow([0, 1])
    models = Models(pair.target, draft)
    with one_thread(), torch.no_grad():
        state = STEPS.prefill(models, PROMPTS[:2], [0, 1], [])
        before = state.draft_cache.get_seq_length()
        events = list(eqspec_round(models, state, Fixed(3), 12, None, {0: RowOutput(), 1: RowOutput()}))
    assert events[-1].record.accepted == [1, 3]
    assert events[0].drafts[0].tolist() == [pair.continuations[0][0]]
    # row 1 accepted all k' and stays: the catch-up is deferred, the draft cache one slot short (Spec §4.2.1)
    assert state.draft_cache.get_seq_length() == state.width - 2 > before


@pytest.mark.slow
def test_default(spec, pair):
    """Every pattern of the default scope on the abstract model, every 29th on
    the tensor code; it contains everything the default covered before."""
    total, each = report("default", spec, pair, DEFAULT, DEFAULT_EVERY)
    before = trees_of(TODAY, pair.continuations)
    assert set(before) <= set(each)
    assert sum(each[t].patterns for t in before) == 2_398  # the tensor walk's count over that scope


@pytest.mark.exhaustive
def test_full(spec, pair):
    """The full scope, the 262,144-pattern cell included, end to end."""
    total, each = report("full", spec, pair, FULL, FULL_EVERY)
    assert each[Tree(Cell(3, 3, 3), (), 12)].patterns == 4 ** 9


# --- every check of the walk fires on a state that violates it -----------------------------

SMALL = Tree(Cell(2, 2, 2), (), 6)


def test_abstract_fault_is_named_by_pattern(spec, pair):
    """A realignment that ignores δ_i (the caches stay put while the grid
    moves) breaks I3 at the first ragged round; the failure names the tree,
    the pattern and the step."""
    broken = spec_namespace()
    broken["realign"] = lambda cache, delta, new_pad, new_width: [
        cache[s] if s >= new_pad else None for s in range(new_width - 1)]
    with pytest.raises(Failure, match=r"B=2 k=2 rounds=2 .*pattern \[\(0, 0\), \(0, 1\)\] .*step 'realign'.*'I3'"):
        run(broken, pair, [SMALL], 0)


def test_round_properties_fire(spec):
    """Each property of ``round_problems`` fires on a record that violates it
    and none fires on a correct one."""
    problems = spec["round_problems"]
    good = {"drafted": 2, "accepted": [2, 0], "appended": [3, 1], "width": 6, "realigned": True}
    assert problems([0, 2], [3, 1], 2, (2, 0), good, [False, False]) == []
    assert problems([0, 2], [3, 1], 2, (1, 0), good, [False, False]) == ["forced m_i"]
    assert problems([0, 2], [3, 1], 2, (2, 0), dict(good, appended=[4, 1]), [False, False]) == ["§5.4"]
    assert problems([0, 2], [3, 1], 2, (2, 0), dict(good, appended=[3, 0]), [False, False]) == ["§5.4"]
    equal = dict(good, accepted=[1, 1], appended=[2, 2], width=5, realigned=False)
    assert problems([0, 2], [3, 1], 2, (1, 1), equal, [False, False]) == []
    assert problems([0, 2], [3, 1], 2, (1, 1), dict(equal, realigned=True), [False, False]) == ["§5.3 moved"]
    assert broken_rule("pads one slot too many")["round_problems"]([0, 2], [3, 1], 2, (2, 0), good, [False] * 2) == ["§5.1"]
    assert broken_rule("shifts one slot too far")["round_problems"]([0, 2], [3, 1], 2, (1, 1), equal, [False] * 2) == ["§5.3"]


def broken_rule(how: str) -> dict:
    """A spec namespace whose update rule (§4.4) is wrong in one way."""
    spec = spec_namespace()
    rule = spec["repad"]

    def repad(pad, length, a, keep):
        rows, width, new_pad, new_length, delta = rule(pad, length, a, keep)
        if how == "pads one slot too many":
            return rows, width, [q + 1 for q in new_pad], new_length, delta
        return rows, width, new_pad, new_length, [d + 1 for d in delta]

    spec["repad"] = repad
    return spec


def test_wrong_reference_output_is_named(spec, pair):
    """The leaf check fires when an output is not the batch-1 output."""
    walk = AbstractWalk(spec, pair, SMALL)
    walk.expected[1] = [(walk.expected[1][0] + 1) % pair.vocab] + walk.expected[1][1:]
    with one_thread(), torch.no_grad(), pytest.raises(Failure, match=r"pattern \[\(0, 0\), \(0, 0\)\].*step 'leaf'.*request 1"):
        walk.run()


@pytest.mark.parametrize("fault", ["draft_unaligned", "bonus_from_draft"])
def test_tensor_fault_is_named_by_pattern(spec, pair, fault):
    """The replay catches a faulty tensor step that the abstract model does
    not share: the draft cache left unaligned (invisible to the structural
    checks, output still exact) and the bonus taken from the draft."""
    with pytest.raises(Failure, match=r"B=2 k=2 .*pattern \[.*\].*tensor state differs"):
        run(spec, pair, [SMALL], 1, CATALOGUE[fault].steps)


def test_replay_checks_fire(spec, pair):
    """The replay's own checks: one decoder stopping before the other, and
    different final outputs, each named by pattern."""
    replay = Replay(spec, pair, SMALL, [((0, 0),)])
    with pytest.raises(Failure, match=r"pattern \[\(0, 0\)\].*more steps"):
        replay.step(None, spec["Observation"]("realign", None), ((0, 0),))
    with pytest.raises(Failure, match=r"pattern \[\(0, 0\)\].*tensor outputs"):
        replay.descend(None, None, {0: RowOutput([5])}, {0: {"tokens": [6], "stop": None}}, ((0, 0),), {})
