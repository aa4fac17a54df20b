"""The call log that C2's trace reads (Spec §3.12.3): stored by difference, read back whole."""

import pytest
import torch

import _bug_decoders as bugs
from batchspec.examples import outside_decoder as outside
from _broken_helpers import K, N, WITH_PAD_ID, pair

import batchspec
from batchspec.invariants import watch
from batchspec.invariants.calllog import CallLog

DECODERS = {
    "eqspec": lambda t, d: batchspec.generate(t, d, WITH_PAD_ID, num_draft_tokens=K, max_new_tokens=N,
                                              check_invariants=False).sequences,
    "outside": lambda t, d: outside.decode(t, d, WITH_PAD_ID, K, N),
    **{layout: (lambda layout: lambda t, d: bugs.decode(t, d, WITH_PAD_ID, K, N, layout=layout))(layout)
       for layout in bugs.LAYOUTS},
}


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_the_log_reads_back_every_call_as_it_was(decoder, monkeypatch):
    """Each call's chain hashes and mask, read back from the log, are the ones the
    call had: whether it appended to its model's previous call, changed its mask
    (holes), or realigned its rows (kept as each row's length)."""
    seen, append = [], CallLog.append

    def spy(self, number, model, node, attended, n, *hints):
        seen.append((number, model, node.clone(), attended.clone(), n, len(hints) > 1 and hints[1] is not None,
                     len(hints) > 2 and hints[2] is not None))
        append(self, number, model, node, attended, n, *hints)

    monkeypatch.setattr(CallLog, "append", spy)
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft) as w:
        DECODERS[decoder](target, draft)
    logged = list(w.history.log)
    assert len(logged) == len(seen) == w.calls
    for (number, model, node, attended, n), (number2, model2, node2, attended2, n2, *_) in zip(logged, seen):
        assert (number, model, n) == (number2, model2, n2)
        assert torch.equal(node, node2) and torch.equal(attended, attended2), (decoder, number)
    if decoder in ("eqspec", "outside", "repad"):  # decoders that realign: some calls kept by length
        assert any(moved for *_, moved, _listed in seen)
    assert any(listed for *_, listed in seen)  # calls of few inputs, kept as the list of their nodes (.small)


@pytest.mark.parametrize("decoder", ["outside", "right_holes"])
def test_the_log_keeps_no_tensor_after_each_models_first_call(decoder):
    """What the log keeps of a call after its model's first is Python lists: thousands of
    small tensors living as long as the run, between the decoder's large transient
    ones, keep the C heap from shrinking (the design notes give the peaks)."""
    target, draft = pair("qwen3")
    with watch(target=target, draft=draft) as w:
        DECODERS[decoder](target, draft)
    first, kinds = set(), set()
    for number, model, kept, node, attended, n in w.history.log._entries:
        if model not in first:
            first.add(model)
            continue
        parts = (node, attended) + (kept if isinstance(kept, tuple) else ())
        assert not any(isinstance(p, torch.Tensor) for p in parts), (decoder, number)
        kinds.add("moved" if isinstance(kept, tuple) else "listed" if attended is None else "changed")
    assert kinds == ({"moved", "listed"} if decoder == "outside" else {"changed", "listed"}), kinds
