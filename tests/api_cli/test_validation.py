"""Bad input raises a ValueError naming the argument, before any model runs."""

from __future__ import annotations

import pytest
import torch

import batchspec
from batchspec.models import tiny
from batchspec.testing import reference_greedy


class Spy:
    """Counts forward calls of a model (and fails the test if there are any)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self.hook)

    def hook(self, *_):
        self.calls += 1


@pytest.fixture(scope="module")
def models():
    target, draft = tiny.pair("llama", "perturbed")
    return target, draft


CASES = [
    ({"prompts": [[3, 4], []]}, "prompts[1]"),
    ({"prompts": [[3, 96]]}, "prompts[0][1]"),
    ({"prompts": [[3, -1]]}, "prompts[0][1]"),
    ({"prompts": "hello"}, "prompts"),
    ({"num_draft_tokens": 0}, "num_draft_tokens"),
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"batch_size": 0}, "batch_size"),
    ({"method": "beam"}, "method"),
    ({"eos_token_id": 500}, "eos_token_id"),
    ({"eos_token_id": []}, "eos_token_id"),
    ({"check_invariants": "yes"}, "check_invariants"),
    ({"max_new_tokens": 1000}, "max_position_embeddings"),
]


@pytest.mark.parametrize("change,needle", CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_bad_argument_named(models, change, needle):
    target, draft = models
    spies = [Spy(target), Spy(draft)]
    kwargs = {"prompts": [[3, 4, 5]], **change}
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        batchspec.generate(target, draft, **kwargs)
    for spy in spies:
        spy.handle.remove()
        assert spy.calls == 0


def test_vocabulary_mismatch(models):
    target, _ = models
    other = tiny.build("llama", seed=5, dtype=torch.float64)
    other.resize_token_embeddings(tiny.VOCAB + 8)
    with pytest.raises(ValueError, match="draft: vocabulary size 104 differs from the target's 96"):
        batchspec.generate(target, other, [[3, 4]])


def test_dtype_mismatch(models):
    target, _ = models
    draft32 = tiny.build("llama", seed=9, dtype=torch.float32)
    with pytest.raises(ValueError, match="draft: dtype torch.float32"):
        batchspec.generate(target, draft32, [[3, 4]])


def test_missing_draft(models):
    with pytest.raises(ValueError, match="draft: method 'eqspec' needs a draft"):
        batchspec.generate(models[0], None, [[3, 4]])


def test_device_mismatch_is_named():
    target, draft = tiny.pair("llama", "perturbed")
    # a draft that reports another device (no second device is needed to check the message)
    draft.__class__ = type("Elsewhere", (type(draft),), {"device": property(lambda self: torch.device("meta"))})
    with pytest.raises(ValueError, match="draft: on device meta, target on cpu"):
        batchspec.generate(target, draft, [[3, 4]])


def test_eager_attention_refused():
    target = tiny.build("llama", seed=1)
    target.config._attn_implementation = "eager"
    with pytest.raises(ValueError, match="target: attn_implementation='eager'"):
        batchspec.generate(target, None, [[3, 4]], method="autoregressive")


def test_no_prompts_is_an_empty_result(models):
    result = batchspec.generate(*models, [])
    assert result.sequences == [] and result.stats.rounds == 0


# --- mistakes found trying the API as a new user; each refused before any forward ----------

def no_forward(models, call):
    """Run ``call``; return what it raised, after checking that no model ran a forward."""
    spies = [Spy(m) for m in models]
    try:
        call()
    except (ValueError, TypeError) as error:
        return error
    finally:
        for spy in spies:
            spy.handle.remove()
        assert [s.calls for s in spies] == [0] * len(spies)
    raise AssertionError("nothing was raised")


def bart():
    import transformers as tf

    config = tf.BartConfig(vocab_size=tiny.VOCAB, d_model=16, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                           decoder_ffn_dim=16, max_position_embeddings=64)
    return tf.BartForConditionalGeneration(config).eval()


def short_draft(positions: int):
    import transformers as tf

    config = tiny._config("llama", 1, 32, 4)
    config.max_position_embeddings = positions
    return tf.LlamaForCausalLM(config).to(torch.float64).eval()


def test_a_model_name_string_is_refused(models):
    target, draft = models
    error = no_forward(models, lambda: batchspec.generate("gpt2", draft, [[3, 4]]))
    assert isinstance(error, TypeError) and "target: got the string 'gpt2', not a model" in str(error)
    error = no_forward(models, lambda: batchspec.generate(target, "gpt2", [[3, 4]]))
    assert "draft: got the string 'gpt2'" in str(error)


def test_swapped_arguments_are_named(models):
    target, draft = models
    error = no_forward(models, lambda: batchspec.generate([[3, 4]], target, draft))
    assert isinstance(error, TypeError) and "arguments in the wrong order" in str(error)
    error = no_forward(models, lambda: batchspec.generate(target, draft, draft))
    assert "prompts: got a model (arguments in the wrong order" in str(error)


def test_base_model_without_lm_head_is_refused(models):
    target, draft = models
    base = target.model  # LlamaModel: the decoder without its head
    error = no_forward(models, lambda: batchspec.generate(target, base, [[3, 4]]))
    assert "draft: LlamaModel has no LM head (a base model); load it with AutoModelForCausalLM" in str(error)


def test_encoder_decoder_is_refused(models):
    model = bart()
    error = no_forward([model], lambda: batchspec.generate(model, None, [[3, 4]], method="autoregressive"))
    assert "target: BartForConditionalGeneration is an encoder-decoder model" in str(error)


def test_training_mode_is_refused(models):
    target, draft = models
    draft.train()
    try:
        error = no_forward(models, lambda: batchspec.generate(target, draft, [[3, 4]]))
    finally:
        draft.eval()
    assert "draft is in training mode" in str(error) and "call draft.eval() first" in str(error)


def test_a_draft_with_a_short_context_window_is_refused_before_any_forward(models):
    """Regression: the draft crashed with an IndexError inside torch after several forwards."""
    target, _ = models
    draft = short_draft(16)
    error = no_forward([target, draft], lambda: batchspec.generate(target, draft, [[3] * 10], max_new_tokens=8))
    assert "prompts[0]: 10 tokens + 8 more positions exceed the draft's context window of 16" in str(error)
    # exactly at the limit it runs, and is exact
    result = batchspec.generate(target, draft, [[3] * 10], max_new_tokens=6, num_draft_tokens=5)
    assert result.sequences == [reference_greedy(target, [3] * 10, 6)]


def test_the_length_check_is_not_stricter_than_the_positions_reached():
    """GPT-2 has learned positions (an index past them fails); prompt + max_new_tokens
    = n_positions must run, with k larger than what is left (k' <= budget)."""
    target, draft = tiny.pair("gpt2", "perturbed")
    prompt = [(7 * i) % 90 + 2 for i in range(250)]
    for method in ("eqspec", "exspec", "autoregressive"):
        result = batchspec.generate(target, draft, [prompt, prompt[:100]], method=method, max_new_tokens=6,
                                    num_draft_tokens=5, batch_size=2, check_invariants=True)
        assert result.sequences[0] == reference_greedy(target, prompt, 6), method
    error = no_forward([target, draft], lambda: batchspec.generate(target, draft, [prompt], max_new_tokens=7))
    assert "exceed the target's context window of 256" in str(error)


@pytest.mark.parametrize("option", [{"window_size": 8}, {"sort_by_length": False}, {"sort_by_length": True}])
def test_options_of_another_method_are_refused(models, option):
    name = next(iter(option))
    error = no_forward(models, lambda: batchspec.generate(*models, [[3, 4]], method="eqspec", **option))
    assert f"{name} applies to method 'exspec' only, not 'eqspec'" in str(error)


@pytest.mark.parametrize("prompts, message", [
    (torch.tensor([[0, 3, 4]]), "a tensor holding the pad id 0 and no attention_mask"),
    (torch.tensor([3, 4]), "one prompt? pass input_ids[None]"),
    ([3, 4, 5], "one prompt? wrap it in a list"),
    ([[3, 4.0]], "prompts[0][1] = 4.0 (float) is not a token id"),
    ([[3, True]], "prompts[0][1] = True (bool)"),
])
def test_prompt_shapes_and_types(models, prompts, message):
    assert message in str(no_forward(models, lambda: batchspec.generate(*models, prompts)))


@pytest.mark.parametrize("mode", [1, 0, None, "Semantic", [True]])
def test_check_invariants_must_be_a_mode(models, mode):
    assert "check_invariants must be one of" in str(no_forward(
        models, lambda: batchspec.generate(*models, [[3, 4]], check_invariants=mode)))


def test_stop_reasons_at_zero_new_tokens(models):
    for method in ("eqspec", "exspec", "autoregressive"):
        result = batchspec.generate(*models, [[3, 4], [5]], method=method, max_new_tokens=0)
        assert result.sequences == [[], []] and result.stop_reasons == ["length", "length"], method


@pytest.mark.parametrize("ids, message", [
    ([[-1]], "candidates[0][0] = -1 is not a token id [0, 96)"),
    ([[96]], "candidates[0][0] = 96 is not a token id [0, 96)"),
    ([["7"]], "candidates[0][0] = '7' is not a token id"),
])
def test_audit_refuses_ids_that_are_not_tokens(models, ids, message):
    """Regression: a negative id indexed the logits from the end and could be labelled a numeric near-tie."""
    target, _ = models
    error = no_forward([target], lambda: batchspec.audit([[3, 4]], [[5]], ids, target=target))
    assert message in str(error)
