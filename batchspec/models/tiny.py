"""Tiny model pairs built offline, deterministic from a seed (no downloads).

One builder per architecture of the paper's pairs — Llama (Vicuna), Qwen3,
GLM-4 — plus GPT-2, GPT-NeoX, Mistral and Qwen2 to cover the families the
API promises. Drafts of high, mixed and low acceptance make ragged rounds
really occur:

* ``"self"``: the target itself (every draft accepted);
* ``"perturbed"``: a copy of the target with Gaussian noise on every weight
  (``noise`` controls how often it disagrees);
* ``"unrelated"``: an independently initialised, smaller model of the same
  family and vocabulary (rarely agrees).
"""

from __future__ import annotations

import copy

import torch
import transformers as tf

VOCAB = 96

#: family -> (config class, model class, extra config keys)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 8}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {"head_dim": 8}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
}
PAPER_FAMILIES = ("llama", "qwen3", "glm4")
DRAFTS = ("self", "perturbed", "unrelated")


def _config(family: str, layers: int, hidden: int, heads: int):
    config_cls, _, extra = FAMILIES[family]
    cls = getattr(tf, config_cls)
    if family == "gpt2":
        # untied head: scaling a tied head would scale the embeddings too, and the
        # model would repeat its last input token forever
        return cls(vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=256,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=1,
                   tie_word_embeddings=False)
    if family == "gpt_neox":
        return cls(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                   num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=256,
                   hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=1)
    return cls(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
               num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
               max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=0,
               tie_word_embeddings=False, **extra)


def build(family: str, seed: int, layers: int = 2, hidden: int = 32, heads: int = 4,
          dtype: torch.dtype = torch.float64, scale: float = 4.0):
    """A randomly initialised causal LM of ``family``, SDPA attention, eval mode.

    ``scale`` multiplies the output head so that next-token distributions are
    peaked (greedy text from a near-uniform model is mostly ties and noise).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {family!r}")
    config = _config(family, layers, hidden, heads)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = getattr(tf, FAMILIES[family][1])(config)
    with torch.no_grad():
        head = model.get_output_embeddings()
        head.weight.mul_(scale)
    model.generation_config.pad_token_id = 0
    return model.to(dtype).eval()


def perturb(model, noise: float, seed: int):
    """A copy of ``model`` with ``N(0, noise * std(w))`` added to every weight ``w``."""
    twin = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in twin.parameters():
            std = float(p.std()) if p.numel() > 1 else 1.0
            p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * noise * std)
    return twin.eval()


def pair(family: str = "llama", draft: str = "perturbed", seed: int = 0,
         dtype: torch.dtype = torch.float64, noise: float = 0.1):
    """``(target, draft)`` of ``family`` with a draft of the given kind (see module doc)."""
    target = build(family, seed, dtype=dtype)
    if draft == "self":
        return target, target
    if draft == "perturbed":
        return target, perturb(target, noise, seed + 1)
    if draft == "unrelated":
        return target, build(family, seed + 1000, layers=1, hidden=16, heads=2, dtype=dtype)
    raise ValueError(f"draft must be one of {DRAFTS}, got {draft!r}")
