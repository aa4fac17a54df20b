"""EXSPEC for online use (Spec §8.5, §8.6).

The algorithm (:mod:`batchspec.reference.exspec`) yields events and never
times or prints; this module drives it with :mod:`batchspec.driver`, which
times the phases and checks the invariants after every event.
:class:`Scheduler` runs one round per :meth:`Scheduler.step` and accepts
requests between rounds, so arrival over time can be simulated (the paper's
online-serving experiment). A step is a transaction: it commits, or it
raises and leaves the scheduler as it was (Spec §8.6).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Iterator

import torch

from .draft_lengths import start
from .driver import checks, clocked, drive
from .inputs import one_prompt
from .methods import METHODS, default_window
from .reference.exspec import EXSPEC_STEPS, ExspecSteps, exspec_round
from .reference.draft_policy import as_policy
from .reference.exspec_policy import Policy, laggards_first
from .reference.exspec_pool import Pool
from .reference.state import RowOutput
from .reference.transitions import Models
from .stats import Stats
from .validate import eos_ids, require_int, validate, window

_DEFAULT = object()  # "the scheduler's own setting" at submit


@dataclass(frozen=True)
class Request:
    """What :meth:`Scheduler.submit` accepted: the prompt and its own stopping rule.

    Attributes:
        prompt: the prompt's token ids as submitted, a tuple so that the
            record cannot change.
        max_new_tokens: the most new tokens this request gets: the value
            given to ``submit``, else the scheduler's.
        eos: this request's EOS token ids, the value given to ``submit``,
            else the scheduler's; empty when it stops at its budget only.
    """

    prompt: tuple[int, ...]
    max_new_tokens: int
    eos: frozenset[int]


@dataclass(frozen=True)
class Committed:
    """Tokens one request committed in one step (:meth:`Scheduler.stream`);
    ``stop`` is set ("eos" | "length") in the step the request finished.

    Attributes:
        request: the request's id, as :meth:`Scheduler.submit` returned it.
        tokens: the token ids the request committed in this step, in order,
            after the cut to its own budget and EOS ids.
        stop: why the request finished, ``"eos"`` or ``"length"``, in the
            step it finished; ``None`` while it is still decoding.
    """

    request: int
    tokens: list[int]
    stop: str | None


def policy_problem(chosen, members: int, batch_size: int) -> str | None:
    """What is wrong with a policy's selection of a window of ``members`` (None: valid)."""
    if not isinstance(chosen, (list, tuple)) or any(isinstance(i, bool) or not isinstance(i, int) for i in chosen):
        return "expected a list of member indices"
    if not chosen:
        return f"an empty batch, from a window of {members} members"
    if len(chosen) > batch_size:
        return f"{len(chosen)} members, more than batch_size {batch_size}"
    for i in chosen:
        if not 0 <= i < members:
            return f"index {i} out of range for a window of {members} members"
    repeated = next((i for n, i in enumerate(chosen) if i in chosen[:n]), None)
    return None if repeated is None else f"index {repeated} chosen twice (its tokens would be committed twice)"


def checked(policy: Policy) -> Policy:
    """``policy``, refusing a selection that is not a batch (:func:`policy_problem`) with a ValueError."""
    name = getattr(policy, "__name__", repr(policy))

    def choose(window, batch_size):
        chosen = policy(window, batch_size)
        problem = policy_problem(chosen, len(window), batch_size)
        if problem:
            raise ValueError(f"policy {name} returned {chosen!r}: {problem}")
        return list(chosen)

    return choose


class Scheduler:
    """Online EXSPEC: :meth:`submit` prompts at any time, :meth:`step` runs
    one round, :attr:`completed` holds finished requests' outputs.

    ``policy`` picks each batch (:mod:`batchspec.reference.exspec_policy`);
    what it returns is checked (a ValueError names the policy and the bad
    index). The default, ``laggards_first``, pads least; under overload
    (arrivals at capacity, the window full) it serves new short requests
    before long running ones, and the tail wait grows: in a simulated run at
    batch 4-8 its P90/P99 wait was 2-4x that of the authors' first-come rule
    (``full_group_only``), which pads about twice as much. Pick by what
    matters. ``max_new_tokens`` and ``eos_token_id`` are the defaults of
    :meth:`submit`. ``steps`` is the transition hook (tests swap a step
    through it); ``check_invariants`` is as in :func:`batchspec.generate`
    (``"record"`` collects into :attr:`violations`).

    Attributes:
        pool: EXSPEC's pool (Spec §8.1): the queue of requests not yet
            admitted and the window of at most ``W`` decoding members.
        models: the target and draft models the scheduler was built with.
        k: the draft policy the scheduler's rounds use (Spec §4.2): the
            run's copy of ``num_draft_tokens`` converted once, as
            ``generate`` converts it (``Fixed(k)``, ``Auto``, ``Confident``).
        num_draft_tokens: the ``num_draft_tokens`` argument as given (an
            int, ``"auto"``, ``"confident"`` or a policy object).
        max_new_tokens: the default budget of new tokens, for a request
            submitted without its own.
        eos: the default EOS token ids, a frozenset, for a request submitted
            without its own; empty for no EOS.
        policy: the batch-forming policy ``(window, batch_size) -> indices``,
            wrapped so that an invalid selection raises a ``ValueError``.
        steps: the transition functions each round calls
            (:class:`~batchspec.reference.exspec.ExspecSteps`); tests swap one.
        mode: the ``check_invariants`` setting, as in :func:`batchspec.generate`.
        oracle: the fresh-forward oracle the ``"semantic"`` checks use;
            ``None`` in every other mode.
        ledger: what the checker remembers across steps (I6, I7); ``None``
            when the checks are off or ``"structural"``.
        stats: the :class:`~batchspec.stats.Stats` of every step so far,
            summed over rounds; a failed step leaves them as they were.
        violations: the invariant violations found under
            ``check_invariants="record"``, in the order found.
        completed: ``{request id: RowOutput}`` for every request that has
            finished, by EOS, budget or cancellation.
        requests: ``{request id: Request}`` for every request submitted,
            finished or not, ids counting up from 0.
    """

    def __init__(self, target, draft, *, num_draft_tokens=5, max_new_tokens=32, batch_size=8,
                 window_size=None, eos_token_id=None, check_invariants=False,
                 policy: Policy = laggards_first, steps: ExspecSteps = EXSPEC_STEPS):
        require_int("batch_size", batch_size, 1)  # generate() takes None as "all prompts"; a scheduler has no "all"
        given = as_policy(num_draft_tokens)  # the one conversion of an int or a name (Spec §4.2)
        eos = validate(target, draft, [], "exspec", METHODS, given, max_new_tokens,
                       batch_size, eos_token_id, check_invariants)
        if not callable(policy):
            raise TypeError(f"policy must be a function (window, batch_size) -> indices, got {policy!r}")
        self.pool = Pool(batch_size, window(window_size, batch_size, default_window(batch_size)))
        self.models = Models(target, draft)
        self.stats = Stats("exspec")
        # the run's copy of the policy, started once as generate starts it (Spec §4.2)
        self.k = start(self.models, given, batch_size, self.stats.calibrations.append)
        self.num_draft_tokens, self.max_new_tokens, self.eos = num_draft_tokens, max_new_tokens, frozenset(eos)
        self.policy, self.steps = checked(policy), steps
        self.mode = check_invariants
        self.oracle, self.ledger = checks(check_invariants, target, draft)
        self.violations: list = []
        self.completed: dict[int, RowOutput] = {}
        self.requests: dict[int, Request] = {}

    def submit(self, prompt: list[int], *, max_new_tokens=None, eos_token_id=_DEFAULT, attention_mask=None) -> int:
        """Queue ``prompt`` (a list of token ids, or one row of a tokenizer's
        batch, ``input_ids`` ``[L]`` or ``[1, L]`` with its ``attention_mask``,
        either padding side: :mod:`batchspec.inputs`); return its request id.

        ``max_new_tokens`` (default: the scheduler's) and ``eos_token_id``
        (default: the scheduler's; ``None`` for no EOS) are this request's own.
        A request with ``max_new_tokens=0`` completes at once, empty.
        """
        prompt = one_prompt(self.models.target, prompt, attention_mask)
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        eos = (sorted(self.eos) or None) if eos_token_id is _DEFAULT else eos_token_id
        # a row is cut after the round that reaches its own budget, up to k - 1 positions later (Spec §8.6)
        ids = validate(self.models.target, self.models.draft, [prompt], "exspec", METHODS, self.k,
                       limit, self.pool.batch_size, eos, self.mode, overshoot=self.k.k_max - 1)
        request = len(self.requests)
        self.requests[request] = Request(tuple(prompt), limit, frozenset(ids))
        if limit == 0:
            self.completed[request] = RowOutput([], "length")
        else:
            self.pool.submit(request, list(prompt))
        return request

    def cancel(self, request: int) -> bool:
        """Withdraw ``request`` between steps: it completes now with the tokens
        committed so far and stop reason "cancelled". False when it had
        already completed; a ValueError for an id never handed out."""
        if request not in self.requests:
            raise ValueError(f"cancel: no request {request!r} was submitted (ids 0..{len(self.requests) - 1})")
        if request in self.completed:
            return False
        member = self.pool.withdraw({request}).get(request)
        output = member.output if member is not None else RowOutput()
        output.stop = "cancelled"
        self.completed[request] = output
        return True

    @property
    def pending(self) -> int:
        """Requests submitted and not completed."""
        return len(self.requests) - len(self.completed)

    def step(self) -> dict[int, RowOutput]:
        """Run one round (nothing when no request is pending); return the
        requests that finished in it. If anything raises (a forward, the
        policy, an invariant, ``KeyboardInterrupt``), the scheduler is put
        back as it was before the step and the exception propagates: calling
        ``step()`` again continues as if the failed step never ran (Spec §8.6)."""
        return self._transaction()[0]

    def stream(self) -> Iterator[Committed]:
        """Step until nothing is pending, yielding each request's tokens as
        its step commits them (an iterator, not a callback: a consumer that
        stops iterating stops the scheduler between steps, never inside one).
        A step that raises ends the iteration with its exception, the
        scheduler rolled back; ``stream()`` again resumes."""
        while self.pool.active:
            yield from self._transaction()[1]

    def run(self) -> dict[int, RowOutput]:
        """Step until nothing is pending; return :attr:`completed`."""
        while self.pool.active:
            self.step()
        return self.completed

    def _transaction(self) -> tuple[dict[int, RowOutput], list[Committed]]:
        if not self.pool.active:
            return {}, []
        saved = (self.pool.snapshot(), dict(self.completed), _copy_stats(self.stats), len(self.violations))
        ledger = self.ledger.snapshot() if self.ledger is not None else None  # the checker's memory too
        try:
            return self._round()
        except BaseException:  # KeyboardInterrupt included: nothing half-done may stay
            pool, completed, stats, found = saved
            if ledger is not None:
                self.ledger.restore(ledger)
            self.pool.restore(pool)
            self.completed = completed
            for f in dataclasses.fields(Stats):
                setattr(self.stats, f.name, getattr(stats, f.name))
            del self.violations[found:]
            raise

    def _round(self) -> tuple[dict[int, RowOutput], list[Committed]]:
        before = {m.request: len(m.output.tokens) for m in self.pool.window}
        active = [self.requests[r] for r, _ in self.pool.queue] + [self.requests[m.request] for m in self.pool.window]
        # The algorithm stops rows at the largest budget and at the EOS ids every
        # active request shares; each request's own, tighter rule is applied below.
        cap = max(r.max_new_tokens for r in active)
        shared = sorted(frozenset.intersection(*(r.eos for r in active)))
        eos = torch.tensor(shared, dtype=torch.long, device=self.models.target.device) if shared else None
        device = self.models.target.device
        start = time.perf_counter()
        with torch.no_grad():
            rnd = exspec_round(self.models, self.pool, self.policy, self.k, cap, eos, self.steps)
            done = drive(clocked(rnd, device), self.stats, self.mode, self.oracle, self.violations, device,
                         self.ledger)
        for member in self.pool.window:
            if self._cut(member.request, member.output):
                done[member.request] = member.output
        for request, output in done.items():
            self._cut(request, output)
        self.pool.withdraw(done)
        served = self.stats.per_round[-1].requests if self.stats.per_round else []
        outputs = {m.request: m.output for m in self.pool.window} | done
        events = [Committed(r, outputs[r].tokens[before.get(r, 0):], outputs[r].stop) for r in served]
        self.stats.wall_seconds += time.perf_counter() - start
        self.stats.generated_tokens += sum(len(out.tokens) for out in done.values())
        self.completed.update(done)
        return done, events

    def _cut(self, request: int, output: RowOutput) -> bool:
        """Apply ``request``'s own budget and EOS ids to ``output`` (greedy
        outputs are prefix-closed, so the cut output is the batch-1 output
        under that rule); True when it has finished."""
        rule = self.requests[request]
        end = next((i + 1 for i, t in enumerate(output.tokens) if t in rule.eos), None)
        if end is not None and end <= rule.max_new_tokens:
            del output.tokens[end:]
            output.stop = "eos"
        elif len(output.tokens) >= rule.max_new_tokens:
            del output.tokens[rule.max_new_tokens:]
            output.stop = "length"
        return output.stop is not None


def _copy_stats(stats: Stats) -> Stats:
    """A copy of ``stats`` whose lists and dicts a step can extend without touching the original."""
    return dataclasses.replace(stats, per_round=list(stats.per_round), phase_seconds=dict(stats.phase_seconds))
