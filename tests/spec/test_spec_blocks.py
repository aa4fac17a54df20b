"""Every Python block of spec/ runs, and the abstract model satisfies the theorems of §5.

The blocks are executed in order in one namespace (``spec_namespace``); the
counterexamples of §6 and §7 are ``assert`` statements inside the blocks, so
executing them checks them. Here the theorems' executable statements are
evaluated on every case of small bounded domains.
"""

from __future__ import annotations

import itertools
import sys
import types

import pytest

from _spec_helpers import python_blocks, spec_files, spec_namespace


@pytest.fixture(scope="module")
def spec():
    return spec_namespace()


def test_every_section_file_has_blocks_and_all_execute():
    module = types.ModuleType("batchspec_spec_check")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    counts = {}
    for path in spec_files():
        blocks = python_blocks(path)
        counts[path.name] = len(blocks)
        for line, source in blocks:
            exec(compile("\n" * (line - 1) + source, str(path), "exec"), namespace)  # noqa: S102
    assert [p for p in counts if counts[p] == 0] == ["01-notation.md"]
    assert sum(counts.values()) >= 30


def _aligned_rows(batch: int, width: int):
    """Every (pad, length) of ``batch`` rows satisfying I1 at ``width``, tight."""
    for length in itertools.product(range(1, width + 1), repeat=batch):
        if max(length) == width:
            yield [width - c for c in length], list(length)


def test_5_1_update_rule_preserves_alignment(spec):
    cases = 0
    for batch, width in itertools.product((1, 2, 3), (1, 2, 3, 4)):
        for (pad, length), a, keep in itertools.product(
                _aligned_rows(batch, width), itertools.product(range(1, 5), repeat=batch),
                itertools.product((True, False), repeat=batch)):
            assert spec["update_preserves_alignment"](pad, length, list(a), list(keep)), (pad, length, a, keep)
            cases += 1
    assert cases > 10_000


def test_5_3_no_shift(spec):
    for batch, width in itertools.product((1, 2, 3), (1, 2, 3, 4)):
        for (pad, length), a in itertools.product(_aligned_rows(batch, width),
                                                  itertools.product(range(1, 5), repeat=batch)):
            assert spec["no_shift"](pad, length, list(a))
    # the predicate can fail: unequal a_i at B = 2 shift a row (and the theorem does not apply)
    *_, delta = spec["repad"]([0, 1], [2, 1], [1, 3], [True, True])
    assert delta != [0, 0]


def _error_sets(target, autoregressive, prompt, n):
    """For every subset E of generated indices 0..n-1: the streams after which a
    draft errs so that it proposes a wrong token exactly at the indices in E."""
    output = autoregressive(target, prompt, n, ())
    for size in range(n + 1):
        for chosen in itertools.combinations(range(n), size):
            yield {tuple(prompt + output[:j]) for j in chosen}


@pytest.mark.slow_except('2')
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_5_2_exact_for_every_error_pattern(spec, k):
    """Abstract model, every draft error pattern on 4 generated tokens per row,
    batches of 1..3 rows with ragged prompts, with and without an EOS."""
    toy, erring, exact, autoregressive = (spec[n] for n in ("toy_model", "erring_draft", "exact", "autoregressive"))
    target = toy(11)
    prompts = [[3, 1, 4], [5], [9, 2]]
    runs = 0
    for batch in (1, 2, 3):
        rows = prompts[:batch]
        per_row = [list(_error_sets(target, autoregressive, p, 4)) for p in rows]
        eos_choices = [(), (autoregressive(target, rows[0], 4, ())[1],)]
        combos = list(itertools.product(*per_row))
        if k == 0:
            combos = combos[:1]  # no draft: the errors do not matter
        elif batch == 3:
            combos = combos[::7]  # every 7th of the 4096 combinations of three rows
        for errs, eos in itertools.product(combos, eos_choices):
            models = {"target": target}
            if k:
                models["draft"] = erring(target, set().union(*errs))
            assert exact(models, rows, k, 4, eos), (batch, errs, eos)
            runs += 1
    assert runs > (4 if k == 0 else 500)


def test_5_2_exact_with_unrelated_drafts(spec):
    """Drafts from an unrelated toy model (mostly rejected) and from the target
    itself (always accepted), long enough for several rounds."""
    toy, exact = spec["toy_model"], spec["exact"]
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 10], [11, 12]]
    for seed, k, batch in itertools.product(range(4), (1, 2, 5), (1, 2, 4)):
        target = toy(100 + seed)
        for draft in (toy(200 + seed), target):
            assert exact({"target": target, "draft": draft}, prompts[:batch], k, 9, ())


def test_5_4_tokens_per_call(spec):
    """1 <= a_i <= k' + 1 in every round, and the expectation formulas against
    an exact sum over acceptance patterns."""
    toy, decode = spec["toy_model"], spec["decode"]
    target, draft = toy(5), toy(6)
    run = decode({"target": target, "draft": draft}, [[1, 2], [3], [4, 5, 6]], [0, 1, 2], 3, 10, ())
    rounds = [obs.record for obs in run if obs.record]
    assert rounds and all(1 <= a <= r["drafted"] + 1 for r in rounds for a in r["appended"])
    expected = spec["expected_tokens"]
    for alpha, k, batch in itertools.product((0.3, 0.8), (1, 3), (1, 2, 3)):
        law = [alpha ** j * (1 - alpha) for j in range(k)] + [alpha ** k]  # P(m = j)
        for rollback in (False, True):
            total = 0.0
            for ms in itertools.product(range(k + 1), repeat=batch):
                p = 1.0
                for m in ms:
                    p *= law[m]
                total += p * (min(ms) + 1 if rollback else sum(m + 1 for m in ms) / batch)
            assert abs(total - expected(alpha, k, batch, rollback)) < 1e-12
    assert round(expected(0.8, 5, 1, False), 2) == 3.69
    assert round(expected(0.8, 5, 2, True), 2) == 2.59
    assert round(expected(0.8, 5, 8, True), 2) == 1.20


def test_each_abstract_invariant_fires(spec):
    """Every abstract predicate is seen to fail on a violating state."""
    toy = spec["toy_model"]
    obs, _ = spec["masking_round_two"](toy(1), [[3], [3]])
    assert spec["violations"](obs) == ["I1", "I2", "I4"]
    # I3: a cache slot holding another token's record
    batch = spec["BatchState"]([[3, 1]], [0], [2], [0], [2], {"target": [[((4, 0),)]]})
    assert spec["violations"](spec["Observation"]("realign", batch)) == ["I3"]
    # I3: a cache of the wrong length at a boundary
    batch.caches["target"] = [[((3, 0),), ((1, 1),)]]
    assert spec["violations"](spec["Observation"]("realign", batch)) == ["I3"]
    batch.caches["target"] = [[((3, 0),)]]
    assert spec["violations"](spec["Observation"]("realign", batch)) == []
    assert spec["wrong_draft_cache_still_exact"](toy(1))
    assert spec["draft_bonus_counterexample"](toy(1))  # I5 alone


def test_abstract_registry_matches_code():
    from batchspec.invariants import INVARIANTS

    spec = spec_namespace()
    # The abstract registry splits what the code holds in one tuple: the invariants of one
    # observation, then those that also read the run's ledger (I6, I7). Together, in id order,
    # they are exactly the code's, predicate by predicate.
    abstract = sorted((*spec["INVARIANTS"], *spec["LEDGER_INVARIANTS"]), key=lambda e: int(e[0][1:]))
    assert [i for i, _ in abstract] == [i for i, _ in INVARIANTS]
    assert [p.__name__ for _, p in abstract] == [p.__name__ for _, p in INVARIANTS]


@pytest.mark.parametrize("policy", ["laggards_first", "nearest_lengths", "full_group_only"])
def test_8_5_exspec_exact_for_any_policy(spec, policy):
    """EXSPEC in the abstract model: every invariant after every step and the
    batch-1 output, for windows from B to 3B, k from 0 to 3, with and without EOS."""
    toy, exact = spec["toy_model"], spec["exspec_exact"]
    prompts = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], [11], [12, 13], [14, 15, 16]]
    runs = 0
    for seed, (batch, window), k in itertools.product(range(3), ((1, 1), (2, 2), (2, 5), (3, 7)), (0, 1, 3)):
        target = toy(300 + seed)
        eos = (spec["autoregressive"](target, prompts[0], 6, ())[2],) if seed == 1 else ()
        for draft in ([None] if k == 0 else [toy(400 + seed), target]):
            models = {"target": target} if draft is None else {"target": target, "draft": draft}
            assert exact(models, prompts, batch, window, spec[policy], k, 6, eos), (seed, batch, window, k)
            runs += 1
    assert runs == 3 * 4 * 5


def test_8_2_policies(spec):
    """Both policies return min(B, W) distinct members; nearest_lengths has the
    least padding of all choices and takes a member idle for MAX_IDLE rounds."""
    nearest, authors, padding = spec["nearest_lengths"], spec["full_group_only"], spec["padding"]
    window = [(5, 0), (3, 2), (5, 1), (4, 0), (3, 0), (5, 0)]
    assert sorted(authors(window, 3)) == [0, 2, 5] and padding(window, authors(window, 3)) == 0
    assert authors(window, 4) == [0, 1, 2, 3]
    assert nearest(window, 2) == [1, 4]  # two equal-length groups: the one that waited longer
    assert padding(window, nearest(window, 4)) == 1  # three 5s and the 4
    window = [(9, 0), (3, spec["MAX_IDLE"]), (9, 0), (9, 0)]
    assert 1 in nearest(window, 2) and nearest(window, 2, max_idle=None) == [0, 2]


def test_each_abstract_correctness_invariant_fires(spec):
    """C1-C3 (Spec §3.12), each seen to fail on a violating state and to hold on a correct one."""
    toy = spec["toy_model"]
    obs, _ = spec["masking_round_two"](toy(1), [[3], [3]])  # masking: holes and positions counting slots
    assert not spec["correct_calls"](obs, {})
    ForwardCall = spec["ForwardCall"]
    good = [[((5, 0),), ((5, 0), (7, 1))]]
    call = ForwardCall("target", [[9]], [[1, 1, 1]], [[2]], 2, [[1]])
    assert spec["one_chain"](call, good, {})
    assert not spec["one_chain"](ForwardCall("target", [[9]], [[1, 1, 1]], [[3]], 2, [[1]]), good, {})  # position
    assert not spec["one_chain"](call, [[((5, 0),), ((6, 0), (7, 1))]], {})  # a slot from another prefix
    assert not spec["one_chain"](call, [[((5, 0),), None]], {})  # a slot never written
    hidden = ForwardCall("target", [[9]], [[1, 0, 1]], [[1]], 2, [[1]])  # slot 1 masked, the input takes position 1
    assert spec["one_chain"](hidden, good, {})  # a rejected draft left as a hole
    assert not spec["one_chain"](hidden, good, {((5, 0),): 7})  # the target had chosen 7 there: committed, hidden
    chosen = {((4, 0),): 8, ((4, 0), (8, 1)): 2}
    assert spec["target_choices"]([4], [8, 2], chosen)
    assert not spec["target_choices"]([4], [8, 3], chosen)
    assert spec["stops_where_it_should"]([8, 2], 2, ()) and spec["stops_where_it_should"]([8], 2, (8,))
    assert not spec["stops_where_it_should"]([8], 2, ())  # stopped early
    assert not spec["stops_where_it_should"]([8, 2], 2, (8,))  # went on after its EOS
    assert [name for name, _ in spec["CORRECTNESS"]] == ["C1", "C2", "C3"]


def test_5_7_correctness_implies_exact_and_can_fail(spec):
    target = spec["toy_model"](1)
    prompt = [3, 1]
    want = spec["autoregressive"](target, prompt, 3, ())
    chosen = {}
    stream = list(prompt)
    for token in want:
        chosen[spec["kv"](stream, len(stream) - 1)] = target(spec["kv"](stream, len(stream) - 1))
        stream.append(token)
    assert spec["correctness_implies_exact"](target, prompt, want, chosen, 3, ())
    # a "choice" recorded from a call that broke C1 (a record the target never saw on that chain)
    liar = dict(chosen)
    liar[spec["kv"](prompt, 1)] = (want[0] + 1) % 7
    wrong = [(want[0] + 1) % 7] + want[1:]
    assert not spec["correctness_implies_exact"](target, prompt, wrong, {**liar, **{
        spec["kv"](prompt + wrong[:j], len(prompt) + j - 1): wrong[j] for j in range(1, 3)}}, 3, ())
