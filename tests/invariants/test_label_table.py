"""The label table (Spec §3.12.1): a flush of many calls labels content as the calls, in order, would."""

from types import SimpleNamespace

import torch

from batchspec.invariants.hf_cache import ABSENT
from batchspec.invariants.slots import AMBIGUOUS, BLIND, WRITTEN, LabelTable


def _call(hashes: list, t: int, labels: list) -> SimpleNamespace:
    """A call's chains as the table reads them: ``hashes`` ``[B, T + n]``, ``labels`` ``[B, n, 4]``."""
    written = torch.tensor(labels, dtype=torch.int64)
    return SimpleNamespace(hashes=torch.tensor(hashes, dtype=torch.int64), cached=t, written=lambda: written)


def _calls() -> list:
    """Calls over 2, 2, 3 and 2 rows (the cached columns are not read) that write some
    content twice: in an earlier row of the next call with another prefix (BLIND), and in
    a later call with another token (AMBIGUOUS), plus a slot a window evicted in the same
    call (ABSENT)."""
    return [
        _call([[7, 11, 12], [8, 21, 13]], 1, [[[5, 1, 70, WRITTEN], [6, 2, 71, WRITTEN]],
                                             [[5, 1, 80, WRITTEN], [9, 2, 81, WRITTEN]]]),
        _call([[0, 13], [0, 31]], 1, [[[9, 2, 72, WRITTEN]], [[3, 3, 82, WRITTEN]]]),
        _call([[0, 40], [0, 14], [0, ABSENT]], 1, [[[2, 9, 90, WRITTEN]], [[4, 3, 99, WRITTEN]],
                                                   [[1, 1, 1, WRITTEN]]]),
        _call([[0, 31], [0, 12]], 1, [[[7, 3, 82, WRITTEN]], [[6, 2, 55, WRITTEN]]]),
    ]


def _one_call_at_a_time() -> dict:
    table = LabelTable()
    for c in _calls():
        table.write(c)
        table.flush()
    return table.labels


def test_a_flush_of_many_calls_labels_as_one_call_at_a_time_does():
    """Content written twice keeps its first writer's label (flagged): the first
    call's, then within a call the first row's, whatever the batch sizes."""
    table = LabelTable()
    for c in _calls():
        table.write(c)
    table.flush()
    assert table.labels == _one_call_at_a_time()
    assert table.labels[13] == (9, 2, 81, BLIND)  # call 1 row 1 first; call 2 row 0: another prefix
    assert table.labels[31] == (3, 3, 82, AMBIGUOUS)  # call 2 row 1 first; call 4 row 0: another token
    assert table.labels[12] == (6, 2, 71, BLIND)
    assert ABSENT not in table.labels


def test_the_first_writer_decides_the_label_kept():
    """The same two writes in the other order keep the other writer's label: the
    comparison above can tell the orders apart."""
    table = LabelTable()
    for c in reversed(_calls()):
        table.write(c)
    table.flush()
    assert table.labels[31] == (7, 3, 82, AMBIGUOUS)
    assert table.labels != _one_call_at_a_time()


def test_a_pending_call_keeps_only_what_it_wrote():
    """Until the next flush the table keeps each call's written slots, copied out: not the
    call's chains (whose [B, T + n] tensors, a realigned call's among them, would live on
    for up to 64 calls), nor a view that holds its whole hash tensor."""
    import gc
    import weakref

    table = LabelTable()
    call = type("Call", (SimpleNamespace,), {})(**vars(_calls()[0]))  # (a subclass takes weak references)
    gone, hashes = weakref.ref(call), weakref.ref(call.hashes)
    table.write(call)
    del call
    gc.collect()
    assert gone() is None and hashes() is None
    assert table.pending[0][0].tolist() == [11, 12, 21, 13]  # row by row, flat
    table.flush()
    assert table.labels[11] == (5, 1, 70, WRITTEN)


def test_writes_are_packed_not_labelled_until_a_look_up_needs_them():
    """64 calls' writes become one pair of tensors and no table entry; the first
    look-up labels them, as a table filled call by call would."""
    table = LabelTable()
    calls = [_calls()[i % 4] for i in range(64)]
    for c in calls:
        table.write(c)
    assert table.labels == {} and table.pending == []
    assert len(table.packed) == 1 and table.packed[0][1].shape[1] == 4
    assert table.packed[0][0].numel() == sum(c.hashes[:, c.cached:].ne(ABSENT).sum() for c in calls)
    found = table.lookup(torch.tensor([13, 31, 12, 999]))
    eager = LabelTable()
    for c in calls:
        eager.write(c)
        eager.flush()
    assert table.packed == [] and table.labels == eager.labels
    assert found.tolist() == [list(eager.labels[13]), list(eager.labels[31]), list(eager.labels[12]),
                              [-1, -1, -1, 4]]


def test_within_a_call_the_earlier_row_writes_first():
    """Content one call writes twice, late in row 0 and early in row 1, keeps row 0's label:
    a call's writes are read row by row (as it wrote them), not column by column."""
    twice = _call([[0, 1, 50], [0, 50, 2]], 1, [[[3, 1, 60, WRITTEN], [4, 2, 61, WRITTEN]],
                                              [[4, 1, 70, WRITTEN], [5, 2, 71, WRITTEN]]])
    table = LabelTable()
    table.write(twice)
    table.flush()
    assert table.labels[50] == (4, 2, 61, AMBIGUOUS)  # row 0's label, flagged: row 1 wrote it at position 1
