"""A call of few inputs read as lists (``invariants/small.py``) reads exactly as the tensor path
(Spec §3.12.1, §3.12.2)."""

import dataclasses

import pytest
import torch
from transformers import DynamicCache

import _bug_decoders as decoders
from _broken_helpers import K, N, WITH_PAD_ID, lazy_sources, pair
from _catch import check_catch

from batchspec.invariants import chains as chains_module
from batchspec.invariants import history as history_module
from batchspec.invariants import small as small_module
from batchspec.invariants import watch
from batchspec.invariants.correctness import one_chain
from batchspec.invariants.history import History
from batchspec.invariants.observation import ForwardCall
from batchspec.invariants.small import extend, fill, wrap
from batchspec.invariants.slots import BLIND


def test_a_call_without_its_logits_is_dataclasses_replace():
    """``ForwardCall.without_logits`` (what the checker keeps of a call once its choices are
    read) names its fields one by one: the same call as ``dataclasses.replace(call, logits=None)``,
    and a field added to ``ForwardCall`` fails here until it is carried there too."""
    call = ForwardCall("draft", torch.tensor([[5, 6]]), torch.tensor([[0, 1, 1, 1]]), torch.tensor([[1, 2]]), 2,
                       torch.zeros(1, 2, 7))
    kept = call.without_logits()
    assert [f.name for f in dataclasses.fields(ForwardCall)] == [
        "model", "input_ids", "attention_mask", "position_ids", "cache_length", "logits"]
    assert kept.logits is None and call.logits is not None
    for field in dataclasses.fields(ForwardCall)[:-1]:
        assert getattr(kept, field.name) is getattr(call, field.name), field.name
    assert dataclasses.replace(call, logits=None) == kept


def test_wrap_is_int64_arithmetic():
    big = 2**63 - 1
    for x in (0, 1, -1, big, big + 1, -big - 1, -big - 2, 3 * 2**64 + 5, -(2**70) - 9):
        assert wrap(x) == torch.tensor([x % 2**64], dtype=torch.uint64).view(torch.int64).item()


def test_extend_matches_the_tensor_formula_where_sums_wrap():
    """The chain elements of the inputs, as lists, equal ``History._inputs``' tensor formula
    (ranks by cumulative sum, hashes ``Σ (x + 1) R[rank]`` wrapping in int64), with weights
    and hashes near the int64 limits; ``at_rank`` says whether each position is its rank."""
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        b, n, width = 1 + trial % 5, 1 + trial % 4, 40
        weights = torch.randint(-2**62, 2**62, (width,), generator=g) * 2 + 1
        ranks = torch.randint(-1, 20, (b,), generator=g)
        nodes = torch.randint(-2**63, 2**63 - 1, (b,), generator=g)
        ids = torch.randint(0, 50_000, (b, n), generator=g)
        positions = ranks[:, None] + 1 + torch.arange(n) + (trial % 3 == 0) * (torch.arange(b) == 0)[:, None]
        rank_in = ranks[:, None] + torch.ones_like(ids).cumsum(1)
        contrib = (ids + 1) * weights[rank_in]
        node_in = nodes[:, None] + contrib.cumsum(1)
        expected = torch.stack([rank_in, ids, node_in - contrib, node_in], -1)  # [B, n, 4]
        quad, labels, at_rank, columns = extend(weights.tolist(), ranks.tolist(), nodes.tolist(), ids.tolist(),
                                                positions.tolist())
        assert torch.equal(fill(torch.empty((b, n, 4), dtype=torch.int64), quad), expected)
        assert fill(torch.empty((b, n, 4), dtype=torch.int64), labels)[..., 1].tolist() == positions.tolist()
        assert at_rank == torch.equal(positions, rank_in)
        assert columns == (node_in.flatten().tolist(), (node_in - contrib).flatten().tolist(),
                           ids.flatten().tolist(), rank_in.flatten().tolist())


def _counted(monkeypatch) -> list:
    """A list that gets ``"few"`` at each call that appends read as lists, ``"few_changed"`` at
    each call whose mask changed read as lists."""
    read_as_lists = []

    def counting(name):
        read = getattr(small_module, name)

        def counted(*args):
            chains = read(*args)
            if chains is not None:
                read_as_lists.append(name)
            return chains
        return counted

    for name in ("few", "few_changed"):
        monkeypatch.setattr(history_module, name, counting(name))
    return read_as_lists


def _state(layout: str, size: int, monkeypatch) -> tuple:
    """What ``watch`` remembers of one correct run of the bug decoders' ``layout``, and which
    calls it read as lists."""
    monkeypatch.setattr(small_module, "SMALL", size)
    read_as_lists = _counted(monkeypatch)
    target, draft = pair()
    with watch(target=target, draft=draft) as w:
        out = decoders.decode(target, draft, WITH_PAD_ID, K, N, layout)
        w.outputs(WITH_PAD_ID, out, max_new_tokens=N)
    history = w.history
    history.labels.flush()
    log = [(number, model, node.tolist(), attended.tolist()) for number, model, node, attended, _n in history.log]
    stream = history.stream
    return (dict(history.labels.labels), history.chosen, log, stream.grounded, stream.rejected, stream.odd,
            stream.proposed), set(read_as_lists)


@pytest.mark.parametrize("layout", ["repad", "right_holes", "static"])
def test_a_run_is_read_alike_as_lists_and_as_tensors(layout, monkeypatch):
    """Every label, choice, logged chain and stream mark of a whole run is the same with calls
    of few inputs read as lists and with every call read as tensors (``SMALL = 0``)."""
    as_lists, listed = _state(layout, small_module.SMALL, monkeypatch)
    as_tensors, none = _state(layout, 0, monkeypatch)
    assert listed == ({"few", "few_changed"} if layout == "right_holes" else {"few"}) and not none
    assert as_lists == as_tensors


@pytest.mark.parametrize("size", [small_module.SMALL, 0])
@pytest.mark.parametrize("bug", ["positions", "pad_from_ids", "stale", "crop_rows", "bonus_draft"])
def test_planted_bugs_caught_alike_as_lists_and_as_tensors(bug, size, monkeypatch):
    """C1 read from the lists: positions that lag, a mask that hides a committed token, rejected
    drafts left attended, one row's crop applied to all, a bonus from the draft: each caught at
    its first wrong call with its cause, with small calls read as lists and as tensors."""
    monkeypatch.setattr(small_module, "SMALL", size)
    check_catch(bug, "right_holes")
    check_catch(bug, "static")


@pytest.mark.parametrize("size", [small_module.SMALL, 0])
def test_a_one_token_call_fed_at_a_wrong_position_is_caught(size, monkeypatch):
    """A one-token call that appends to the previous call's chain (read as lists) with one row
    fed one position ahead: C1 flags that row at that call, as the tensor path does."""
    monkeypatch.setattr(small_module, "SMALL", size)
    read_as_lists = _counted(monkeypatch)
    target, draft = pair()
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with watch(target=target, draft=draft, check="record") as w:
        cache = DynamicCache(config=draft.config)
        draft(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache)
        draft(input_ids=torch.tensor([[13], [14]]), attention_mask=torch.ones((2, 5), dtype=torch.long),
              position_ids=torch.tensor([[4], [5]]), cache=cache)
    assert read_as_lists == (["few"] if size else [])
    assert [(v.invariant, v.call, v.row) for v in w.violations] == [("C1", 2, 1)], w.report()
    assert "position" in w.violations[0].detail


def _masked_again(size: int, hide: int, monkeypatch) -> tuple:
    """The target prefills ``[5, 6, 40, 8]`` and is fed its own choice ``y`` at position 4; then a
    call masks out slot ``hide`` (the mask changed, the cache did not) and feeds a token ``z``
    that is not ``y`` at the position that follows what it attends (``hide`` 4: the chain
    reads ``z`` at 4, where the target chose ``y``; ``hide`` 2: a hole inside the prompt, where
    40 is not the target's choice after ``[5, 6]``, so only the slot after it breaks the
    chain). ``(violations, what few_changed returned)``."""
    monkeypatch.setattr(small_module, "SMALL", size)
    returned, read = [], small_module.few_changed
    monkeypatch.setattr(history_module, "few_changed", lambda *a: returned.append(read(*a)) or returned[-1])
    target, draft = pair()
    ids = torch.tensor([[5, 6, 40, 8]])
    with watch(target=target, draft=draft, check="record") as w:
        cache = DynamicCache(config=target.config)
        y = target(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache).logits[0, -1].argmax()
        target(input_ids=y.view(1, 1), attention_mask=torch.ones((1, 5), dtype=torch.long), cache=cache)
        mask = torch.ones((1, 6), dtype=torch.long)
        mask[0, hide] = 0
        target(input_ids=(y + 1).view(1, 1) % target.config.vocab_size, attention_mask=mask,
               position_ids=torch.tensor([[4]]), cache=cache)
    return [(v.invariant, v.call, v.row, v.detail) for v in w.violations], returned


@pytest.mark.parametrize("hide, cause", [(4, "the mask hides a committed token"), (2, "slot 3")])
def test_a_changed_mask_that_breaks_the_chain_is_caught_alike(hide, cause, monkeypatch):
    """A call whose mask changed (read as lists when small) that hides the target's own choice
    and goes on with another token there (``hide = 4``), or leaves a hole inside the prompt
    (``hide = 2``): the list path declines it and the tensor path reports it at that call, with
    the same violations as when every call is read as tensors."""
    listed, tried = _masked_again(small_module.SMALL, hide, monkeypatch)
    tensors, not_tried = _masked_again(0, hide, monkeypatch)
    assert tried == [None] and not_tried == [None]  # (SMALL = 0: declined for its size)
    assert listed == tensors and [v[:3] for v in listed] == [("C1", 3, 0)], listed
    assert cause in listed[0][3]


def _drive(size: int, steps: list, monkeypatch, history: History | None = None) -> list:
    """Draft calls read by a bare :class:`History` (``history``, or a new one) from ``steps``
    ``(ids, mask, positions, T, content hashes after the call)``, as ``watch`` reads them (read,
    C1, remember): per call, its violations ``(row, actual, detail)`` and its chain hashes."""
    monkeypatch.setattr(small_module, "SMALL", size)
    history, out = History() if history is None else history, []
    for ids, mask, positions, t, hashes in steps:
        ids = torch.tensor(ids, dtype=torch.long).view(len(mask), -1)
        call = ForwardCall("draft", ids, torch.tensor(mask), torch.tensor(positions).view(ids.shape), t)
        chains = history.read(call, torch.tensor(hashes))
        out.append(([(v.row, v.actual, v.detail) for v in one_chain(chains)], chains.node.tolist()))
        history.remember(chains)
    return out


PREFILL = ([[10, 11, 12, 13]], [[1, 1, 1, 1]], [[0, 1, 2, 3]], 0, [[101, 102, 103, 104]])


def test_a_slot_attended_again_is_read_from_the_label_table(monkeypatch):
    """A call that masks slot 3 (its label is then not read) and a later call over the same cache
    that attends it again with an input computed without it: that input's prefix is wrong, and
    C1 says so (the slot's label is looked up when it is attended again, not read as unwritten,
    which would leave token 13 out of every later prefix), with the list paths on and off."""
    steps = [PREFILL,
             ([[30]], [[1, 1, 1]], [[2]], 2, [[101, 102, 302]]),  # a crop to 2, another token at 2
             ([[40]], [[1, 1, 1, 0, 1]], [[4]], 4, [[101, 102, 103, 104, 401]]),  # the 4 slots back, 13 masked
             ([[50]], [[1] * 6], [[5]], 5, [[101, 102, 103, 104, 401, 501]])]  # 13 attended again before 40
    for size in (small_module.SMALL, 0):
        found = _drive(size, steps, monkeypatch)
        assert [v[:2] for v in found[3][0]] == [(0, "another prefix")], found[3][0]


def test_edge_calls_read_alike_as_lists_and_as_tensors(monkeypatch):
    """A changed mask with no inputs, float position ids, and a run where a later call attends
    again a slot an earlier one masked, then leaves holes in one row only: the same violations
    and chain hashes at every call with the list paths on and off."""
    runs = [[PREFILL, ([[]], [[1, 1, 0, 0]], [[]], 4, [[101, 102, 103, 104]])],
            [PREFILL, ([[20]], [[1] * 5], [[4.0]], 4, [[101, 102, 103, 104, 201]])],
            [([[10, 11, 12, 13], [20, 21, 22, 23]], [[1] * 4] * 2, [[0, 1, 2, 3]] * 2, 0,
              [[101, 102, 103, 104], [201, 202, 203, 204]]),
             ([[30], [31]], [[1] * 3] * 2, [[2], [2]], 2, [[101, 102, 302], [201, 202, 312]]),
             ([[40], [41]], [[1, 1, 1, 0, 1]] * 2, [[3], [3]], 4,
              [[101, 102, 103, 104, 401], [201, 202, 203, 204, 411]]),
             ([[50, 51, 52], [55, 56, 57]], [[1, 1, 1, 1, 0, 1, 1, 1]] * 2, [[4, 5, 6]] * 2, 5,
              [[101, 102, 103, 104, 401, 501, 511, 521], [201, 202, 203, 204, 411, 551, 561, 571]]),
             ([[53], [58]], [[1, 1, 1, 1, 0, 1, 0, 0, 1], [1, 1, 1, 1, 0, 1, 1, 1, 1]], [[5], [7]], 8,
              [[101, 102, 103, 104, 401, 501, 511, 521, 531], [201, 202, 203, 204, 411, 551, 561, 571, 581]])]]
    for steps in runs:
        assert _drive(small_module.SMALL, steps, monkeypatch) == _drive(0, steps, monkeypatch)


def test_a_call_after_labels_re_read_from_the_table_is_read_alike(monkeypatch):
    """Content written twice with different tokens or positions is ambiguous in the label table.
    A call over a rebuilt cache (two slots swapped) reads the previous call's labels for them,
    at the wrong positions, and re-reads them from the table (``_confirm``: ambiguous, cleared),
    while its chain was built from the carried tokens (20 where the table's first writer has
    10); a later call over the same cache whose mask changed after those slots reads them as
    the tensor path does (the list path declines, ``Chains.confirmed``), not from the carried
    chain: the same violations and chain hashes at every call with the list paths on and off."""
    steps = [([[10, 11]], [[1, 1]], [[0, 1]], 0, [[101, 102]]),
             ([[20, 11]], [[1, 1]], [[7, 8]], 0, [[101, 102]]),  # the same content, another token and positions
             ([[12]], [[1, 1, 1]], [[2]], 2, [[102, 101, 301]]),  # swapped: carried labels at 8, 7, re-read
             ([[13]], [[1, 1, 0, 1]], [[2]], 3, [[102, 101, 301, 401]])]  # slot 2 masked: the mask changed
    returned, read = [], small_module.few_changed
    monkeypatch.setattr(history_module, "few_changed",
                        lambda *a: returned.append((a[3].confirmed, read(*a))) or returned[-1][1])
    assert _drive(small_module.SMALL, steps, monkeypatch) == _drive(0, steps, monkeypatch)
    assert returned == [(True, None), (True, None)]  # tried after the re-read, as lists and by size


def test_a_token_hidden_in_merged_content_after_a_long_run(monkeypatch):
    """Row 0 is fed 77 at position 4, the target's choice there, as content row 1 writes too
    (the same token at the same position after another prefix: the label table merges it,
    BLIND); then 40 calls feed row 0 masked pads while row 1 goes on; then row 0 masks 77's
    slot and goes on with 78 at position 4. C1 flags that call with the hidden committed
    token, with the list paths on and off: the detour check reads the writer's own label of
    the masked slot, carried through the 40 calls (a long run's labels are built, not read
    from the table, which merged it)."""
    held = [[101, 102, 103, 104], [201, 202, 203, 204]]
    steps = [([[10, 11, 12, 13], [20, 21, 22, 23]], [[1] * 4] * 2, [[0, 1, 2, 3]] * 2, 0, [r[:] for r in held])]

    def step(ids, mask, positions, new):
        t = len(held[0])
        for row, h in zip(held, new):
            row.append(h)
        steps.append((ids, mask, positions, t, [r[:] for r in held]))

    step([[77], [77]], [[1] * 5] * 2, [[4], [4]], [9999, 9999])
    for i in range(40):  # row 0: a masked pad a call; row 1: a token at the next position
        step([[0], [30 + i]], [[1] * 5 + [0] * (i + 1), [1] * (6 + i)], [[0], [5 + i]], [100000 + i, 200000 + i])
    step([[78], [99]], [[1, 1, 1, 1, 0] + [0] * 40 + [1], [1] * 46], [[4], [45]], [777, 888])
    for size in (small_module.SMALL, 0):
        history = History()
        run = _drive(size, steps[:-1], monkeypatch, history)
        history.chosen.setdefault(run[0][1][0][3], {})[77] = 2  # the target chose 77 after row 0's prompt
        last = _drive(size, steps[-1:], monkeypatch, history)[0][0]
        assert history.labels.lookup(torch.tensor([9999]))[0, 3] == BLIND  # the table merged 77's content
        assert [found for found, _ in run] == [[]] * 42
        assert [row for row, *_ in last] == [0] and "the mask hides a committed token" in last[0][2], last


def _carried_labels(size: int, depth: int, n: int, monkeypatch) -> tuple:
    """The labels of every slot after each model's last call of a correct ``repad`` run of
    ``n`` tokens (every round realigns both caches), read with calls of few inputs read as
    lists when ``size`` allows, the chain of lazy contexts cut every ``depth`` calls; and
    the kinds of context the draft's last call reads through."""
    monkeypatch.setattr(small_module, "SMALL", size)
    monkeypatch.setattr(chains_module, "DEPTH", depth)
    target, draft = pair()
    with watch(target=target, draft=draft) as w:
        out = decoders.decode(target, draft, WITH_PAD_ID, K, n, "repad")
        w.outputs(WITH_PAD_ID, out, max_new_tokens=n)
    assert w.violations == []
    kinds = lazy_sources(w.history.carried["draft"])  # (before the labels are read: reading them builds them)
    return {m: c.labels().tolist() for m, c in w.history.carried.items()}, kinds


def test_lazy_contexts_read_the_labels_they_stand_for(monkeypatch):
    """After a realignment the labels carried by rank are not built until something reads
    them: the calls read as lists after it read their context from the call before
    (``Extended``), and every ``DEPTH`` calls that chain is cut, the context then read from
    the call's own chain (``Own``). Read at the end of a long run, every label is what the
    uncut chain gives and what the tensor path builds at once."""
    depth = chains_module.DEPTH
    cut, kinds = _carried_labels(small_module.SMALL, depth, 3 * depth, monkeypatch)
    uncut, deep = _carried_labels(small_module.SMALL, 10**9, 3 * depth, monkeypatch)
    built, none = _carried_labels(0, depth, 3 * depth, monkeypatch)
    assert {"Extended", "Moved"} <= set(kinds) and kinds[-1] == "Own" and len(kinds) < depth
    assert len(deep) > depth and "Own" not in deep and "Extended" not in none
    assert cut == uncut == built


def test_a_token_hidden_in_merged_content_after_a_cut(monkeypatch):
    """As above, after a realignment: row 0 is fed 77 at position 4, the target's choice there,
    as content row 1 writes too (the label table merges it, BLIND); both caches are rebuilt with
    a pad slot in front; 40 one-token calls follow, read as lists, their contexts lazy and cut;
    then row 0 masks 77's slot (and what followed it) and goes on with 78 at position 4. C1
    flags that call with the hidden committed token: the context read after the cut gives the
    slot its writer's own label, not the table's merged one."""
    held = [[101, 102, 103, 104], [201, 202, 203, 204]]
    steps = [([[10, 11, 12, 13], [20, 21, 22, 23]], [[1] * 4] * 2, [[0, 1, 2, 3]] * 2, 0, [r[:] for r in held])]

    def step(ids, mask, positions, t, new):
        for row, h in zip(held, new):
            row.append(h)
        steps.append((ids, mask, positions, t, [r[:] for r in held]))

    step([[77], [77]], [[1] * 5] * 2, [[4], [4]], 4, [9999, 9999])
    for row, pad in zip(held, (5, 6)):  # rebuilt: one pad slot in front of each row
        row.insert(0, pad)
    step([[30], [40]], [[0] + [1] * 6] * 2, [[5], [5]], 6, [301, 401])
    for i in range(40):
        t = len(held[0])
        step([[31 + i], [41 + i]], [[0] + [1] * t] * 2, [[t - 1], [t - 1]], t, [3000 + i, 4000 + i])
    t = len(held[0])
    final = ([[78], [99]], [[0, 1, 1, 1, 1] + [0] * (t - 5) + [1], [0] + [1] * t], [[4], [t - 1]], t,
             [r + [h] for r, h in zip(held, (777, 888))])
    read_as_lists = _counted(monkeypatch)
    for size in (small_module.SMALL, 0):
        history = History()
        run = _drive(size, steps, monkeypatch, history)
        history.chosen.setdefault(run[0][1][0][3], {})[77] = 2  # the target chose 77 after row 0's prompt
        kinds = lazy_sources(history.carried["draft"])
        last = _drive(size, [final], monkeypatch, history)[0][0]
        assert history.labels.lookup(torch.tensor([9999]))[0, 3] == BLIND  # the table merged 77's content
        assert [found for found, _ in run] == [[]] * len(steps)
        assert kinds[-1:] == (["Own"] if size else [])
        assert [row for row, *_ in last] == [0] and "the mask hides a committed token" in last[0][2], last
    assert "few" in read_as_lists
