"""EXSPEC batch selection (Spec §8.2): literal tables, then properties against brute force."""

from __future__ import annotations

import pytest
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from batchspec.reference.exspec_policy import (MAX_IDLE, Candidate, full_group_only, laggards_first,
                                               nearest_lengths, padding)


def window(*lengths, idle=None):
    idle = idle or [0] * len(lengths)
    return [Candidate(c, w) for c, w in zip(lengths, idle)]


def test_padding_is_sum_of_shifts():
    assert padding(window(5, 5, 5), [0, 1, 2]) == 0
    assert padding(window(3, 7, 5), [0, 1, 2]) == (7 - 3) + 0 + (7 - 5)


# window lengths, B, choice of: the authors' rule, nearest_lengths, laggards_first
TABLE = [
    # a full group exists: all take one; the authors the first to fill up in window order,
    # laggards the shortest
    ((9, 4, 9, 4, 9), 2, [0, 2], [0, 2], [1, 3]),
    ((4, 9, 4, 9, 4), 3, [0, 2, 4], [0, 2, 4], [0, 2, 4]),
    # no full group: the authors take the first B (padding 2 + 6 = 8); nearest fills the pair of
    # 9s with the 8 (padding 1); laggards take the three shortest (padding 4 + 1 = 5)
    ((7, 3, 9, 8, 9), 3, [0, 1, 2], [2, 3, 4], [0, 1, 3]),
    # all distinct: nearest picks the tightest pair, laggards the two shortest
    ((10, 2, 6, 5, 20), 2, [0, 1], [2, 3], [1, 3]),
    # window smaller than the batch: everyone
    ((3, 8), 4, [0, 1], [0, 1], [0, 1]),
]


def test_selection_table():
    for lengths, b, authors, nearest, laggards in TABLE:
        w = window(*lengths)
        assert full_group_only(w, b) == authors, lengths
        assert nearest_lengths(w, b) == nearest, lengths
        assert laggards_first(w, b) == laggards, lengths


def test_nearest_breaks_ties_by_waiting():
    # two free same-length pairs; the one whose members waited longer wins
    w = window(4, 4, 7, 7, idle=[0, 1, 3, 2])
    assert nearest_lengths(w, 2) == [2, 3]
    w = window(4, 4, 7, 7, idle=[3, 2, 0, 1])
    assert nearest_lengths(w, 2) == [0, 1]


def test_member_idle_too_long_must_be_taken():
    # a free group of two 9s exists (and the 2 is the shortest), but the 12 has waited MAX_IDLE
    # rounds: it goes in, with its cheapest partner (a 9, padding 3)
    w = window(9, 9, 2, 12, idle=[0, 1, 0, MAX_IDLE])
    assert nearest_lengths(w, 2) == [1, 3] and laggards_first(w, 2) == [1, 3]
    assert nearest_lengths(w, 2, max_idle=None) == [0, 1]
    assert laggards_first(w, 2, max_idle=None) == [0, 1]
    w = window(9, 9, 2, 12, idle=[0, 1, 0, MAX_IDLE - 1])
    assert laggards_first(w, 2) == [0, 1] and laggards_first(w, 3) == [0, 1, 2]


windows = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 10)), min_size=1, max_size=8).map(
    lambda rows: [Candidate(c, w) for c, w in rows])


@settings(max_examples=300, deadline=None)
@given(windows, st.integers(1, 5))
def test_nearest_is_optimal_and_never_worse_than_authors(w, b):
    n = min(b, len(w))
    choice = nearest_lengths(w, b, max_idle=None)
    assert len(choice) == n == len(set(choice)) and all(0 <= i < len(w) for i in choice)
    best = min(padding(w, c) for c in itertools.combinations(range(len(w)), n))
    assert padding(w, choice) == best
    assert padding(w, choice) <= padding(w, full_group_only(w, b))
    if any(sum(c.length == x.length for x in w) >= b for c in w):
        assert padding(w, choice) == 0  # a full same-length group is found whenever it exists


@settings(max_examples=300, deadline=None)
@given(windows, st.integers(1, 5))
def test_nearest_with_a_starving_member_is_optimal_among_batches_holding_it(w, b):
    choice = nearest_lengths(w, b, max_idle=3)
    n = min(b, len(w))
    assert len(choice) == n == len(set(choice))
    oldest = max(range(len(w)), key=lambda i: (w[i].idle, -i))
    if w[oldest].idle >= 3:
        assert oldest in choice
        options = [c for c in itertools.combinations(range(len(w)), n) if oldest in c]
    else:
        options = list(itertools.combinations(range(len(w)), n))
    assert padding(w, choice) == min(padding(w, c) for c in options)


@settings(max_examples=200, deadline=None)
@given(windows, st.integers(1, 5))
def test_authors_rule_takes_a_full_group_or_the_first_members(w, b):
    choice = full_group_only(w, b)
    n = min(b, len(w))
    assert len(choice) == n == len(set(choice))
    if len({w[i].length for i in choice}) > 1 or n < b:
        assert choice == list(range(n))  # the fallback: the first members, in window order


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(windows, st.integers(1, 5))
def test_laggards_take_a_starving_member_else_the_shortest_group_else_the_shortest(w, b):
    n = min(b, len(w))
    choice = laggards_first(w, b, max_idle=5)
    assert len(choice) == n == len(set(choice))
    oldest = max(range(len(w)), key=lambda i: (w[i].idle, -i))
    if w[oldest].idle >= 5:
        assert oldest in choice
        return
    full = [c for c in {x.length for x in w} if sum(x.length == c for x in w) >= n]
    lengths = sorted(w[i].length for i in choice)
    if full:
        assert lengths == [min(full)] * n  # no realignment, the laggard group
    else:
        assert lengths == sorted(x.length for x in w)[:n]  # the n shortest
