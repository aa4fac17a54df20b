"""Record a run step by step, save it as JSON lines, load it without the models.

A trace is what the invariants saw after every step (the same
:class:`~batchspec.invariants.Observation` the checker reads, Spec §3) and
what each round decided (Spec §4.7), as plain JSON data. :func:`record` taps
the decoder's events on their way to :func:`batchspec.driver.drive`: it reads
them and changes nothing, so a traced run commits the same tokens as an
untraced one (``tests/api_cli/test_trace.py`` asserts it).

Format (``batchspec-trace``, version 2; version 1 named ``layer0_sum``
``fingerprint``). One JSON object per line:

**line 1, the header** ``{"kind": "header", ...}``:

* ``format`` ``"batchspec-trace"``, ``version`` ``2``;
* ``method`` str (``"eqspec"``, ``"masking"``, ...), ``fault`` str or null
  (a :data:`batchspec.faults.CATALOGUE` name injected into EQSPEC);
* ``pair`` str or null; ``alphabet`` ``"bytes"`` when token ids are bytes
  (the default pair), else null;
* ``settings`` ``{"k", "max_new_tokens", "batch_size", "eos_token_id", "semantic"}``;
* ``prompts`` ``[[int]]``, token ids per request (request ``r`` is ``prompts[r]``).

**then one line per step** ``{"kind": "step", ...}``, in the order the steps ran:

* ``index`` int (0, 1, ...), ``batch`` int (which decoder: static batches
  run one after another), ``round`` int (0 for prefill), ``step`` str
  (``"prefill"``, ``"draft"``, ``"verify"``, ``"align"``, ``"finish"``),
  ``phase`` str (the timing phase);
* ``observation``: null for ``"finish"`` (the batch is empty), else, with
  ``B`` rows and grid width ``L``:

  - ``requests`` ``[B]`` request id of each row;
  - ``tokens`` ``[B][L]`` the committed grid (pad slots hold filler),
    ``mask`` ``[B][L]`` the grid mask the decoder holds (0/1),
    ``pad`` ``[B]`` p_i, ``length`` ``[B]`` c_i, ``boundary`` bool;
  - ``draft_tokens`` ``[B][k']`` or null, ``committed`` ``[B][a_i]`` or null
    (the tokens a verify step commits per row);
  - ``calls``: the forward calls made during the step, each ``{"model",
    "input_ids" [B][n], "attention_mask" [B][T+n], "position_ids" [B][n],
    "cache_length" T}``; input ``j`` of row ``i`` is written to cache slot
    ``T + j``;
  - ``caches``: per model (``"target"``, ``"draft"``) ``{"length" T,
    "layer0_sum" [B][T], "token" [B][T], "position" [B][T], "source" [B][T]}``:
    ``layer0_sum`` is the float sum of the slot's layer-0 key (under rotary
    embeddings a layer-0 key depends only on the token and its position, so a
    slot the realignment copied keeps its sum bit for bit); ``token`` /
    ``position`` are the token id and position id that produced the slot
    (null when unknown: no call wrote it and no earlier slot held it);
    ``source`` is null when a call of this step wrote the slot, else
    ``[request, slot]`` where the same key sat the last time that request was
    recorded (``[own request, s - δ_i]`` after a correct realignment);
* ``decision``: null except on the step that ends a round (``"align"`` or
  ``"finish"``): ``{"round", "requests" [B] (rows at the start of the round),
  "drafted" k', "accepted" [B] m_i, "appended" [B] a_i, "bonus" [B] (the
  target's token after the accepted drafts, or null when EOS or the budget
  cut the row first), "delta" [B] δ_i = p'_i - p_i (null for a row that
  left), "leaving" [requests], "width" L', "realigned" bool, "wasted" [B] or null
  (rollback), "grouped" bool or null and "waiting" [requests] or null (EXSPEC:
  the batch was one same-length group; the pool's requests left out)}``;
* ``violations``: ``[{"invariant", "name", "round", "step", "row",
  "request", "model", "expected", "actual", "detail"}]`` found on this step's
  observation (expected/actual as JSON values; anything else as its repr).

Under EXSPEC (``method="exspec"``, Spec §8) a round reads: ``"align"`` (the
batch stacked from the pool; ``round`` is the new round), its draft and
verify steps, one ``"align"`` per member released back to the pool (a
one-row observation), then ``"finish"`` with the decision, whose ``delta``
is null for every row (rows go back to the pool unaligned).

**last line** ``{"kind": "result", "sequences": [[int]], "stop_reasons": [str]}``
in request order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from . import api, faults, methods
from .invariants import Ledger, violations
from .invariants.memo import Memo
from .oracle import hf_oracle
from .reference import observation

FORMAT, VERSION = "batchspec-trace", 2


@dataclass
class Trace:
    """A recorded run: the header, one dict per step, the outputs (see the module doc)."""

    header: dict
    steps: list[dict] = field(default_factory=list)
    result: dict | None = None

    def save(self, path) -> None:
        """Write JSON lines: header, steps, result."""
        lines = [self.header, *self.steps] + ([self.result] if self.result else [])
        Path(path).write_text("".join(json.dumps(line) + "\n" for line in lines))

    @classmethod
    def load(cls, path) -> "Trace":
        """Read a file :meth:`save` wrote; no model is needed."""
        lines = [json.loads(text) for text in Path(path).read_text().splitlines() if text.strip()]
        if not lines or lines[0].get("format") != FORMAT:
            raise ValueError(f"{path} is not a {FORMAT} file (first line has no format {FORMAT!r})")
        if lines[0].get("version") != VERSION:
            raise ValueError(f"{path} has trace version {lines[0].get('version')}, this reads {VERSION}")
        steps = [line for line in lines[1:] if line["kind"] == "step"]
        result = next((line for line in lines[1:] if line["kind"] == "result"), None)
        return cls(lines[0], steps, result)

    @property
    def violations(self) -> list[dict]:
        """Every recorded violation, in step order."""
        return [v for s in self.steps for v in s["violations"]]

    def first_violation(self) -> dict | None:
        """The first recorded violation, or None for a clean run."""
        found = self.violations
        return found[0] if found else None

    def find(self, round: int, step: str, batch: int = 0, nth: int = 0) -> dict:
        """The ``nth`` step named ``step`` of ``round`` in ``batch``."""
        hits = [s for s in self.steps if (s["batch"], s["round"], s["step"]) == (batch, round, step)]
        if len(hits) <= nth:
            raise KeyError(f"no step {step!r} #{nth} in round {round} of batch {batch}")
        return hits[nth]

    def round_steps(self, round: int, batch: int = 0) -> list[dict]:
        """The steps of one round, in order."""
        return [s for s in self.steps if (s["batch"], s["round"]) == (batch, round)]


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
            "grouped": getattr(record, "grouped", None), "waiting": plain(getattr(record, "waiting", None)),
            "committed": a}  # former name of "appended", for tutorial 02 until its real-pair page is re-run


def _tap(decoder, recorder: Recorder, batch: int):
    """Re-yield ``decoder``'s events after recording each; return its outputs."""
    while True:
        try:
            event = next(decoder)
        except StopIteration as stop:
            return stop.value
        recorder.add(event, batch)
        yield event


def record(target, draft, prompts, method: str = "eqspec", *, fault: str | None = None,
           semantic: bool = False, pair: str | None = None, alphabet: str | None = None,
           **options) -> Trace:
    """Run ``batchspec.generate`` (same options) and record every step (see the module doc).

    ``fault`` injects a :data:`batchspec.faults.CATALOGUE` entry into EQSPEC
    (``method`` must then be ``"eqspec"``); ``semantic`` turns on the semantic
    mode of I3 for the recorded violations. The run never stops at a
    violation: every one is recorded on its step.
    """
    if fault is not None and fault not in faults.CATALOGUE:
        raise ValueError(f"fault must be one of {sorted(faults.CATALOGUE)}, got {fault!r}")
    if fault is not None and method != "eqspec":
        raise ValueError(f"a fault is injected into EQSPEC; got method={method!r}")
    if fault is None and method not in api.METHODS:
        raise ValueError(f"method must be one of {sorted(api.METHODS)}, got {method!r}")
    base = faults.method(fault) if fault else api.METHODS[method]
    recorder = Recorder(hf_oracle({"target": target, "draft": draft}) if semantic else None)

    def decoders(models, prompts_, config):
        for batch, decoder in enumerate(base.decoders(models, prompts_, config)):
            yield _tap(decoder, recorder, batch)

    tapped = replace(base, decoders=decoders, name=f"trace:{fault or method}")  # the same capabilities, tapped
    result = api.generate(target, draft, prompts, method=tapped, check_invariants=False, **options)
    settings = {"k": options.get("num_draft_tokens", 5), "max_new_tokens": options.get("max_new_tokens", 32),
                "batch_size": options.get("batch_size"), "eos_token_id": plain(options.get("eos_token_id")),
                "semantic": semantic}
    header = {"kind": "header", "format": FORMAT, "version": VERSION, "method": method, "fault": fault,
              "pair": pair, "alphabet": alphabet, "settings": settings, "prompts": [list(p) for p in prompts]}
    trace = Trace(header, recorder.steps, {"kind": "result", "sequences": result.sequences,
                                           "stop_reasons": result.stop_reasons})
    trace.generation = result  # the live result (stats), not saved
    return trace
