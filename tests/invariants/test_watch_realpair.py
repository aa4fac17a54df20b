"""``watch`` on a real pretrained pair: silent on correct decoders, and watching changes nothing (Spec §3.12).

Opt-in, like tests/reference/test_realpair.py: it needs the fetched
Qwen2.5-Coder pair (1.5B target, 0.5B draft; about 10 GB of RAM in float32)
and minutes on a 2-core CPU::

    batchspec models fetch qwen2.5-coder
    pytest -m realpair tests/invariants/test_watch_realpair.py -rA

The pair runs in float32, where a batch's rounding may differ from batch 1's,
so the outputs are compared with the same decoder's unwatched run, not with
batch-1 greedy (``benchmarks/watch_real_pair.py`` measures that and the
check's cost). What is asserted: no violation on a correct decoder, and the
same tokens watched as unwatched. Then the other side, on the same pair: a
decoder that commits an unverified token is caught at a forward call.
"""

from __future__ import annotations

import gc

import pytest
import torch
from _realpair import opt_in

import batchspec
from batchspec.examples import outside_decoder
from batchspec.invariants import InvariantViolation, watch
from batchspec.models import registry
from batchspec.viz.setup import prompts_for

pytestmark = pytest.mark.realpair

HOW = "run `batchspec models fetch qwen2.5-coder` then `pytest -m realpair tests/invariants/test_watch_realpair.py`"
NEW = 16


@pytest.fixture(scope="module")
def pair(request):
    opt_in(request, HOW)
    torch.set_num_threads(2)
    target, draft, tokenizer = registry.load_pair("qwen2.5-coder", torch.float32)
    # every end-of-text id the pair has (as tests/reference/test_realpair.py reads them): rows stop at either
    eos = sorted({target.generation_config.eos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id} - {None})
    yield target, draft, prompts_for("qwen2.5-coder", 4, tokenizer=tokenizer), eos, tokenizer.pad_token_id
    del target, draft
    gc.collect()


def cut(rows, eos):
    return [next((r[: j + 1] for j, t in enumerate(r) if t in eos), r) for r in rows]


@torch.no_grad()
def hf(model, prompts, pad, eos, new=NEW, **extra):
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=pad,
                         eos_token_id=eos, **extra)
    return cut(out[:, width:].tolist(), eos)


def paths(target, draft, pad, eos):
    return {
        "generate": lambda ps: hf(target, ps, pad, eos),
        "static": lambda ps: hf(target, ps, pad, eos, cache_implementation="static"),
        "assisted": lambda ps: [hf(target, [p], pad, eos, assistant_model=draft)[0] for p in ps[:2]],
        "eqspec": lambda ps: cut(batchspec.generate(target, draft, ps, num_draft_tokens=4, max_new_tokens=NEW,
                                                    batch_size=len(ps), eos_token_id=eos).sequences, eos),
        "outside": lambda ps: cut(outside_decoder.decode(target, draft, ps, 4, NEW), eos),
    }


@pytest.mark.parametrize("path", ["generate", "static", "assisted", "eqspec", "outside"])
def test_watch_is_silent_on_correct_decoders_and_changes_nothing(pair, path):
    target, draft, prompts, eos, pad = pair
    decode = paths(target, draft, pad, eos)[path]
    plain = decode(prompts)
    watched = dict(target=target) if path in ("generate", "static") else dict(target=target, draft=draft)
    with watch(check="record", **watched) as w:
        got = decode(prompts)
        w.outputs(prompts[: len(got)], got, max_new_tokens=NEW, eos_token_id=eos)
    assert w.violations == [], w.report()
    assert got == plain and w.calls >= NEW // 2


def test_transformers_assistant_hides_a_generated_pad_id_from_its_draft(pair):
    """A finding on this pair: its generation config ends text at ``<|im_end|>`` only, and
    the target, continuing ``import os / for name in os.listdir(``, writes the pad id
    ``<|endoftext|>`` at its 19th new token. transformers calls the assistant without a
    mask, derives one from ``input_ids != pad_token_id`` and so masks that committed
    token out of the draft's every later call. The output is still the target's (the
    target's calls are right); the draft's calls are flagged, with that cause."""
    target, draft, prompts, eos, pad = pair
    only = [int(target.generation_config.eos_token_id)]
    assert pad not in only
    plain = hf(target, prompts[1:2], pad, only, new=24)
    assert pad in plain[0]  # the target's own output holds the pad id
    with watch(check="record", target=target, draft=draft) as w:
        got = hf(target, prompts[1:2], pad, only, new=24, assistant_model=draft)
        w.outputs(prompts[1:2], got, max_new_tokens=24, eos_token_id=only)
    assert got == plain and w.violations
    assert {v.model for v in w.violations} == {"draft"}
    assert all("a mask derived from token values hides every token equal to the pad id" in v.detail
               for v in w.violations)


def test_committing_rejected_drafts_is_caught_at_a_forward_call(pair):
    """The other side, on the same pair: the outside decoder committing its rejected drafts
    (``bug="rejected"``) is flagged at a forward call, before any ``w.outputs``: the
    next target call attends from its cache a token the target had chosen against."""
    target, draft, prompts, eos, pad = pair
    with pytest.raises(InvariantViolation, match="on a stream the target rejected"):
        with watch(target=target, draft=draft):
            outside_decoder.decode(target, draft, prompts, 4, NEW, bug="rejected")
