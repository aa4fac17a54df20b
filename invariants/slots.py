"""What a cache slot holds, by content: exact hashes and the label table (Spec §3.12.1).

A correct decoder may pad, shift, crop, re-stack or re-run its caches any way
it likes; what it may not do is attend a slot that holds anything but the
key/value of the right token, at the right position, after the right prefix.
So the correctness checker labels slots by *content*, not by where they sit:

* :meth:`Hasher.slot_hashes` reads a slot's key at the first layer and its
  value at the last layer bit for bit and folds them into one 64-bit integer with
  wrapping integer arithmetic. Integer addition is associative, so the hash
  of a slot is the same whatever the batch shape, the row or the slot index
  it is read at, and a copied slot hashes exactly as the original; a
  different token, position or (at the last layer) prefix changes the bits.
* :class:`LabelTable` maps each hash to the label its writer gave it: the
  token fed, the position fed, and the hash of the chain before it
  (:func:`chain_weights`), the content address of the prefix it attended.

Both are memo objects the checker owns (one per ``watch``), never module state.
"""

from __future__ import annotations

from collections import Counter

import torch

from .hf_cache import ABSENT
from .observation import CacheView

#: Label flags. ``WRITTEN``: a call fed this token here and attended the chain
#: before it. ``BLIND``: several writers of this very content had other prefixes
#: but the same token and position (a model whose last layer does not see the
#: prefix, such as a one-layer draft), so the prefix cannot be read back.
#: ``PADDING``: written by a masked input (never part of a chain).
#: ``AMBIGUOUS``: writers of this content disagree on token or position.
WRITTEN, BLIND, PADDING, AMBIGUOUS = 0, 1, 2, 3
#: Not in the table: no forward call wrote this content.
UNWRITTEN = 4

#: Dimensions of each vector hashed: a slot computed from another token, position or
#: prefix differs in every dimension, so a few suffice; a copy matches in all.
DIMS = 8
_BITS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
_CHUNK = 4096


def _random(seed: int, n: int, device) -> torch.Tensor:
    """``n`` fixed random odd int64 values (seeded; the same on every device)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-2**62, 2**62, (n,), generator=g, dtype=torch.int64) * 2 + 1).to(device)


def _words(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``[B, S, d]``'s bits as int64 words ``[B, S, w]``, exactly: its memory read as
    int64 where its rows are whole words (no copy), else each element widened."""
    if (x.shape[-1] * x.dtype.itemsize) % 8 == 0:
        try:
            return x.view(torch.int64)
        except RuntimeError:  # strides or offset not on word boundaries
            pass
    return x.view(_BITS[x.dtype.itemsize]).to(torch.int64)


class Hasher:
    """Exact content hashes of cache slots (Spec §3.12.1); owns its random weights."""

    def __init__(self):
        self._weights: dict = {}
        self._chain = torch.zeros(0, dtype=torch.int64)
        self._chain_list: list = []

    def weights(self, dim: int, device) -> torch.Tensor:
        """Fixed random odd int64 weights ``[dim]``."""
        key = (dim, device)
        if key not in self._weights:
            self._weights[key] = _random(1000, dim, device)
        return self._weights[key]

    def slot_hashes(self, view: CacheView, stop: int) -> torch.Tensor:
        """``[B, stop]`` int64: :meth:`pair_hashes` of slots ``0 .. stop-1`` of every row,
        the keys of the first layer and the values of the last layer."""
        return self.pair_hashes(view.layers[0][0][:, :, :stop], view.layers[-1][1][:, :, :stop])

    def pair_hashes(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``[B, S]`` int64 from ``keys`` and ``values`` ``[B, H, S, D]``: per slot, the
        keys (token and position) and the values (everything attended), kv-head 0,
        their first :data:`DIMS` dimensions, bit for bit, read as int64 words
        (:func:`_words`), times fixed random odd int64 weights, summed with wrap-around
        (a word that differs changes the sum: an odd weight is invertible modulo 2**64)."""
        return self.word_hashes(torch.cat([self.words(keys), self.words(values)], -1))

    def word_hashes(self, bits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, S]`` int64 from ``bits`` ``[B, S, 2w]``, a slot's key words then its value
        words (:meth:`words`): each word times its fixed random odd weight, summed with
        wrap-around (:meth:`pair_hashes`); written into ``out`` when given."""
        return torch.sum(bits * self.weights(bits.shape[-1], bits.device), -1, out=out)  # [B, S], wraps

    @staticmethod
    def words(x: torch.Tensor, stop: int | None = None) -> torch.Tensor:
        """``[B, S, w]`` int64: the bits :meth:`pair_hashes` reads of ``x`` ``[B, H, S, D]``
        (kv-head 0, the first :data:`DIMS` dimensions; slots up to ``stop``), exactly."""
        return _words(x[:, 0, :stop, :DIMS])

    def chain_weights(self, n: int, device) -> torch.Tensor:
        """``R[0 .. n-1]``: a chain ``x_0 .. x_{j-1}`` has hash ``Σ (x_l + 1) R[l]``
        (wrapping int64), so the hash of every prefix is one cumulative sum."""
        return self.weight_table(n, device)[:n]

    def weight_list(self, n: int) -> list:
        """:meth:`chain_weights` as Python ints, at least ``n`` of them (:mod:`.small`)."""
        if len(self._chain_list) < n:
            self._chain_list = self.weight_table(n, self._chain.device).tolist()
        return self._chain_list

    def weight_table(self, n: int, device) -> torch.Tensor:
        """:meth:`chain_weights`, at least ``n`` of them: for ``torch.take``, which reads
        only the ranks it is given (no slice made)."""
        table = self._chain
        if table.numel() < n:
            chunks = -(-n // _CHUNK)
            table = self._chain = torch.cat([_random(c, _CHUNK, "cpu") for c in range(chunks)]).to(table.device)
        if table.device != device and table.device != torch.device(device):
            table = self._chain = table.to(device)
        return table


class LabelTable:
    """Every slot content any watched call wrote, by hash, with its label
    ``(token, position, prefix hash, flag)`` (Spec §3.12.1).

    Only a look-up reads the table, and a correct decoder's calls most often
    need none (their labels are carried from call to call), so what the calls
    wrote is kept as tensors, flat in the order each call wrote it (row by
    row), packed every 64 calls by one concatenation, and enters ``labels`` at
    the next look-up (:meth:`flush`), in the order the calls wrote it."""

    def __init__(self):
        self.labels: dict = {}  # content hash -> (token, position, prefix hash, flag)
        #: per call whose writes are not packed yet: ``(hashes [B * n], labels [B * n, 4])`` of
        #: the slots it wrote, row by row, copied out of its chains (which need not outlive the call)
        self.pending: list = []
        #: ``(hashes [M], labels [M, 4])`` per 64 calls packed, in call order, not in ``labels`` yet
        self.packed: list = []

    def write(self, chains) -> None:
        """Note the slots a call wrote (``chains``: its ``Chains``, with ``hashes``);
        they enter the table at the next look-up, packed every 64 calls."""
        # contiguous, so that each reads flat row by row without another copy: a copy of what is not (the
        # rows of a batch, in columns the checker keeps); what is (labels built for this call alone, one
        # row's columns) is kept as it is: nothing writes into either once a call's check has read it
        self.pending.append((chains.hashes[:, chains.cached:].contiguous().view(-1),
                             chains.written().contiguous().view(-1, 4)))
        if len(self.pending) >= 64:
            self.pack()

    def pack(self) -> None:
        """The pending calls' writes as one pair of tensors, in the order they were written:
        call by call, each call row by row (content written twice is merged first writer first)."""
        if self.pending:
            hashes, labels = torch.cat([h for h, _ in self.pending]), torch.cat([label for _, label in self.pending])
            kept = hashes != ABSENT  # written, then evicted by a window in the same call: never read back
            self.packed.append((hashes[kept], labels[kept]))
        self.pending.clear()

    def flush(self) -> None:
        """Every write noted so far into ``labels``, in call order."""
        self.pack()
        for hashes, labels in self.packed:
            self.add(hashes, labels)
        self.packed.clear()

    def add(self, hashes: torch.Tensor, labels: torch.Tensor) -> None:
        """Remember ``hashes`` ``[M]`` with ``labels`` ``[M, 4]``; content written
        twice with different labels is flagged :data:`BLIND` (only the prefix
        differs) or :data:`AMBIGUOUS` (the token or position differs too)."""
        table, keys, values = self.labels, hashes.tolist(), list(zip(*labels.T.tolist()))  # (tuples: one list a field)
        new = dict(zip(keys, values))
        if len(new) < len(keys):  # the same content twice in these calls: those compared in order
            twice = {h for h, k in Counter(keys).items() if k > 1}
            for h in twice:
                del new[h]
            for h, label in zip(keys, values):
                if h in twice:
                    self._merge(new, h, label)
        for h in table.keys() & new.keys():  # content written before: the same label, or a conflict
            self._merge(table, h, new.pop(h))
        table.update(new)

    @staticmethod
    def _merge(table: dict, h: int, label: tuple) -> None:
        held = table.get(h)
        if held is None:
            table[h] = label
        elif held != label and held[3] < AMBIGUOUS:
            table[h] = held[:3] + (max(held[3], BLIND if held[:2] == label[:2] else AMBIGUOUS),)

    def lookup(self, hashes: torch.Tensor) -> torch.Tensor:
        """``[M, 4]`` labels of ``hashes`` ``[M]`` (flag :data:`UNWRITTEN` where unknown)."""
        self.flush()
        missing = (-1, -1, -1, UNWRITTEN)
        found = [self.labels.get(h, missing) for h in hashes.tolist()]
        return torch.tensor(found, dtype=torch.int64, device=hashes.device).view(-1, 4)

