"""Every checked call's chains, kept for tracing a wrong output to its first wrong call (Spec §3.12.3).

A call is kept from the first column where it differs from its model's
previous call (the same cached slots, attended the same way, so the same
chain hashes there, are not kept twice): the log grows with what the calls
feed and change, not with what they attend. Reading it
back (only when ``w.outputs`` traces a wrong token) rebuilds each call's
tensors in call order.

What is kept of a call is kept as Python lists, not as small tensors: a
tensor, even a small one, is an allocation of the C heap that lives as long
as the run, and thousands of them, interleaved with the decoder's own large
transient tensors, keep the heap from shrinking after those are freed (on
the outside decoder at 1024 tokens, a hundred MiB or more of peak resident
memory). Lists live in the interpreter's own arenas.
"""

from __future__ import annotations

import torch

from .columns import same_view


class CallLog:
    """Per call ``(number, model, node [B, T + n], attended [B, T + n], n)``, stored by difference
    (a realigned call: by each row's length, :func:`_carried`)."""

    def __init__(self):
        self._entries: list = []  # (number, model, kept, node[:, kept:], attended[:, kept:], n), as lists
        # after a model's first call; a realigned call: kept = (rows, counts, T), and its columns from T on;
        # a call whose new columns are its inputs, every one attended: their nodes flat, row-major, attended None
        self._last: dict = {}  # model -> (node, attended) of its last logged call

    def append(self, number: int, model: str, node: torch.Tensor, attended: torch.Tensor, n: int,
               extends: torch.Tensor | None = None, moved: tuple | None = None, fed: tuple | None = None,
               repeats: int | None = None) -> None:
        """``extends``: the node of the call this one's first ``T`` columns are known to
        repeat, attended alike (none to compare when it is this model's last logged call).
        ``moved``: ``(node, rows)`` of the call whose chains this one's rows continue by
        rank, each attending a run of its cached slots that ends at slot ``T - 1``
        (History._moved): kept as each row's length, not as its columns. ``fed``: ``(nodes,
        ranks)`` of the inputs, row-major, when every one is attended
        (:func:`~batchspec.invariants.stream.fed_inputs`): with ``extends`` or ``moved``, the
        inputs are kept as that list (made a tensor only when the log is read).
        ``repeats``: how many first columns are known to be ``extends``', attended alike
        (a mask that changed from there on, read as lists and checked: ``.small.few_changed``)."""
        last, kept = self._last.get(model), 0
        t = node.shape[1] - n
        if last is not None and t and moved is not None and last[0] is moved[0]:
            # each row's length: the rank of its first input, or its attended cached slots counted
            counts = fed[1][::n] if fed is not None else attended[:, :t].sum(1).tolist()
            kept = (None if moved[1] is None else moved[1].tolist(), counts, t)
        elif last is not None and repeats is not None and last[0] is extends:
            kept = repeats
        elif last is not None and t and last[0] is extends and extends.shape[1] == t:
            kept = t
        elif last is not None and t and last[0].shape[0] == node.shape[0]:
            w = min(t, last[0].shape[1])
            if (same_view(node[:, :w], last[0][:, :w]) or torch.equal(node[:, :w], last[0][:, :w])) \
                    and torch.equal(attended[:, :w], last[1][:, :w]):
                kept = w
            else:  # kept up to the first column that differs (a mask that changed after a round: holes)
                differs = ((node[:, :w] != last[0][:, :w]) | (attended[:, :w] != last[1][:, :w])).any(0)
                kept = int(differs.long().argmax())
        start = t if isinstance(kept, tuple) else kept
        if fed is not None and start == t > 0:  # only the inputs are new, every one attended: their list
            self._entries.append((number, model, kept, fed[0], None, n))
        else:
            self._entries.append((number, model, kept, node[:, start:].tolist() if start else node,
                                  attended[:, start:].tolist() if start else attended, n))
        self._last[model] = (node, attended)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        built: dict = {}  # model -> (node, attended) of its last call, rebuilt
        for number, model, kept, node, attended, n in self._entries:
            if attended is None:  # inputs kept as a list, every one attended
                node = torch.tensor(node, dtype=torch.int64, device=built[model][0].device).view(-1, n)
                attended = torch.ones(node.shape, dtype=torch.bool, device=node.device)
            elif isinstance(node, list):  # columns kept as lists [B][w] (an entry after the model's first)
                device = built[model][0].device
                node = torch.tensor(node, dtype=torch.int64, device=device)
                attended = torch.tensor(attended, dtype=torch.bool, device=device)
            if isinstance(kept, tuple):
                rows, counts, t = kept
                rows = None if rows is None else torch.tensor(rows, dtype=torch.int64, device=node.device)
                counts = torch.tensor(counts, dtype=torch.int64, device=node.device)
                node, attended = _carried(*built[model], rows, counts, t, node, attended)
            elif kept:
                node_before, attended_before = built[model]
                node = torch.cat([node_before[:, :kept], node], 1)
                attended = torch.cat([attended_before[:, :kept], attended], 1)
            built[model] = (node, attended)
            yield number, model, node, attended, n


def _carried(node_before: torch.Tensor, attended_before: torch.Tensor, rows, counts: torch.Tensor, t: int,
             node: torch.Tensor, attended: torch.Tensor) -> tuple:
    """A realigned call's ``(node, attended)`` ``[B, T + n]``: row ``i`` attends the first
    ``counts[i]`` elements of the previous call's row ``rows[i]`` (its own when None),
    in slots ``T - counts[i] .. T - 1``, then its inputs (``node``, ``attended``)."""
    b, width = node_before.shape
    slot = torch.where(attended_before, attended_before.cumsum(1) - 1, width)  # each element's rank; the rest spare
    by_rank = node_before.new_zeros((b, width + 1)).scatter(1, slot, node_before)
    if rows is not None:
        by_rank = by_rank[rows]
    rank = torch.arange(t, device=node.device) - (t - counts[:, None])  # [B, T]: each slot's element
    held = rank >= 0
    cached = torch.where(held, by_rank.gather(1, rank.clamp(0, width)), 0)
    return torch.cat([cached, node], 1), torch.cat([held, attended], 1)
