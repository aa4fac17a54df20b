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
  (``"prefill"``, ``"draft"``, ``"verify"``, ``"realign"``, ``"finish"``),
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
* ``decision``: null except on the step that ends a round (``"realign"`` or
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

Under EXSPEC (``method="exspec"``, Spec §8) a round reads: ``"realign"`` (the
batch stacked from the pool; ``round`` is the new round), its draft and
verify steps, one ``"realign"`` per member released back to the pool (a
one-row observation), then ``"finish"`` with the decision, whose ``delta``
is null for every row (rows go back to the pool unaligned).

**last line** ``{"kind": "result", "sequences": [[int]], "stop_reasons": [str]}``
in request order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import api, faults
from .oracle import hf_oracle
from .trace_steps import Recorder, plain

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
