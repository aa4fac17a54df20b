"""transformers' ``generate`` with ``custom_generate`` (batchspec.hf): the same
tensor as the target's plain greedy ``generate`` (Spec §5.2), at batch 1, 3
and 8, left and right padding, with and without EOS hits, on tiny float64
pairs (Llama, GPT-2, Qwen3) and on the embedded default pair in float64."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer

import batchspec
from batchspec import hf
from batchspec.hf_refusals import ASSISTED_DEFAULTS
from batchspec.models.default_pair import held_out_sample, load_default_pair

LENGTHS = {1: [7], 3: [5, 9, 3], 8: [4, 11, 6, 2, 9, 7, 3, 10]}
NEW = 12


@pytest.fixture(scope="module")
def default_pair():
    return load_default_pair(torch.float64)


def models(name, pairs, default_pair):
    return default_pair if name == "default" else pairs(name, "perturbed")


def padded(target, lengths, side, seed=0):
    """``(input_ids, attention_mask)`` ``[B, W]``: random prompts padded on ``side`` with pad id 0."""
    vocab = target.config.vocab_size
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    if vocab == 256:  # the default pair: windows of held-out Python source, as it was trained on
        text = held_out_sample()[seed % 64]
        rows = [text[8 * i:8 * i + n] for i, n in enumerate(lengths)]
    else:
        g = torch.Generator().manual_seed(seed)
        rows = [torch.randint(2, vocab, (n,), generator=g) for n in lengths]
    for i, (row, n) in enumerate(zip(rows, lengths)):
        cols = slice(width - n, width) if side == "left" else slice(0, n)
        ids[i, cols], mask[i, cols] = row, 1
    return ids, mask


def plain(target, ids, mask, side, **options):
    """Plain ``generate``: batched on left padding; on right padding each row
    alone (plain ``generate`` would continue after the pads), laid out with its
    continuation after its prompt and pad id 0 to the common width."""
    if side == "left":
        return target.generate(input_ids=ids, attention_mask=mask, **options)
    alone = [target.generate(input_ids=row[m == 1][None], **options)[0] for row, m in zip(ids, mask)]
    width = ids.shape[1] + max(len(a) - int(m.sum()) for a, m in zip(alone, mask))
    return torch.stack([torch.cat([a, a.new_zeros(width - len(a))]) for a in alone])


def eos_for(target, ids, mask, hit: bool):
    """An EOS id that the first row's continuation holds (``hit``), or one never generated."""
    if not hit:
        return 1 if target.config.vocab_size != 256 else 0  # id 0: a NUL byte, absent from Python source
    first = target.generate(input_ids=ids[:1][:, mask[0] == 1], max_new_tokens=NEW)[0, int(mask[0].sum()):]
    return int(first[3])


@pytest.mark.slow_except('eos-hit-left-3-llama', 'eos-hit-right-3-llama')
@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen3", "default"])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("hit", [False, True], ids=["no-eos-hit", "eos-hit"])
def test_same_tensor_as_plain_generate(name, batch, side, hit, pairs, default_pair):
    target, draft = models(name, pairs, default_pair)
    ids, mask = padded(target, LENGTHS[batch], side, seed=batch)
    options = dict(max_new_tokens=NEW, eos_token_id=eos_for(target, ids, mask, hit), pad_token_id=0)
    want = plain(target, ids, mask, side, **options)
    out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=draft, custom_generate=hf.HUB,
                          trust_remote_code=True, return_dict_in_generate=True, **options)
    assert out.sequences.shape == want.shape and torch.equal(out.sequences, want)
    assert ("eos" in out.stop_reasons) == hit  # the case is the one it claims to be
    assert out.stats.rounds < NEW  # speculation ran: fewer rounds than tokens


@pytest.mark.slow
@pytest.mark.parametrize("side", ["left", "right"])
def test_the_callable_form_and_exspec_give_the_same_tensor(side, pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded(target, LENGTHS[8], side, seed=5)
    options = dict(max_new_tokens=NEW, eos_token_id=eos_for(target, ids, mask, True), pad_token_id=0)
    want = plain(target, ids, mask, side, **options)
    called = target.generate(input_ids=ids, attention_mask=mask, custom_generate=hf.generate, draft=draft, **options)
    exspec = target.generate(input_ids=ids, attention_mask=mask, custom_generate=hf.generate, draft=draft,
                             method="exspec", **options)
    assert torch.equal(called, want) and torch.equal(exspec, want)


def test_max_length_and_an_eos_list_are_read(pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded(target, LENGTHS[3], "left", seed=2)
    eos = [1, eos_for(target, ids, mask, True)]
    want = target.generate(input_ids=ids, attention_mask=mask, max_length=ids.shape[1] + 9, eos_token_id=eos,
                           pad_token_id=0)
    got = target.generate(input_ids=ids, attention_mask=mask, max_length=ids.shape[1] + 9, eos_token_id=eos,
                          pad_token_id=0, custom_generate=hf.generate, draft=draft)
    assert torch.equal(got, want)


def rounds_k(target, draft, **options):
    ids, mask = padded(target, LENGTHS[3], "left", seed=4)
    out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20, custom_generate=hf.generate,
                          draft=draft, return_dict_in_generate=True, **options)
    return [r.drafted for r in out.stats.per_round]


def test_the_assisted_defaults_are_transformers_own():
    defaults = GenerationConfig._get_default_generation_params()
    assert all(defaults[field] == value for field, value in ASSISTED_DEFAULTS.items())


def fixed(ks):
    """The ``k'`` of most rounds when none drafted more (a row's remaining budget shortens a few), or None."""
    return max(ks) if 4 * ks.count(max(ks)) >= 3 * len(ks) else None


@pytest.mark.slow
def test_num_assistant_tokens_and_the_confidence_threshold_set_the_draft_length(default_pair):
    target, draft = default_pair  # a trained pair: its draft is sometimes sure, sometimes not
    default = rounds_k(target, draft)  # transformers' defaults: 20 drafts at most, stop below 0.4
    assert default == rounds_k(target, draft, num_assistant_tokens=20, assistant_confidence_threshold=0.4)
    assert max(default) <= 20 and len(set(default)) > 1
    assert fixed(rounds_k(target, draft, num_assistant_tokens=3, assistant_confidence_threshold=0)) == 3
    draft.generation_config.num_assistant_tokens = 2  # where transformers' assisted decoding reads it
    try:
        assert fixed(rounds_k(target, draft, assistant_confidence_threshold=0)) == 2
    finally:
        draft.generation_config.num_assistant_tokens = None
    assert rounds_k(target, draft, num_assistant_tokens_schedule="heuristic")  # batchspec's "auto" ran


def test_sampling_is_batchspecs_keyed_sampling_seeded_from_torch(pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded(target, LENGTHS[3], "left", seed=6)
    options = dict(input_ids=ids, attention_mask=mask, max_new_tokens=NEW, custom_generate=hf.generate,
                   draft=draft, do_sample=True, temperature=0.7, top_p=0.9, eos_token_id=None)
    keyed = target.generate(seed=11, **options)
    rows = batchspec.generate(target, draft, ids, attention_mask=mask, max_new_tokens=NEW, do_sample=True,
                              temperature=0.7, top_k=50, top_p=0.9, seed=11).sequences
    assert keyed[:, ids.shape[1]:].tolist() == rows  # transformers' default top_k=50 was read too
    torch.manual_seed(3)
    first = target.generate(**options)
    torch.manual_seed(3)
    assert torch.equal(target.generate(**options), first)
    assert not torch.equal(target.generate(**options), first)  # the next draw from torch's generator


class Recorder(BaseStreamer):
    def __init__(self):
        self.puts, self.ended = [], False

    def put(self, value):
        self.puts.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


def test_a_streamer_gets_the_prompt_then_each_rounds_tokens(pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded(target, LENGTHS[1], "left", seed=8)
    streamer = Recorder()
    out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=draft, custom_generate=hf.HUB,
                          trust_remote_code=True, streamer=streamer, max_new_tokens=NEW)
    assert streamer.ended and streamer.puts[0] == ids[0].tolist()
    assert sum(streamer.puts[1:], []) == out[0, ids.shape[1]:].tolist() and len(streamer.puts) > 2
