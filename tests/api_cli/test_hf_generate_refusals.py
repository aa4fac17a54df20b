"""What batchspec.hf cannot honour is refused in one line naming the argument,
before any forward call of either model (counted by forward hooks)."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers as tf
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteriaList
from transformers.generation.stopping_criteria import MaxTimeCriteria
from transformers.generation.streamers import BaseStreamer

from batchspec import hf


class Counter:
    """Forward calls of ``models``, counted by pre-hooks."""

    def __init__(self, *models):
        self.calls = 0
        self.handles = [m.register_forward_pre_hook(self.count) for m in models]

    def count(self, module, args):
        self.calls += 1

    def remove(self):
        for handle in self.handles:
            handle.remove()


def refused(models, call) -> str:
    """The one-line message ``call`` raised, after checking that no model ran."""
    counter = Counter(*models)
    try:
        with pytest.raises(ValueError) as error:
            call()
    finally:
        counter.remove()
    assert counter.calls == 0, f"{counter.calls} forward calls before the refusal"
    message = str(error.value)
    assert "\n" not in message
    return message


class Shift(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores + 1


def batch():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10], [0, 11, 12, 13]])
    return dict(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=4)


REFUSALS = [
    ({"num_beams": 2}, "num_beams: 2 is not honoured by batchspec; beam search"),
    ({"do_sample": True, "num_return_sequences": 2}, "num_return_sequences: 2 is not honoured by batchspec; repeat the prompt"),
    ({"repetition_penalty": 1.3}, "repetition_penalty: RepetitionPenaltyLogitsProcessor would change"),
    ({"no_repeat_ngram_size": 2}, "no_repeat_ngram_size: NoRepeatNGramLogitsProcessor"),
    ({"min_new_tokens": 2}, "min_length / min_new_tokens: MinLengthLogitsProcessor would change"),
    ({"suppress_tokens": [3]}, "suppress_tokens: SuppressTokensLogitsProcessor"),
    ({"do_sample": True, "min_p": 0.1}, "min_p: MinPLogitsWarper"),
    ({"logits_processor": LogitsProcessorList([Shift()])}, "logits_processor: Shift would change"),
    ({"max_time": 5.0}, "max_time: MaxTimeCriteria: batchspec stops at max_new_tokens and eos_token_id only"),
    ({"stopping_criteria": StoppingCriteriaList([MaxTimeCriteria(9.0)])}, "max_time: MaxTimeCriteria"),
    ({"output_scores": True, "return_dict_in_generate": True}, "output_scores: True is not honoured"),
    ({"output_logits": True, "return_dict_in_generate": True}, "output_logits: True is not honoured"),
    ({"cache_implementation": "static"}, "cache_implementation: 'static' is not honoured"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha: 0.6 is not honoured"),
    ({"prompt_lookup_num_tokens": 3}, "prompt_lookup_num_tokens: 3 is not honoured"),
    ({"num_assistant_tokens_schedule": "sometimes"}, "num_assistant_tokens_schedule: 'sometimes' is unknown"),
]


@pytest.mark.parametrize("options, message", REFUSALS, ids=[m.split(":")[0] for _, m in REFUSALS])
@pytest.mark.parametrize("form", ["folder", "callable"])
def test_refused_before_any_forward(options, message, form, pairs):
    target, draft = pairs("llama", "perturbed")
    door = dict(assistant_model=draft, custom_generate=hf.HUB, trust_remote_code=True) if form == "folder" \
        else dict(draft=draft, custom_generate=hf.generate)
    assert message in refused([target, draft], lambda: target.generate(**batch(), **door, **options))


def test_a_callable_without_a_draft_is_an_error_never_a_plain_decode(pairs):
    target, draft = pairs("llama", "perturbed")
    message = refused([target, draft], lambda: target.generate(**batch(), assistant_model=draft,
                                                               custom_generate=hf.generate))
    assert message.startswith("draft: no draft model arrived") and "draft=assistant" in message


def test_an_assistant_with_another_tokenizer(pairs):
    target, draft = pairs("llama", "perturbed")
    other = copy.deepcopy(draft)
    other.resize_token_embeddings(100)
    message = refused([target, other], lambda: target.generate(**batch(), assistant_model=other,
                                                               custom_generate=hf.HUB, trust_remote_code=True))
    assert message.startswith("assistant_model: vocabulary of 100 ids, the target's 96")
    message = refused([target, draft], lambda: target.generate(
        **batch(), assistant_model=draft, assistant_tokenizer=object(), tokenizer=object(),
        custom_generate=hf.HUB, trust_remote_code=True))
    assert message.startswith("assistant_tokenizer: an assistant with another tokenizer")


def test_an_encoder_decoder_model():
    config = tf.T5Config(vocab_size=96, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
                         decoder_start_token_id=0)
    t5 = tf.T5ForConditionalGeneration(config).eval()
    message = refused([t5, t5.encoder], lambda: t5.generate(**batch(), assistant_model=t5, custom_generate=hf.HUB,
                                               trust_remote_code=True))
    assert message.startswith("model: T5ForConditionalGeneration is an encoder-decoder model")


def test_a_streamer_above_batch_one_and_a_filled_cache(pairs):
    target, draft = pairs("llama", "perturbed")
    message = refused([target, draft], lambda: target.generate(
        **batch(), assistant_model=draft, streamer=BaseStreamer(), custom_generate=hf.HUB, trust_remote_code=True))
    assert message.startswith("streamer: rows commit different numbers of tokens per round, at batch 3")
    cache = tf.DynamicCache(config=target.config)
    with torch.no_grad():
        target(torch.tensor([[5, 6]]), cache=cache)
    message = refused([target, draft], lambda: target.generate(
        input_ids=torch.tensor([[5, 6, 7]]), cache=cache, max_new_tokens=3, custom_generate=hf.generate,
        draft=draft))
    assert message.startswith("past_key_values: batchspec decodes from the prompt")


def test_rows_padded_on_both_sides(pairs):
    target, draft = pairs("llama", "perturbed")
    ids = torch.tensor([[0, 5, 6], [7, 8, 0]])
    message = refused([target, draft], lambda: target.generate(
        input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=3, custom_generate=hf.generate,
        draft=draft))
    assert message.startswith("attention_mask: some rows are padded on the left and others on the right")
