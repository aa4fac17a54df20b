"""What ``watch`` cannot read, it refuses by name before the first call runs (Spec §3.12.1).

Layers that keep no key/value per token (linear attention, convolutions),
chunked attention, and encoder-decoder models are refused when ``watch`` is
entered; a quantized cache when the first call that carries it starts,
before the model computes anything. Each refusal is one line naming the
layer type and why.
"""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from batchspec.invariants import watch
from batchspec.invariants.hf_cache import kinds_of
from batchspec.models import tiny


class Configured(torch.nn.Module):
    """A module with only a config: what ``watch`` reads when it is entered."""

    def __init__(self, config):
        super().__init__()
        self.config = config


@pytest.mark.parametrize("config, says", [
    (tf.Lfm2Config(num_hidden_layers=2, layer_types=["conv", "full_attention"]), "type 'conv'"),
    (tf.Qwen3NextConfig(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"]),
     "type 'linear_attention'"),
    (tf.Llama4TextConfig(num_hidden_layers=2), "type 'chunked_attention'"),
    (tf.BartConfig(), "an encoder-decoder architecture"),
])
def test_a_model_watch_cannot_read_is_refused_on_entry(config, says):
    model = Configured(config)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(a))
    with pytest.raises(ValueError, match="which watch cannot check") as refused, watch(target=model):
        model(torch.zeros(1))  # never reached
    assert says in str(refused.value) and "\n" not in str(refused.value) and calls == []


def test_mixed_windows_and_full_layers_are_read_by_kind():
    """GPT-OSS alternates window and full layers: each kind is read by its own rule."""
    kinds = kinds_of(Configured(tf.GptOssConfig(num_hidden_layers=4, sliding_window=8)), "target")
    assert kinds == {("window", 8): [0, 2], "full": [1, 3]}


def test_a_quantized_cache_is_refused_before_the_call_runs():
    model = tiny.build("llama", 0)
    ids = torch.tensor([[5, 6, 7, 8]])
    ran = []
    model.model.register_forward_pre_hook(lambda *a: ran.append(1))  # the decoder body: never reached
    with pytest.raises(ValueError, match="Fp8QuantizedLayer at layer 0, which watch cannot check") as refused, \
            watch(target=model):
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                       cache_implementation="quantized", cache_config={"backend": "fp8"})
    assert "quantized" in str(refused.value) and ran == []


def test_a_cache_that_dropped_slots_a_full_attention_model_attends_is_refused():
    """A full-attention model run over a cache that keeps only its newest slots (here a
    sliding-window cache of 4 handed to a model whose layers attend every earlier token):
    once the cache holds fewer slots than the call's ``T``, ``watch`` says so by name (the
    model attends columns the cache no longer holds), not a crash inside the checker."""
    import copy

    model = tiny.build("llama", 0)
    config = copy.deepcopy(model.config)
    config.sliding_window, config.layer_types = 4, ["sliding_attention"] * config.num_hidden_layers
    cache = tf.DynamicCache(config=config)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    with pytest.raises(ValueError, match=r"its cache holds fewer than the 6 slots before the call plus 1 inputs") \
            as refused, watch(target=model) as w, torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), cache=cache)
        nxt = out.logits[:, -1:].argmax(-1)
        model(input_ids=nxt, attention_mask=torch.ones((1, 7), dtype=torch.long), cache=cache)
    assert "watch could not read call #2 of the target model" in str(refused.value)
    assert w.correctness.seal.hashed_columns == 6 + 7  # columns are not slots: every column hashed, both calls
