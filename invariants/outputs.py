"""C2 and C3: the correctness invariants on what a decoder returned (Spec §3.12.3, §3.12.4).

Read by ``w.outputs`` against the :class:`~batchspec.invariants.history.History`
of the calls ``watch`` saw: every returned token must be the target's choice
on exactly its prefix, and every output must stop where batch-1 decoding stops.
"""

from __future__ import annotations

import torch

from .history import History
from .violation import Violation


def target_choices(history: History, prompts, outputs, eos_token_id=None) -> list[Violation]:
    """C2 (Spec §3.12.3): every token a request returned after its prompt (up to
    its first EOS) is the target's greedy choice on exactly the prefix before
    it, as a watched target call computed it. Per request, the first token that
    is not, traced to the decoder's first wrong call (:func:`_first_wrong_call`)."""
    out = []
    for r, (prompt, seq) in enumerate(zip(prompts, outputs)):
        prompt, seq = _ids(prompt), _ids(seq)
        seq = seq[: _stop(seq, _eos(eos_token_id))]
        nodes = _nodes(history, prompt + seq)
        p = len(prompt)
        for j, token in enumerate(seq):
            chose = history.chosen.get(nodes[p + j - 1] if p + j else 0, {})
            if token in chose:
                continue
            first = _first_wrong_call(history, nodes, prompt + seq, p, j, chose)
            at = f"; call #{first[0]} ({first[1]}) was the first to build on the wrong stream" if first else ""
            if not chose:
                detail = (f"request {r}'s output token {j} ({token}) was never checked: no watched target call "
                          f"computed a choice after the prefix before it (a committed token was dropped from "
                          f"the stream the calls saw, or never verified){at}")
                expected = "a token the target chose"
            else:
                expected = min(chose, key=chose.get)
                detail = (f"request {r}'s output token {j} is {token}, but the target (call #{chose[expected]}) "
                          f"chose {expected} after that prefix (a rejected draft or a wrong bonus token was "
                          f"committed){at}")
            out.append(_output("C2", "target_choices", r, expected, token, detail, first[0] if first else None))
            break
    return out


def _first_wrong_call(history: History, nodes: list[int], stream: list[int], p: int, j: int, chose: dict):
    """The first call, after the target's last choice the output agrees with, that
    builds on the returned stream's wrong part: one that built on a token the
    target had rejected there (:class:`~batchspec.invariants.stream.Stream`), else
    one whose chain holds the unverified token ``j`` after the call that chose
    otherwise (when one did), or a target call that holds the prompt but not
    the verified prefix (a dropped token, or a prefix the target never saw
    whole). A token no call chose is not itself wrong: a draft call that fed it
    speculated as any draft may."""
    verified = nodes[p + j - 1] if p + j else 0
    memo = history.stream
    built = memo.first_wrong(nodes[p + j]) if nodes[p + j] in memo.rejected else None
    built = [built] if built is not None else memo.branches(set(nodes[: p + j]))
    if built:  # a token the target rejected, built on (C1's third clause): the call that first did
        number = min(built)
        return number, next(model for n, model, *_ in history.log if n == number)
    since = history.chosen.get(nodes[p + j - 2] if p + j > 1 else 0, {}).get(stream[p + j - 1], 0) if j else 0
    wrong = history.first_built_on(nodes[p + j], min(chose.values())) if chose else None
    dropped = history.first_off_stream(nodes[p - 1] if p else 0, verified, since) if j else None
    found = [c for c in (wrong, dropped) if c is not None]
    return min(found) if found else None


def stops_where_it_should(history: History, prompts, outputs, max_new_tokens=None, eos_token_id=None,
                          pad_token_id=None) -> list[Violation]:
    """C3 (Spec §3.12.4): a request's output ends at the first EOS it generated
    (after which only ``pad_token_id`` may follow) or at its budget, never
    before and never after; an EOS inside the prompt stops nothing."""
    eos, out = _eos(eos_token_id), []
    for r, (prompt, seq) in enumerate(zip(prompts, outputs)):
        prompt, seq = _ids(prompt), _ids(seq)
        cut = _stop(seq, eos)
        tail = seq[cut:]
        if tail and not (pad_token_id is not None and all(x == pad_token_id for x in tail)):
            out.append(_output("C3", "stops_where_it_should", r, "nothing after the EOS", tail[:4],
                               f"request {r} goes on for {len(tail)} tokens after the EOS it generated "
                               f"at index {cut - 1}"))
        seq = seq[:cut]
        if max_new_tokens is not None and len(seq) > max_new_tokens:
            out.append(_output("C3", "stops_where_it_should", r, f"at most {max_new_tokens} tokens", len(seq),
                               f"request {r} returned more tokens than its budget"))
        elif max_new_tokens is not None and len(seq) < max_new_tokens and not (seq and seq[-1] in eos):
            why = " (its prompt holds an EOS: a decoder that looks for EOS in the whole row stops there)" \
                if eos & set(prompt) else ""
            out.append(_output("C3", "stops_where_it_should", r, f"{max_new_tokens} tokens or an EOS it generated",
                               len(seq), f"request {r} stopped after {len(seq)} tokens without generating an "
                                         f"EOS{why}"))
    return out


def _eos(eos_token_id) -> set:
    if eos_token_id is None:
        return set()
    return set(eos_token_id) if isinstance(eos_token_id, (list, tuple, set)) else {int(eos_token_id)}


def _stop(seq: list[int], eos: set) -> int:
    """Length of ``seq`` up to and including its first EOS."""
    return next((j + 1 for j, x in enumerate(seq) if x in eos), len(seq))


def _ids(x) -> list[int]:
    return x.tolist() if isinstance(x, torch.Tensor) else [int(v) for v in x]


def _nodes(history: History, stream: list[int]) -> list[int]:
    """Chain hashes of every prefix of ``stream`` (the one ending at each token)."""
    if not stream:
        return []
    weights = history.hasher.chain_weights(len(stream), "cpu")
    return ((torch.tensor(stream, dtype=torch.int64) + 1) * weights).cumsum(0).tolist()


def _output(invariant: str, name: str, r: int, expected, actual, detail: str, call=None) -> Violation:
    return Violation(invariant, name, 0, "outputs", None, expected, actual, detail, None, r, call)
