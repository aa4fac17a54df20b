"""The bit filter that C1's third clause and its detour check read chain hashes through (Spec §3.12.2)."""

import torch

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
