"""A call of few inputs read as lists (``invariants/small.py``) reads exactly as the tensor path (Spec §3.12.1, §3.12.2)."""

import pytest
import torch
from transformers import DynamicCache

import _bug_decoders as decoders
from _broken_helpers import K, N, WITH_PAD_ID, pair
from _catch import check_catch

from batchspec.invariants import history as history_module
from batchspec.invariants import watch
from batchspec.invariants.small import extend, fill, wrap


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
    """A list that grows by one at each call read as lists."""
    read_as_lists, few = [], history_module.few
    monkeypatch.setattr(history_module, "few", lambda *a: read_as_lists.append(1) or few(*a))
    return read_as_lists


def _state(layout: str, small: int, monkeypatch) -> tuple:
    """What ``watch`` remembers of one correct run of the bug decoders' ``layout``, and how many
    calls it read as lists."""
    monkeypatch.setattr(history_module, "SMALL", small)
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
            stream.proposed), len(read_as_lists)


@pytest.mark.parametrize("layout", ["repad", "right_holes", "static"])
def test_a_run_is_read_alike_as_lists_and_as_tensors(layout, monkeypatch):
    """Every label, choice, logged chain and stream mark of a whole run is the same with calls
    of few inputs read as lists and with every call read as tensors (``SMALL = 0``)."""
    as_lists, listed = _state(layout, history_module.SMALL, monkeypatch)
    as_tensors, none = _state(layout, 0, monkeypatch)
    assert listed > 0 and none == 0
    assert as_lists == as_tensors


@pytest.mark.parametrize("small", [history_module.SMALL, 0])
def test_positions_not_advanced_caught_alike_as_lists_and_as_tensors(small, monkeypatch):
    """C1's position clause read from the lists: positions that lag are caught at the same call
    with the same cause with calls of few inputs read as lists and as tensors."""
    monkeypatch.setattr(history_module, "SMALL", small)
    check_catch("positions", "right_holes")
    check_catch("positions", "static")


@pytest.mark.parametrize("small", [history_module.SMALL, 0])
def test_a_one_token_call_fed_at_a_wrong_position_is_caught(small, monkeypatch):
    """A one-token call that appends to the previous call's chain (read as lists) with one row
    fed one position ahead: C1 flags that row at that call, as the tensor path does."""
    monkeypatch.setattr(history_module, "SMALL", small)
    read_as_lists = _counted(monkeypatch)
    target, draft = pair()
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with watch(target=target, draft=draft, check="record") as w:
        cache = DynamicCache(config=draft.config)
        draft(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache)
        draft(input_ids=torch.tensor([[13], [14]]), attention_mask=torch.ones((2, 5), dtype=torch.long),
              position_ids=torch.tensor([[4], [5]]), cache=cache)
    assert len(read_as_lists) == (small > 0)
    assert [(v.invariant, v.call, v.row) for v in w.violations] == [("C1", 2, 1)], w.report()
    assert "position" in w.violations[0].detail
