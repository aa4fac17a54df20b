"""batchspec's own API takes what a tokenizer returns: ``input_ids`` with an
``attention_mask`` (either padding side) read into prompts without the pads
(Spec §2.1), and a padded tensor without its mask refused before any model runs."""

from __future__ import annotations

import pytest
import torch

import batchspec
from batchspec.inputs import read_rows
from batchspec.scheduler import Scheduler

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12], [13]]


def padded(side: str):
    width = max(map(len, PROMPTS))
    ids, mask = torch.zeros(len(PROMPTS), width, dtype=torch.long), torch.zeros(len(PROMPTS), width, dtype=torch.long)
    for i, p in enumerate(PROMPTS):
        cols = slice(width - len(p), width) if side == "left" else slice(0, len(p))
        ids[i, cols], mask[i, cols] = torch.tensor(p), 1
    return ids, mask


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_is_read_into_its_prompts(side):
    ids, mask = padded(side)
    rows = read_rows(ids, mask)
    assert rows.prompts == PROMPTS and rows.length.tolist() == [3, 5, 1]
    assert rows.start.tolist() == ([2, 0, 4] if side == "left" else [0, 0, 0])


def test_a_left_padded_tensor_batch_equals_plain_generate_row_for_row(pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded("left")
    plain = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, eos_token_id=None)
    for prompts in ({"input_ids": ids, "attention_mask": mask}, ids):  # a tokenizer's mapping, or the tensor
        given = {} if isinstance(prompts, dict) else {"attention_mask": mask}
        result = batchspec.generate(target, draft, prompts, max_new_tokens=8, **given)
        assert result.sequences == plain[:, ids.shape[1]:].tolist()
    right, right_mask = padded("right")
    assert batchspec.generate(target, draft, right, attention_mask=right_mask, max_new_tokens=8).sequences == \
        plain[:, ids.shape[1]:].tolist()


def test_the_tolist_trap_is_refused_with_the_right_call(pairs):
    """Regression: ``.tolist()`` of a left-padded batch ran, read the pads as prompt
    tokens and changed the padded rows' outputs."""
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded("left")
    with_pads = batchspec.generate(target, draft, ids.tolist(), max_new_tokens=8).sequences
    assert with_pads != batchspec.generate(target, draft, ids, attention_mask=mask, max_new_tokens=8).sequences
    with pytest.raises(ValueError, match=r"a tensor holding the pad id 0 and no attention_mask.*"
                                         r"attention_mask=enc\['attention_mask'\]"):
        batchspec.generate(target, draft, ids, max_new_tokens=8)
    unpadded = torch.tensor([[5, 6, 7], [8, 9, 10]])  # no pad id in it: every slot is a prompt token
    assert batchspec.generate(target, draft, unpadded, max_new_tokens=4).sequences == \
        batchspec.generate(target, draft, unpadded.tolist(), max_new_tokens=4).sequences


@pytest.mark.parametrize("mask, message", [
    (torch.tensor([[1, 0, 1]]), "row 0 has zeros between its ones"),
    (torch.tensor([[0, 0, 0]]), "row 0 has no prompt token"),
    (torch.tensor([[1, 2, 1]]), "only 0 (pad) and 1"),
    (torch.tensor([[1, 1]]), "of input_ids' shape (1, 3), got (1, 2)"),
])
def test_masks_that_are_not_one_sided_padding(mask, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_rows(torch.tensor([[5, 6, 7]]), mask)


def test_the_scheduler_takes_one_row_with_its_mask(pairs):
    target, draft = pairs("llama", "perturbed")
    ids, mask = padded("left")
    scheduler = Scheduler(target, draft, batch_size=2, max_new_tokens=6)
    requests = [scheduler.submit(row, attention_mask=m) for row, m in zip(ids, mask)]
    assert [list(scheduler.requests[r].prompt) for r in requests] == PROMPTS
    done = scheduler.run()
    assert [done[r].tokens for r in requests] == batchspec.generate(target, draft, PROMPTS, max_new_tokens=6).sequences
    with pytest.raises(ValueError, match="submit takes one prompt, got 3 rows; submit each"):
        scheduler.submit(ids, attention_mask=mask)
    with pytest.raises(ValueError, match="a tensor holding the pad id 0"):
        scheduler.submit(ids[0])
