"""Tiny float64 models of the attention kinds ``watch`` reads (Spec §3.12.2); not collected by pytest.

Built from configs like :mod:`batchspec.models.tiny` (no downloads): full
attention (Llama, GPT-2, GPT-NeoX), sliding windows on every layer (Mistral
with ``sliding_window=6``, Qwen2 with ``use_sliding_window=True``) and a mix
of both (Gemma 3 text: window, full, window). The window
(6) is shorter than the prompts, so windows really slide from the prefill on.
"""

from __future__ import annotations

import torch
import transformers as tf

from batchspec.models import tiny

WINDOW = 6
_COMMON = dict(vocab_size=tiny.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0,
               eos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
_WINDOWED = {
    "mistral": (tf.MistralConfig, tf.MistralForCausalLM, {"sliding_window": WINDOW}),
    "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM,
              {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 0}),
    "gemma3": (tf.Gemma3TextConfig, tf.Gemma3ForCausalLM,
               {"head_dim": 8, "sliding_window": WINDOW, "num_hidden_layers": 3,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}),
}
#: every architecture the path tests run: three of full attention, three with windows
ARCHITECTURES = ("llama", "gpt2", "gpt_neox", "mistral", "qwen2", "gemma3")


def build(name: str, seed: int = 0, scale: float = 4.0):
    """A tiny causal LM of architecture ``name`` (float64, SDPA, eval), head scaled as in ``tiny.build``."""
    if name not in _WINDOWED:
        return tiny.build(name, seed)
    config_cls, model_cls, extra = _WINDOWED[name]
    config = config_cls(**{**_COMMON, **extra})
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(scale)
    model.generation_config.pad_token_id = 0
    return model.to(torch.float64).eval()


def pair(name: str, seed: int = 0):
    """``(target, draft)``: the draft a noisy copy of the target (mixed acceptance)."""
    target = build(name, seed)
    return target, tiny.perturb(target, 0.1, seed + 1)


@torch.no_grad()
def guess_and_check(model, cache, prompt: list[int], steps: int, bug: str | None = None,
                    rejected: list | None = None) -> list[int]:
    """A tiny speculative decoder of one row over ``cache``: each round feeds the newest token
    and a guess (the token after it, plus one), keeps the target's choice and throws the guess
    away. Correct, it crops the guess's slot (a window layer records its past for that, as
    transformers' assisted generation does). Planted bugs: ``"stale"`` keeps the guess's slot
    attended; ``"hole"`` keeps it masked out (a hole: harmless under full attention, a missing
    token in a sliding window). ``rejected`` collects the numbers of the calls (1: the prefill)
    whose guess was thrown away."""
    for layer in cache.layers:
        if hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()
    ids = torch.tensor([prompt])
    logits = model(input_ids=ids, cache=cache, attention_mask=torch.ones_like(ids), use_cache=True).logits
    out, mask = [int(logits[0, -1].argmax())], [1] * len(prompt)
    for step in range(steps):
        j = len(prompt) + len(out) - 1  # the newest token's position
        guess = (out[-1] + 1) % tiny.VOCAB
        mask = mask + [1, 1]
        logits = model(input_ids=torch.tensor([[out[-1], guess]]), cache=cache, use_cache=True,
                       attention_mask=torch.tensor([mask]), position_ids=torch.tensor([[j, j + 1]])).logits
        chosen = int(logits[0, 0].argmax())
        if chosen == guess:
            out += [guess, int(logits[0, 1].argmax())]
            continue
        out.append(chosen)
        if rejected is not None:
            rejected.append(step + 2)
        if bug is None:
            cache.crop(-1)
            mask = mask[:-1]
        elif bug == "hole":
            mask[-1] = 0
        # "stale": neither cropped nor masked; the next input takes the guess's position
    return out
