"""``batchspec.generate``: the public entry point.

Methods are registered in :mod:`batchspec.methods`; their decoders run under :mod:`batchspec.driver`, which times the
steps and checks the invariants (Contributing §4.7).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .draft_lengths import by_name, start
from .inputs import as_prompts
from .driver import checks, drive
from .methods import METHODS, DecodeConfig, Method, register_method  # noqa: F401 (re-exported)
from .reference import Models
from .reference.draft_policy import as_policy
from .reference.sampling import Sampler, Warping
from .stats import Stats
from .validate import method_spec, validate, validate_sampling


@dataclass
class GenerationResult:
    """Outputs in input order, stop reasons, statistics, recorded violations.

    Attributes:
        sequences: per prompt, in input order, the token ids generated after
            it (the prompt not included), cut after the first EOS.
        stats: the run's :class:`~batchspec.stats.Stats`: rounds, forward
            calls, acceptance per round and seconds per phase.
        stop_reasons: per prompt, in input order, why its row stopped:
            ``"eos"`` (it committed an EOS id) or ``"length"`` (it reached
            ``max_new_tokens``).
        violations: the invariant violations found under
            ``check_invariants="record"``, in the order found; empty in the
            other modes, which raise at the first one instead.
    """

    sequences: list[list[int]]
    stats: Stats
    stop_reasons: list[str] = field(default_factory=list)
    violations: list = field(default_factory=list)


def generate(target, draft, prompts, method="eqspec", num_draft_tokens=5, max_new_tokens=32,
             batch_size=None, eos_token_id=None, check_invariants=False, window_size=None,
             sort_by_length=None, do_sample=False, temperature=1.0, top_k=None, top_p=None,
             seed=0, attention_mask=None) -> GenerationResult:
    """Decode ``prompts`` with ``method`` (Spec §4): a name in ``METHODS``, or a
    :class:`Method` itself (no registration needed).

    ``prompts``: lists of token ids; or a tokenizer's batch, ``input_ids``
    ``[B, L]`` with its ``attention_mask`` (either padding side), given as
    ``prompts=enc`` or ``prompts=enc["input_ids"], attention_mask=...``
    (:mod:`batchspec.inputs`: pads are dropped, never read as prompt tokens).

    Greedy output equals, token for token, the target's own batch-1 greedy
    ``generate`` of each prompt, cut after the first EOS. ``check_invariants``:
    ``False``; ``True`` (raise :class:`InvariantViolation` at the first
    violation: I1–I8, cache contents by provenance fingerprints);
    ``"structural"`` (I1–I5 only, no history); ``"semantic"`` (also recompute
    every cached key/value with a fresh forward); ``"record"`` (the checks of
    ``True``, every violation collected in ``result.violations``, run to the
    end). ``window_size`` and
    ``sort_by_length`` (default True) apply to ``method="exspec"`` only;
    given to another method they raise. Every mistake raises ``ValueError`` or
    ``TypeError`` before any model runs (``docs/errors.md``). ``num_draft_tokens``: an int ``k``
    (``Fixed(k)``), or a draft policy (Spec §4.2): ``"auto"`` (or an
    ``Auto()``) chooses ``k'`` per round from forward costs measured before
    decoding and the running acceptance (Spec §4.2.2); pass one ``Auto()``
    to many calls and it measures each shape once; the name ``"auto"``
    keeps its measurements on the target model
    (``target.batchspec_calibrations``), so repeated calls measure once too. ``"confident"`` (or a
    ``Confident(threshold, k_max)``) keeps drafting while the draft is
    confident (Spec §4.2.3). Each round's record (``result.stats.per_round``)
    says the ``k'`` it drafted; ``result.stats.draft_policy`` what the
    policy did. The default stays a fixed ``k`` (5) although ``"auto"``
    measured fastest over both benchmarked pairs (docs: Benchmarks):
    with a fixed ``k`` the schedule (calls, trace, statistics) is a function
    of the inputs alone, which traces, tutorials and conformance vectors rely
    on, where ``"auto"``'s choices follow the machine's measured costs; and
    every method takes an int, where the baselines take no policy, so a
    default of ``"auto"`` would refuse ``method="masking"`` and the others.

    ``do_sample=True`` (eqspec, exspec, autoregressive) samples from the
    target warped by ``temperature``, ``top_k`` and ``top_p`` (transformers'
    warpers, applied to both models) with speculative sampling (Spec §4.3.2):
    each request's output is a deterministic function of its prompt and its
    key (``seed`` an int, or one per prompt), the same at every batch size,
    ``k``, method and window, and distributed as the warped target's
    sampling (Spec §5.5).
    """
    prompts = as_prompts(target, prompts, attention_mask)
    sampling = dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    policy = as_policy(num_draft_tokens)  # the one conversion of an int or a name (Spec §4.2)
    policy = by_name(num_draft_tokens, policy, target)  # "auto" by name: calibrations kept on the target
    eos = validate(target, draft, prompts, method, METHODS, policy, max_new_tokens,
                   batch_size, eos_token_id, check_invariants, window_size=window_size,
                   sort_by_length=sort_by_length)
    keys = validate_sampling(method, METHODS, prompts=prompts, **sampling)
    name, spec = method_spec(method, METHODS)
    models = Models(target, draft if spec.needs_draft else None)
    stats = Stats(name)
    policy = start(models, policy, batch_size or max(len(prompts), 1), stats.calibrations.append,
                   budget=None if name == "exspec" else max_new_tokens,  # EXSPEC refills: no slowest row to wait for
                   width=max(map(len, prompts), default=0))
    if policy.k_max == 0:  # plain decoding: auto expects no drafting to pay here (stats say why)
        models = Models(target, None)
    config = DecodeConfig(
        k=policy, max_new_tokens=max_new_tokens,
        eos=torch.tensor(eos, dtype=torch.long, device=target.device) if eos else None,
        batch_size=batch_size or max(len(prompts), 1), window_size=window_size,
        sort_by_length=sort_by_length is not False,
        sampler=None if keys is None else Sampler(Warping(float(temperature), top_k, top_p), dict(enumerate(keys))))
    oracle, ledger = checks(check_invariants, target, draft)
    found, outputs = [], {}
    began = time.perf_counter()
    with torch.no_grad():
        for decoder in spec.decoders(models, prompts, config):
            outputs.update(drive(decoder, stats, check_invariants, oracle, found, target.device, ledger))
    stats.wall_seconds = time.perf_counter() - began
    stats.draft_policy = policy.describe()
    sequences = [outputs[r].tokens for r in range(len(prompts))]
    stats.generated_tokens = sum(map(len, sequences))
    # with nothing to generate no row runs, and every row stopped at its budget
    stops = [outputs[r].stop or ("length" if max_new_tokens == 0 else None) for r in range(len(prompts))]
    return GenerationResult(sequences, stats, stops, found)

