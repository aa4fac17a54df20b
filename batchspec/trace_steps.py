"""One step of a run as a line of a trace: the observation, its violations, the
cache's provenance and the round's decision (the step lines of the format in
:mod:`batchspec.trace`; what the invariants saw, Spec §3, and what each round
decided, Spec §4.7).
"""

from __future__ import annotations

import torch

from .invariants import Ledger, violations
from .invariants.memo import Memo
from .reference import observation


def plain(value):
    """``value`` as JSON data: tensors to lists, tuples to lists, the rest by repr."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _violation(v) -> dict:
    return {"invariant": v.invariant, "name": v.name, "round": v.round, "step": v.step, "row": v.row,
            "request": v.request, "model": v.model, "expected": plain(v.expected),
            "actual": plain(v.actual), "detail": v.detail}


def _call(call) -> dict:
    return {"model": call.model, "input_ids": call.input_ids.tolist(),
            "attention_mask": call.attention_mask.long().tolist(),
            "position_ids": call.position_ids.tolist(), "cache_length": int(call.cache_length)}


class Recorder:
    """Turns events into step dicts; keeps, per ``(model, request)``, the
    labelled cache row last seen, to tell where each slot's key came from."""

    def __init__(self, oracle=None):
        # the default checks, I6/I7 included: one ledger for the run, as generate keeps one
        self.oracle, self.ledger, self.steps = oracle, Ledger(), []
        self.memo = Memo()  # what the checks build once (a round's masks), for this recording
        self.seen: dict[tuple[str, int], tuple[list[tuple], int]] = {}  # -> (labelled slots, p_i)
        self.before: dict[int, tuple[list[int], dict]] = {}  # batch -> (pad, verify obs) of the round

    def add(self, event, batch: int) -> None:
        state = event.state
        obs = observation(event, self.memo) if state.batch else None
        # an EXSPEC member is observed as a one-row batch that carries its round in the observation
        rnd = obs.round if obs is not None else getattr(state, "round", event.record.round if event.record else 0)
        step = {"kind": "step", "index": len(self.steps), "batch": batch, "round": int(rnd),
                "step": event.step, "phase": event.phase, "observation": None, "decision": None,
                "violations": []}
        if obs is not None:
            step["observation"] = self._observation(obs)
            step["violations"] = [_violation(v) for v in violations(obs, self.oracle, ledger=self.ledger,
                                                                    memo=self.memo)]
            if event.step == "verify":
                self.before[batch] = step["observation"]
        if event.record is not None:
            step["decision"] = _decision(event.record, self.before.get(batch), step["observation"])
        self.steps.append(step)

    def _observation(self, obs) -> dict:
        out = {"requests": list(obs.requests or range(obs.tokens.shape[0])), "tokens": obs.tokens.tolist(),
               "mask": obs.mask.long().tolist(), "pad": list(obs.pad), "length": list(obs.length),
               "boundary": obs.boundary,
               "draft_tokens": None if obs.draft_tokens is None else obs.draft_tokens.tolist(),
               "committed": obs.committed, "calls": [_call(c) for c in obs.calls]}
        out["caches"] = {model: self._cache(model, view, obs, out["requests"]) for model, view in obs.caches.items()}
        return out

    def _cache(self, model, view, obs, requests) -> dict:
        """Layer-0 sums and provenance of every slot of one model's cache."""
        if not view.layers:
            empty = {name: [[] for _ in requests] for name in ("layer0_sum", "token", "position", "source")}
            return {"length": 0, **empty}  # [B][0]: nothing fed yet (EQSPEC's prefill, Spec §4.1)
        sums = layer0_sums(view.layers[0][0])  # [B][T]
        written = _written(obs.calls, model)
        rows, seen = {name: [] for name in ("token", "position", "source")}, {}
        for i, request in enumerate(requests):
            labels = [written.get((i, slot)) or self._match(model, request, slot, total)
                      for slot, total in enumerate(sums[i])]
            for name, column in zip(rows, zip(*labels) if labels else ((), (), ())):
                rows[name].append(list(column))
            seen[(model, request)] = ([(total, token, position) for total, (token, position, _) in zip(sums[i], labels)],
                                      obs.pad[i])
        self.seen.update(seen)  # after every row: a row never matches this step's other rows
        return {"length": view.length, "layer0_sum": sums, **rows}

    def _match(self, model, request, slot, total):
        """``(token, position, [request, slot])`` of the earlier slot of ``model``'s
        cache holding the same key (the same layer-0 sum ``total``): the
        request's own row first, then any other row; within a row a content
        slot before a padding slot (padding may hold copies of content: slots
        the realignment left behind, or copies of slot 0 a gather made), then
        the nearest."""
        others = [key for key in self.seen if key[0] == model and key[1] != request]
        for key in [(model, request)] * ((model, request) in self.seen) + others:
            labels, pad = self.seen[key]
            hits = [s for s, (seen, _, _) in enumerate(labels) if seen == total]
            if hits:
                src = min(hits, key=lambda s: (s < pad, abs(s - slot), s))
                _, token, position = labels[src]
                return token, position, [key[1], src]
        return None, None, None


def layer0_sums(keys: torch.Tensor) -> list[list[float]]:
    """``[B][T]`` per slot, the sum of a layer's keys ``[B, H, T, D]`` over heads and
    dims, to 12 significant digits: each slot is summed as its own contiguous
    vector, so a copied slot sums in the same order wherever its tensor lives,
    and the rounding absorbs what reordering remains."""
    rows = keys.permute(0, 2, 1, 3).reshape(keys.shape[0], keys.shape[2], -1).double().contiguous()
    return [[float(f"{x:.12g}") for x in row] for row in rows.sum(-1).tolist()]


def _written(calls, model) -> dict:
    """``{(row, slot): (token, position, None)}`` for slots this step's calls of ``model`` wrote."""
    out = {}
    for call in calls:
        if call.model != model:
            continue
        ids, positions = call.input_ids.tolist(), call.position_ids.tolist()
        for i, row in enumerate(ids):
            for j, token in enumerate(row):
                out[(i, call.cache_length + j)] = (token, positions[i][j], None)
    return out


def _decision(record, verify: dict | None, after: dict | None) -> dict:
    """What the round decided: the record's counts plus bonus, δ_i and the rows leaving."""
    m, a = list(record.accepted), list(record.appended)
    committed = (verify or {}).get("committed") or [[] for _ in m]
    bonus = [row[m_i] if len(row) > m_i else None for row, m_i in zip(committed, m)]
    pad_before = dict(zip(verify["requests"], verify["pad"])) if verify else {}
    pad_after = dict(zip(after["requests"], after["pad"])) if after else {}
    delta = [pad_after[r] - pad_before[r] if r in pad_after and r in pad_before else None
             for r in record.requests]
    return {"round": record.round, "requests": list(record.requests), "drafted": record.drafted,
            "accepted": m, "appended": a, "bonus": bonus, "delta": delta,
            "leaving": [r for r in record.requests if r not in pad_after], "width": record.width,
            "realigned": bool(record.realigned), "wasted": plain(getattr(record, "wasted", None)),
            "grouped": getattr(record, "grouped", None), "waiting": plain(getattr(record, "waiting", None))}
