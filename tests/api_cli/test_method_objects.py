"""``generate`` takes a :class:`~batchspec.Method` itself, unregistered.

A fault (``faults.run``) or a trace (``trace.record``) hands its own method
object to ``generate``; nothing is added to the global ``METHODS`` and taken
out again, and validation messages name only registered methods.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import batchspec
from batchspec import faults, trace
from batchspec.methods import METHODS, Method

PROMPTS = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
OPTIONS = dict(num_draft_tokens=2, max_new_tokens=5)


def test_generate_runs_a_method_object_as_its_registered_twin(pairs):
    target, draft = pairs("llama")
    before = dict(METHODS)
    own = replace(METHODS["eqspec"], name="my eqspec")
    result = batchspec.generate(target, draft, PROMPTS, method=own, check_invariants=True, **OPTIONS)
    named = batchspec.generate(target, draft, PROMPTS, method="eqspec", **OPTIONS)
    assert result.sequences == named.sequences and result.stats.method == "my eqspec"
    assert METHODS == before


def test_a_method_object_is_validated_by_its_own_capabilities(pairs):
    target, draft = pairs("llama")
    plain = Method(METHODS["eqspec"].decoders, needs_draft=True, name="plain")  # no options, cannot sample
    with pytest.raises(ValueError, match=r"window_size applies to method 'exspec' only, not 'plain'"):
        batchspec.generate(target, draft, PROMPTS, method=plain, window_size=8, **OPTIONS)
    with pytest.raises(ValueError, match=r"do_sample: method 'plain' cannot sample"):
        batchspec.generate(target, draft, PROMPTS, method=plain, do_sample=True, **OPTIONS)
    with pytest.raises(ValueError, match=r"draft: method 'plain' needs a draft model"):
        batchspec.generate(target, None, PROMPTS, method=plain, **OPTIONS)


def test_faults_and_traces_leave_the_registry_as_it_was(pairs):
    target, draft = pairs("llama")
    before = dict(METHODS)
    fault = next(iter(faults.CATALOGUE))
    result = faults.run(fault, target, draft, PROMPTS, **OPTIONS)
    assert METHODS == before and result.stats.method == f"fault:{fault}"
    recorded = trace.record(target, draft, PROMPTS, "eqspec", **OPTIONS)
    assert METHODS == before and recorded.generation.stats.method == "trace:eqspec"
    trace.record(target, draft, PROMPTS, fault=fault, **OPTIONS)
    assert METHODS == before
