"""The registry of decoding methods behind ``generate(..., method=NAME)``.

A method turns ``(models, prompts, config)`` into decoder generators (Spec §4);
:mod:`batchspec.driver` runs them. EQSPEC, the autoregressive baseline, the
broken alternatives (Paper §5) and EXSPEC (Spec §8) register here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import torch

from .driver import clocked
from .reference import Models, decode
from .reference import exspec
from .reference.baselines import BASELINES
from .reference.draft_policy import Fixed
from .reference.eqspec import STEPS
from .reference.exspec_policy import laggards_first
from .reference.exspec_pool import Pool
from .validate import window

if TYPE_CHECKING:
    from .reference.draft_policy import DraftPolicy
    from .reference.sampling import Sampler


@dataclass(frozen=True)
class DecodeConfig:
    """Everything a method needs besides the models and the prompts.

    Attributes:
        k: the run's draft policy, ``num_draft_tokens`` as ``generate``
            converted and started it (Spec §4.2): ``Fixed(k)``, ``Auto`` or
            ``Confident``, choosing each round's ``k'``.
        max_new_tokens: the most new tokens any prompt gets; a row that
            reaches it stops with reason ``"length"``.
        eos: the EOS token ids, a ``[E]`` long tensor on the target's
            device; a row stops after the first one it commits. ``None``:
            no EOS, every row runs to ``max_new_tokens``.
        batch_size: the most rows a batch holds (a static batch's prompts,
            or the members EXSPEC forms a batch from); ``generate`` passes
            all the prompts when given ``None``.
        window_size: EXSPEC's window ``W``, the most requests admitted at
            once (Spec §8.1); ``None`` means the default, ``4 * batch_size``.
        sort_by_length: EXSPEC only: whether prompts are submitted shortest
            first (the default, ``True``) or in input order.
        sampler: the speculative-sampling rule with its warping and each
            request's key (Spec §4.3.2); ``None``, the default, decodes greedily.
    """

    k: DraftPolicy  # num_draft_tokens as a policy: Fixed(k), Auto, Confident (Spec §4.2)
    max_new_tokens: int
    eos: torch.Tensor | None  # [E] EOS ids, or None
    batch_size: int
    window_size: int | None = None  # EXSPEC
    sort_by_length: bool = True  # EXSPEC
    sampler: Sampler | None = None  # None: greedy (Spec §4.3.2)


@dataclass(frozen=True)
class Method:
    """A decoding method: ``decoders(models, prompts, config)`` yields one
    decoder generator (Spec §4) per batch it forms; each returns
    ``{request: RowOutput}``.

    Attributes:
        decoders: the function ``(models, prompts, config) -> iterator`` that
            yields one decoder generator per batch it forms, given a
            :class:`DecodeConfig`.
        needs_draft: whether the method runs the draft model; when False,
            ``generate`` accepts ``draft=None`` and never calls the draft.
        can_sample: whether the method honours ``do_sample=True`` (Spec
            §4.3.2); the default, False, refuses it with a ``ValueError``.
        options: the names of the method-specific options of ``generate`` it
            reads (``window_size``, ``sort_by_length``); given to another
            method, they raise. Empty by default.
        tight_length: whether its rounds draft at most the smallest remaining
            budget and take a policy's ``k`` (Spec §4.2): its length check
            then needs no ``+ k`` margin and ``num_draft_tokens="auto"``
            applies. False by default.
        name: what messages and statistics call it when it is given to
            ``generate`` itself, unregistered (a registered method goes by
            its key in :data:`METHODS`); ``"custom"`` by default.
        section: the spec section that defines it (``"4.8"`` for Spec §4.8);
            every registered method names one, and a test checks that it
            resolves and that a test runs the method (Contributing §5.2).
    """

    decoders: Callable
    needs_draft: bool
    can_sample: bool = False  # honours do_sample=True (Spec §4.3.2)
    options: tuple[str, ...] = ()
    tight_length: bool = False
    name: str = "custom"
    section: str = ""


def static_batches(run):
    """Split the prompts into successive batches of ``config.batch_size``."""

    def decoders(models, prompts, config):
        for first in range(0, len(prompts), config.batch_size):
            requests = list(range(first, min(first + config.batch_size, len(prompts))))
            yield run(models, [list(prompts[r]) for r in requests], requests, config)

    return decoders


def _eqspec(models, prompts, requests, config):
    return decode(models, prompts, requests, config.k, config.max_new_tokens, config.eos,
                  replace(STEPS, sampler=config.sampler))


def _autoregressive(models, prompts, requests, config):
    return decode(Models(models.target), prompts, requests, Fixed(0), config.max_new_tokens, config.eos,
                  replace(STEPS, sampler=config.sampler))


#: Registry of methods; later modules add theirs with :func:`register_method`.
METHODS: dict[str, Method] = {
    "eqspec": Method(static_batches(_eqspec), True, can_sample=True, tight_length=True, section="4.8"),
    "autoregressive": Method(static_batches(_autoregressive), False, can_sample=True, tight_length=True,
                             section="4.8"),
}


def register_method(name: str, method: Method) -> None:
    """Make ``method`` available as ``generate(..., method=name)``."""
    METHODS[name] = method


for _name, (_run, _section) in BASELINES.items():  # the broken alternatives, Paper §5
    register_method(_name, Method(static_batches(_run), True, section=_section))


#: Default window ``W = 4B`` (Spec §8.1); why 4, as measured: docs/design.md, "The EXSPEC window".
WINDOW_FACTOR = 4


def default_window(batch_size: int) -> int:
    """``W`` when ``window_size`` is None."""
    return WINDOW_FACTOR * batch_size


def _exspec(models, prompts, config):
    """``generate(method="exspec")``: every prompt is submitted at the start,
    shortest first when ``sort_by_length`` (so that neighbours in the window
    have near lengths), and one decoder runs the pool to the end."""
    pool = Pool(config.batch_size, window(config.window_size, config.batch_size, default_window(config.batch_size)))
    order = range(len(prompts))
    if config.sort_by_length:
        order = sorted(order, key=lambda r: len(prompts[r]))
    for request in order:
        pool.submit(request, list(prompts[request]))
    steps = replace(exspec.EXSPEC_STEPS, sampler=config.sampler)
    yield clocked(exspec.decode(models, pool, laggards_first, config.k, config.max_new_tokens, config.eos, steps),
                  models.target.device)


register_method("exspec", Method(_exspec, needs_draft=True, can_sample=True, tight_length=True,
                                  options=("window_size", "sort_by_length"), section="8.4"))
