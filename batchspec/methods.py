"""The registry of decoding methods behind ``generate(..., method=NAME)``.

A method turns ``(models, prompts, config)`` into decoder generators (Spec §4);
:mod:`batchspec.driver` runs them. EQSPEC, the autoregressive baseline, the
broken alternatives (paper notes §5) and EXSPEC (Spec §8) register here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .driver import clocked
from .reference import Models, decode
from .reference import exspec
from .reference.baselines import BASELINES
from .reference.exspec_policy import laggards_first
from .reference.exspec_pool import Pool
from .validate import window


@dataclass(frozen=True)
class DecodeConfig:
    """Everything a method needs besides the models and the prompts."""

    k: object  # num_draft_tokens: an int, or a draft-length policy (Spec §4.2.2)
    max_new_tokens: int
    eos: torch.Tensor | None  # [E] EOS ids, or None
    batch_size: int
    window_size: int | None = None  # EXSPEC
    sort_by_length: bool = True  # EXSPEC


@dataclass(frozen=True)
class Method:
    """A decoding method: ``decoders(models, prompts, config)`` yields one
    decoder generator (Spec §4) per batch it forms; each returns
    ``{request: RowOutput}``."""

    decoders: Callable
    needs_draft: bool


def static_batches(run):
    """Split the prompts into successive batches of ``config.batch_size``."""

    def decoders(models, prompts, config):
        for first in range(0, len(prompts), config.batch_size):
            requests = list(range(first, min(first + config.batch_size, len(prompts))))
            yield run(models, [list(prompts[r]) for r in requests], requests, config)

    return decoders


def _eqspec(models, prompts, requests, config):
    return decode(models, prompts, requests, config.k, config.max_new_tokens, config.eos)


def _autoregressive(models, prompts, requests, config):
    return decode(Models(models.target), prompts, requests, 0, config.max_new_tokens, config.eos)


#: Registry of methods; later modules add theirs with :func:`register_method`.
METHODS: dict[str, Method] = {
    "eqspec": Method(static_batches(_eqspec), True),
    "autoregressive": Method(static_batches(_autoregressive), False),
}


def register_method(name: str, method: Method) -> None:
    """Make ``method`` available as ``generate(..., method=name)``."""
    METHODS[name] = method


for _name, _run in BASELINES.items():  # the broken alternatives, paper notes §5
    register_method(_name, Method(static_batches(_run), True))


#: Default window ``W = 4B``. A round serves ``B`` of the ``W`` members and
#: the window holds ``W`` sequences' caches, so memory grows with ``W``; the
#: chance that ``B`` members share a length grows with it too. Measured with
#: benchmarks/exspec_grouping.py (tiny-llama, ``4B`` prompts, the default
#: policy): going from ``2B`` to ``4B`` raises the group rate from 9-30% to
#: 54-77% on equal-length prompts and from 4-40% to 13-43% on varied ones,
#: cuts the padding per batch 2-14x, and leaves the P90/P99 wait of the run
#: as it was. A length-only simulation with ``8B`` prompts finds ``8B``
#: adding less (about 45% -> 60-80%) for twice the memory. ``4B`` is also the
#: authors' fixed ``W = 32`` at their ``B = 8``.
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
    yield clocked(exspec.decode(models, pool, laggards_first, config.k, config.max_new_tokens, config.eos),
                  models.target.device)


register_method("exspec", Method(_exspec, needs_draft=True))
