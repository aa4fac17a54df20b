"""``watch``: check any decoder from its models' own forward calls (Spec §3.12, §3.9).

With no glue at all::

    with batchspec.invariants.watch(target=target, draft=draft) as w:
        out = any_decoder(target, draft, prompts)
        w.outputs(prompts, out, max_new_tokens=32, eos_token_id=eos)  # optional: C2 and C3
    assert not w.violations, w.report()  # e.g. in the user's CI

Two parts, one job each, composed by :class:`Watch`:

* **Correctness (level (a), always on)**,
  :class:`~batchspec.invariants.watch_correctness.Correctness`: public forward hooks
  record what every call of either model was really given and check it
  against C1; ``w.outputs`` checks C2 and C3 on what the decoder returned.
  Any layout, padding, cache handling and call schedule; greedy decoders.
  The hooks exist only inside the ``with`` block: outside it the models run
  untouched.
* **Layout (level (b), opt in)**,
  :class:`~batchspec.invariants.watch_layout.Layout`: a decoder in the
  paper's compact layout may also describe its grid with
  :meth:`Watch.boundary` after prefill and after every round's realignment;
  from then on its calls are checked against I1–I8 as well.
"""

from __future__ import annotations

import bisect
from contextlib import contextmanager

from .memo import Memo
from .registry import INVARIANTS
from .violation import InvariantViolation
from .watch_correctness import Correctness
from .watch_layout import Layout


def _read(part: str, name: str, doc: str) -> property:
    """A read-only attribute of :class:`Watch` that is its ``part``'s ``name``."""
    return property(lambda self: getattr(getattr(self, part), name), doc=doc)


class Findings:
    """What both parts of a :class:`Watch` report to, called with each check's
    violations: kept in order (the earliest wrong call first), raised at once under
    ``check="raise"``. A part holds this, not the :class:`Watch`, so that no
    reference cycle runs through the Watch: a finished one is freed the moment the
    user drops it, not at the next full garbage collection."""

    def __init__(self, mode: str):
        self.mode = mode
        self.violations: list = []
        self.caught = None

    def __call__(self, found: list, obs=None) -> None:
        for v in found:  # record mode: the earliest wrong call first (C1 names one before the call it checks)
            bisect.insort(self.violations, v, key=lambda u: (u.call is None, u.call or 0))
        if found and obs is not None and self.caught is None:
            self.caught = obs
        if found and self.mode == "raise":
            raise InvariantViolation(found[0], tuple(found[1:]))


class Watch:
    """The recorder of one ``with watch(...)`` block; see :func:`watch`. It holds
    the violations both parts find, and reads their counts."""

    def __init__(self, models: dict, check: str, oracle, registry, structural: bool):
        if check not in ("raise", "record"):
            raise ValueError(f"watch: check must be 'raise' or 'record', got {check!r}")
        self.mode = check
        self.findings = Findings(check)
        memo = Memo()  # what the checks build once (a round's masks), for this block only
        self.layout = Layout(oracle, registry, structural, memo, self.findings)
        self.correctness = Correctness(models, memo, self.findings, self.layout)

    @property
    def violations(self) -> list:
        """Every violation found so far, the earliest wrong call first."""
        return self.findings.violations

    @property
    def caught(self):
        """The :class:`Observation` whose check found the first violation (None while
        clean): its tensors are the decoder's own, as they were then when
        ``check="raise"`` stopped the decoder there (for a picture of it)."""
        return self.findings.caught

    def outputs(self, prompts, sequences, max_new_tokens=None, eos_token_id=None, pad_token_id=None) -> list:
        """C2 and C3 (Spec §3.12.3, §3.12.4); see
        :meth:`~batchspec.invariants.watch_correctness.Correctness.outputs`."""
        return self.correctness.outputs(prompts, sequences, max_new_tokens, eos_token_id, pad_token_id)

    def boundary(self, tokens, mask, requests=None, target_cache=None, draft_cache=None) -> None:
        """The grid after prefill and after each round's realignment (Spec §3.9); see
        :meth:`~batchspec.invariants.watch_layout.Layout.boundary`."""
        self.layout.boundary(tokens, mask, requests, target_cache, draft_cache)

    calls = _read("correctness", "calls", "Forward calls watched.")
    outputs_checked = _read("correctness", "outputs_checked", "Outputs checked by ``outputs()``.")
    check_seconds = _read("correctness", "check_seconds", "Seconds spent checking, in the hooks and in "
                          "``outputs()``: what the checker costs the decoder (``benchmarks/check_overhead.py`` "
                          "reports it against decode time).")
    check_cpu_seconds = _read("correctness", "check_cpu_seconds", "The same in process CPU time, steadier than "
                              "the wall clock on a shared machine.")
    history = _read("correctness", "history", "The correctness checker's memory "
                    "(``History``).")
    ledger = _read("layout", "ledger", "The layout checks' ``Ledger`` "
                   "(None when ``structural``).")
    grid = _read("layout", "grid", "``(tokens [B, L], mask [B, L], requests)`` of the last ``boundary()``, or None.")
    prefill = _read("layout", "prefill", "The prefill calls kept for the first ``boundary()``.")
    steps = _read("layout", "steps", "Layout steps checked.")
    round = _read("layout", "round", "``boundary()`` calls so far.")

    def report(self) -> str:
        """A short account: calls, outputs and layout steps checked, then the first violations."""
        head = f"watched {self.calls} forward calls"
        head += (f", checked {self.outputs_checked} outputs" if self.outputs_checked
                 else " (outputs not checked: call w.outputs(...))")
        if self.steps:
            head += f", {self.steps} layout steps over {max(self.round - 1, 0)} rounds"
        head += ": "
        if not self.violations:
            return head + "no violation"
        lines = [head + f"{len(self.violations)} violations"]
        lines += [f"  {v}" for v in self.violations[:5]]
        return "\n".join(lines)


@contextmanager
def watch(target, draft=None, check: str = "raise", oracle=None, registry=INVARIANTS, structural=False,
          greedy: bool = True):
    """Record and check every forward call ``target`` and ``draft`` make inside
    the block (Spec §3.9). ``check``: ``"raise"`` (raise
    :class:`InvariantViolation` from the offending call) or ``"record"``
    (collect in ``w.violations``). ``oracle`` switches on semantic I3
    (:func:`batchspec.oracle.hf_oracle`); ``registry`` selects the invariant
    set (e.g. :data:`~batchspec.invariants.holes.HOLE_AWARE`); ``structural``
    turns the ledger checks I6/I7 off. ``greedy=False`` says the decoder samples
    or searches beams: C1's third clause, which reads the target's greedy
    choices, is then off (C2 judges greedy outputs only). Yields the :class:`Watch`."""
    models = {"target": target} if draft is None else {"target": target, "draft": draft}
    w = Watch(models, check, oracle, registry, structural)
    w.history.stream.greedy = bool(greedy)
    w.correctness.attach()
    try:
        yield w
    finally:
        w.correctness.detach()
    if w.calls == 0:
        raise ValueError("watch: no forward call of the watched models was made inside the block, so nothing "
                         "was checked (did the decoder run these very model objects?)")
