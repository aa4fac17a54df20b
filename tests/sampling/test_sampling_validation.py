"""Bad sampling arguments raise a ValueError naming the argument, before any
model runs (Spec §4.3.2); good ones are accepted."""

from __future__ import annotations

import pytest

import batchspec


class Spy:
    """Counts forward calls of a model."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, *_):
        self.calls += 1


S = {"do_sample": True}
CASES = [
    ({**S, "temperature": 0}, "temperature"),
    ({**S, "temperature": -0.5}, "temperature"),
    ({**S, "temperature": float("nan")}, "temperature"),
    ({**S, "temperature": "hot"}, "temperature"),
    ({**S, "top_p": 0}, "top_p"),
    ({**S, "top_p": 1.5}, "top_p"),
    ({**S, "top_p": -0.1}, "top_p"),
    ({**S, "top_k": 0}, "top_k"),
    ({**S, "top_k": 2.5}, "top_k"),
    ({**S, "seed": 1.5}, "seed"),
    ({**S, "seed": "7"}, "seed"),
    ({**S, "seed": True}, "seed"),
    ({**S, "seed": [1, 2]}, "seed: 2 seeds for 1 prompts"),
    ({**S, "seed": [None]}, r"seed\[0\]"),
    ({**S, "method": "masking"}, "do_sample: method 'masking' cannot sample"),
    ({**S, "method": "rollback"}, "do_sample: method 'rollback' cannot sample"),
    ({"do_sample": "yes"}, "do_sample"),
]


@pytest.mark.parametrize("change,needle", CASES, ids=[str(i) for i in range(len(CASES))])
def test_bad_sampling_argument_named(pairs, change, needle):
    target, draft = pairs("llama", "perturbed")
    spies = [Spy(target), Spy(draft)]
    try:
        with pytest.raises(ValueError, match=needle):
            batchspec.generate(target, draft, [[3, 4, 5]], **change)
    finally:
        for spy in spies:
            spy.handle.remove()
    assert [spy.calls for spy in spies] == [0, 0]


def test_good_sampling_arguments(pairs):
    target, draft = pairs("llama", "perturbed")
    for extra in ({"top_p": 1.0, "top_k": 1}, {"temperature": 3, "seed": [5]}, {"seed": 2**70}):
        result = batchspec.generate(target, draft, [[3, 4, 5]], max_new_tokens=3, do_sample=True, **extra)
        assert len(result.sequences[0]) == 3


def test_top_k_one_is_greedy(pairs, greedy_reference):
    """top_k = 1 leaves one token of mass 1 in p and q: sampling becomes greedy."""
    target, draft = pairs("llama", "perturbed")
    result = batchspec.generate(target, draft, [[3, 4, 5]], max_new_tokens=8, do_sample=True, top_k=1)
    assert result.sequences == [greedy_reference(target, [3, 4, 5], 8)]


def test_greedy_accepts_temperature_zero_and_checks_the_rest(pairs, greedy_reference):
    """``temperature=0`` is the usual way to ask for greedy; a wrong top-k,
    top-p or seed is a mistake with or without do_sample."""
    target, draft = pairs("llama", "perturbed")
    result = batchspec.generate(target, draft, [[3, 4, 5]], max_new_tokens=6, temperature=0)
    assert result.sequences == [greedy_reference(target, [3, 4, 5], 6)]
    for bad, needle in (({"top_p": 7}, "top_p"), ({"top_k": 0}, "top_k"), ({"seed": "x"}, "seed")):
        with pytest.raises(ValueError, match=needle):
            batchspec.generate(target, draft, [[3, 4, 5]], max_new_tokens=6, **bad)
