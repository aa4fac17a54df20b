"""The committed default pair reproduces the figures of its model card.

Everything is computed in float32 on the committed held-out sample (64 windows
of 256 bytes), which ``card.json["test_sample"]`` records figures for exactly.
Tolerances: CPU float32 results differ between machines and BLAS builds only in
the last bits, far below 0.005 bits/byte; 0.003 in greedy agreement is about
50 of the 16,320 scored positions, which only near-ties can flip. A wrong,
retrained or mis-loaded weight file moves these figures by far more.
"""

from __future__ import annotations

import pytest
import torch

from batchspec.models import bytes as byte_tokens
from batchspec.models import default_pair, pair_metrics, stdlib_corpus

BPB_TOLERANCE = 0.005
AGREEMENT_TOLERANCE = 0.003


@pytest.fixture(scope="module")
def card():
    return default_pair.load_card()


@pytest.fixture(scope="module")
def scores():
    torch.manual_seed(0)
    target, draft = default_pair.load_default_pair(torch.float32)
    sample = default_pair.held_out_sample()
    return pair_metrics.score_windows(target, sample), pair_metrics.score_windows(draft, sample)


def test_held_out_sample_shape_matches_card(card):
    sample = default_pair.held_out_sample()
    assert sample.dtype == torch.long
    assert tuple(sample.shape) == (card["test_sample"]["windows"], card["test_sample"]["window_bytes"])
    assert 0 <= sample.min().item() and sample.max().item() < byte_tokens.VOCAB_SIZE


@pytest.mark.slow
def test_bits_per_byte_match_card(card, scores):
    target, draft = scores
    expected = card["test_sample"]["bits_per_byte"]
    assert target.nll_bits.numel() == card["test_sample"]["predicted_bytes"]
    assert pair_metrics.bits_per_byte(target) == pytest.approx(expected["target"], abs=BPB_TOLERANCE)
    assert pair_metrics.bits_per_byte(draft) == pytest.approx(expected["draft"], abs=BPB_TOLERANCE)


@pytest.mark.slow
def test_greedy_agreement_matches_card(card, scores):
    target, draft = scores
    expected = card["test_sample"]["greedy_agreement"]
    assert pair_metrics.greedy_agreement(target, draft) == pytest.approx(expected, abs=AGREEMENT_TOLERANCE)


def test_target_is_clearly_stronger_than_draft(scores):
    target, draft = scores
    assert pair_metrics.bits_per_byte(target) < pair_metrics.bits_per_byte(draft) - 0.2


def test_loaded_architecture_matches_card(card):
    target, draft = default_pair.load_default_pair(torch.float32)
    for name, model in (("target", target), ("draft", draft)):
        sizes = card["models"][name]
        assert model.config.vocab_size == byte_tokens.VOCAB_SIZE
        assert model.config.num_hidden_layers == sizes["layers"]
        assert model.config.hidden_size == sizes["hidden"]
        assert sum(p.numel() for p in model.parameters()) == sizes["params"]
        assert model.config._attn_implementation == "sdpa"
        assert not model.training


def test_recorded_held_out_files_follow_the_split_rule(card):
    held = card["data"]["held_out_file_list"]
    assert len(held) == card["data"]["held_out_files"]
    assert all(stdlib_corpus.is_held_out(path) for path in held)


def test_bytes_round_trip():
    text = "def f(x):\n    return 'é' + x  # ünïcode\n"
    ids = byte_tokens.encode(text)
    assert ids[:4] == [100, 101, 102, 32]
    assert byte_tokens.encode("é") == [0xC3, 0xA9]
    assert byte_tokens.decode(ids) == text
    assert byte_tokens.decode([0xC3]) == "\ufffd"  # a cut multi-byte character does not raise
    assert byte_tokens.EOS_TOKEN_ID is None
