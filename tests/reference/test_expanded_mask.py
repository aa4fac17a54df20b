"""The mask as attention reads it (Spec §2.4): after prefill a call's
``[B, T + n]`` mask goes to the model as the ``[B, 1, n, T + n]`` boolean
tensor transformers would otherwise rebuild at every call. Same logits, bit
for bit, on every family; left as it is where that would be wrong or
useless; read back by ``watch``. About 3 s."""

from __future__ import annotations

import pytest
import torch

from batchspec.invariants.masks import key_mask
from batchspec.models import tiny
from batchspec.reference.model_call import expanded_mask, run_forward
from batchspec.reference.state import attention_mask, content_index
from batchspec.reference.storage import new_cache


def test_the_expansion_is_the_padding_mask_made_causal():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    four = expanded_mask(mask, 2)
    assert four.shape == (3, 1, 2, 5) and four.dtype == torch.bool
    assert four[0, 0].long().tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert four[1, 0].long().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert torch.equal(key_mask(four, "target"), mask)  # watch reads it back


def test_no_padding_or_a_masked_input_keeps_the_two_dimensional_mask():
    ones = torch.ones(2, 6, dtype=torch.long)
    assert expanded_mask(ones, 3) is ones  # transformers drops an all-ones mask: nothing to save
    masked_input = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])  # an input that attends nothing: NaN in SDPA
    assert expanded_mask(masked_input, 2) is masked_input


def test_watch_refuses_a_four_dimensional_mask_it_cannot_read_as_one_row_each():
    mask = expanded_mask(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]), 2).clone()
    mask[0, 0, 0, 3] = True  # the first input sees the second: not causal
    with pytest.raises(ValueError, match="not one row mask per sequence made causal"):
        key_mask(mask, "draft")
    additive = torch.where(expanded_mask(torch.tensor([[0, 1, 1]]), 1), 0.0, float("-inf"))
    assert key_mask(additive, "draft").tolist() == [[0, 1, 1]]


@pytest.mark.parametrize("family", sorted(tiny.FAMILIES))
def test_every_family_gives_the_same_logits_bit_for_bit(pairs, family):
    """A padded batch prefilled, then a call of 3 inputs per row: once with
    the ``[B, T + n]`` mask given to the model as it is (transformers builds
    the 4D one), once through ``run_forward`` (which passes the expansion)."""
    target, _ = pairs(family, "self")
    pad, width, n = torch.tensor([3, 0, 5]), 9, 3
    ids = torch.randint(2, tiny.VOCAB, (3, width + n), generator=torch.Generator().manual_seed(1))
    logits = []
    for expand in (False, True):
        cache = new_cache(target)
        run_forward(target, cache, ids[:, :width], attention_mask(pad, width), content_index(pad, 0, width), 1)
        mask, positions = attention_mask(pad, width + n), content_index(pad, width, width + n)
        assert expanded_mask(mask, n).dim() == 4  # padded, every input attended: expanded
        if expand:
            logits.append(run_forward(target, cache, ids[:, width:], mask, positions))
        else:
            with torch.no_grad():
                logits.append(target(input_ids=ids[:, width:], attention_mask=mask, position_ids=positions,
                                     cache=cache, use_cache=True).logits)
    assert torch.equal(logits[0], logits[1])
