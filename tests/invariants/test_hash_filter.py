"""The bit filter that C1's third clause reads many chain hashes through (Spec §3.12.2)."""

import pytest
import torch

from _catch import check_catch

from batchspec.invariants import stream
from batchspec.invariants.stream import FILTER_BITS, HashFilter


def test_members_found_exactly_even_where_low_bits_collide():
    members = {5, -7, 123456789012345}
    found = HashFilter(members)
    twin = 5 + (1 << FILTER_BITS)  # the same low bits as 5: passes the filter, not the look-up
    node = torch.tensor([[5, twin, -7], [1, 123456789012345, 0]])
    assert found.member(node).tolist() == [[True, False, True], [False, True, False]]
    members.add(twin)
    found.add(twin)
    assert found.member(node).tolist() == [[True, True, True], [False, True, False]]


def test_an_empty_set_holds_nothing():
    assert not HashFilter(set()).member(torch.tensor([0, 1, -1])).any()


@pytest.mark.parametrize("few", [stream.FEW, 0])
def test_rejected_slots_found_alike_by_dict_and_by_filter(few, monkeypatch):
    """``Stream.attended`` looks a call's few new columns up in the rejected dict itself, and
    more through the filter: with every look-up sent through the filter (``FEW = 0``), a stale
    rejected draft is caught at the same call with the same cause."""
    monkeypatch.setattr(stream, "FEW", few)
    check_catch("stale", "right_holes")


@pytest.mark.parametrize("searched", [stream.SEARCHED, 0])
def test_rejected_slots_found_alike_by_search_and_by_bisection(searched, monkeypatch):
    """``Stream._among`` searches small chains whole and bisects larger ones: with every
    look-up bisected (``SEARCHED = 0``), stale rejected drafts are caught at the same call
    with the same cause, in a layout that keeps its rows and in one that realigns them."""
    monkeypatch.setattr(stream, "SEARCHED", searched)
    check_catch("stale", "right_holes")
    check_catch("stale", "repad")


def test_rejected_nodes_found_at_their_index_alike_by_bisection_and_by_search(monkeypatch):
    """``Stream._among`` reads each row only at the element of a suspect node's own index
    (a chain hash has one); on chains with left pads, holes and rows that attend
    nothing, it finds exactly the attended slots a search of every slot finds."""
    from types import SimpleNamespace

    from batchspec.invariants.stream import Stream

    monkeypatch.setattr(stream, "SEARCHED", 0)  # the bisection, whatever the size (a window: the search)
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        b, t = 1 + trial % 4, 1 + trial % 23
        att = torch.rand((b, t), generator=g) < 0.7
        att[:, : int(torch.randint(0, t, (1,), generator=g))] = False  # left pads
        rank = att.cumsum(1) - 1
        token = torch.randint(0, 5, (b, t), generator=g)
        weight = torch.randint(1, 2**40, (t,), generator=g) * 2 + 1
        node = ((token + 1) * weight[rank.clamp(min=0)] * att).cumsum(1)  # unattended slots repeat the last node
        chains = SimpleNamespace(node=node, attended=att, rank=rank, window=0)
        memo = Stream()
        elements = [(i, s) for i in range(b) for s in range(t) if att[i, s]]
        picked = [elements[k] for k in torch.randperm(len(elements), generator=g)[:3].tolist()] if elements else []
        suspects = {int(node[i, s]) for i, s in picked} | {12345 + trial}  # and one held nowhere
        memo.rank.update({int(node[i, s]): int(rank[i, s]) for i, s in picked})
        memo.rank[12345 + trial] = trial % 7
        expected = sorted((i, s) for i, s in elements if int(node[i, s]) in suspects)
        assert memo._among(chains, t, suspects) == expected
        chains.window = 4  # a window's chains: searched whole, the same answer
        assert memo._among(chains, t, suspects) == expected
