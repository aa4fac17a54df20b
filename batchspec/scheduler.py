"""EXSPEC for online use (Spec §8.5).

The algorithm (:mod:`batchspec.reference.exspec`) yields events and never
times or prints; this module drives it with :mod:`batchspec.driver`, which times the phases and checks the invariants after every event.
:class:`Scheduler` runs one round per :meth:`Scheduler.step` and accepts
requests between rounds, so arrival over time can be simulated (the paper's
online-serving experiment).
"""

from __future__ import annotations

import time

import torch

from .driver import checks, clocked, drive
from .methods import METHODS, default_window
from .reference.exspec import EXSPEC_STEPS, ExspecSteps, exspec_round
from .reference.exspec_policy import Policy, laggards_first
from .reference.exspec_pool import Pool
from .reference.state import RowOutput
from .reference.steps import Models
from .stats import Stats
from .validate import validate, window

class Scheduler:
    """Online EXSPEC: :meth:`submit` prompts at any time, :meth:`step` runs
    one round, :attr:`completed` holds finished requests' outputs.

    ``policy`` picks each batch (:mod:`batchspec.reference.exspec_policy`).
    The default, ``laggards_first``, pads least; under overload (arrivals at
    capacity, the window full) it serves new short requests before long
    running ones, and the tail wait grows: in a simulated run at batch 4-8 its
    P90/P99 wait was 2-4x that of the authors' first-come rule
    (``full_group_only``), which pads about twice as much. Pick by what
    matters. ``steps`` is the transition hook (tests swap a step through it);
    ``check_invariants`` is as in :func:`batchspec.generate` (``"record"``
    collects into :attr:`violations`).
    """

    def __init__(self, target, draft, *, num_draft_tokens=5, max_new_tokens=32, batch_size=8,
                 window_size=None, eos_token_id=None, check_invariants=False,
                 policy: Policy = laggards_first, steps: ExspecSteps = EXSPEC_STEPS):
        eos = validate(target, draft, [], "exspec", METHODS, num_draft_tokens, max_new_tokens,
                       batch_size, eos_token_id, check_invariants)
        self.pool = Pool(batch_size, window(window_size, batch_size, default_window(batch_size)))
        self.models = Models(target, draft)
        self.k, self.max_new_tokens, self.policy, self.steps = num_draft_tokens, max_new_tokens, policy, steps
        self.eos = torch.tensor(eos, dtype=torch.long, device=target.device) if eos else None
        self.mode = check_invariants
        self.oracle, self.ledger = checks(check_invariants, target, draft)
        self.stats = Stats("exspec")
        self.violations: list = []
        self.completed: dict[int, RowOutput] = {}
        self._submitted = 0

    def submit(self, prompt: list[int]) -> int:
        """Queue ``prompt`` (a list of token ids); return its request id."""
        validate(self.models.target, self.models.draft, [prompt], "exspec", METHODS, self.k,
                 self.max_new_tokens, self.pool.batch_size, None, self.mode)
        request, self._submitted = self._submitted, self._submitted + 1
        self.pool.submit(request, list(prompt))
        return request

    @property
    def pending(self) -> int:
        """Requests submitted and not completed."""
        return self._submitted - len(self.completed)

    def step(self) -> dict[int, RowOutput]:
        """Run one round (nothing when no request is pending); return the
        requests that finished in it."""
        if not self.pool.active:
            return {}
        device = self.models.target.device
        start = time.perf_counter()
        with torch.no_grad():
            rnd = exspec_round(self.models, self.pool, self.policy, self.k, self.max_new_tokens,
                               self.eos, self.steps)
            done = drive(clocked(rnd, device), self.stats, self.mode, self.oracle, self.violations, device,
                         self.ledger)
        self.stats.wall_seconds += time.perf_counter() - start
        self.stats.generated_tokens += sum(len(out.tokens) for out in done.values())
        self.completed.update(done)
        return done

    def run(self) -> dict[int, RowOutput]:
        """Step until nothing is pending; return :attr:`completed`."""
        while self.pool.active:
            self.step()
        return self.completed
