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
