"""What transformers prepared, read for :mod:`batchspec.hf`, and what is refused.

Everything is read from what ``generate`` actually built (its logits
processors and stopping criteria, its generation config, the model keywords),
so an argument set anywhere (a keyword, the model's saved
``generation_config.json``, a default such as ``top_k=50`` under sampling) is
seen. What batchspec cannot honour raises a one-line ``ValueError`` naming the
argument and what to do instead, before any forward call. Greedy output is the
target's own (Spec §5.2); sampling is keyed speculative sampling over the
warped target (Spec §4.3.2, §5.5).
"""

from __future__ import annotations

import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from .reference.draft_policy import Confident
from .reference.storage import cache_length

#: Logits processors transformers builds from a generation-config field, by class name -> that field.
PROCESSOR_FIELDS = {
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "MinLengthLogitsProcessor": "min_length / min_new_tokens",
    "MinNewTokensLengthLogitsProcessor": "min_length / min_new_tokens",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "MinPLogitsWarper": "min_p",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
    "TopHLogitsWarper": "top_h",
    "LogitNormalization": "renormalize_logits",
}
STOPPING_FIELDS = {"MaxTimeCriteria": "max_time", "StopStringCriteria": "stop_strings"}
WARPERS = {TemperatureLogitsWarper: "temperature", TopKLogitsWarper: "top_k", TopPLogitsWarper: "top_p"}

#: ``(field, refused when, what to do instead)`` for the generation-config fields no processor shows.
CONFIG_REFUSALS = (
    ("num_beams", lambda v: v is not None and v > 1, "beam search is not speculative decoding; use num_beams=1"),
    ("num_return_sequences", lambda v: v is not None and v > 1,
     "repeat the prompt in the batch instead (with do_sample=True each row has its own seed)"),
    ("penalty_alpha", lambda v: v is not None, "contrastive search is not supported; drop it"),
    ("dola_layers", lambda v: v is not None, "DoLa decoding is not supported; drop it"),
    ("prompt_lookup_num_tokens", lambda v: v is not None, "prompt lookup is another drafter; drop it"),
    ("token_healing", bool, "heal the prompt's tokens before the call"),
    ("cache_implementation", lambda v: v is not None, "batchspec manages its own cache; drop it"),
    ("output_scores", bool, "batchspec returns the sequences only; drop it"),
    ("output_logits", bool, "batchspec returns the sequences only; drop it"),
    ("output_attentions", bool, "batchspec returns the sequences only; drop it"),
    ("output_hidden_states", bool, "batchspec returns the sequences only; drop it"),
)

ENCODER_DECODER = "{} is an encoder-decoder model; batchspec decodes decoder-only causal LMs"

#: Model keywords ``generate`` prepares itself; any other reaches the callable from the caller.
PREPARED = ("attention_mask", "position_ids", "logits_to_keep", "cache", "use_cache")


#: transformers' defaults of the assisted-decoding fields (``GenerationConfig``, 5.24).
ASSISTED_DEFAULTS = {"num_assistant_tokens": 20, "num_assistant_tokens_schedule": "constant",
                     "assistant_confidence_threshold": 0.4}


def refuse(argument: str, why: str) -> None:
    """Raise the one-line ``ValueError`` ``"argument: why"``."""
    raise ValueError(f"{argument}: {why}")


def eos_list(eos_token_id) -> list[int]:
    """The generation config's ``eos_token_id`` (None, an int or a list) as a list."""
    if eos_token_id is None:
        return []
    return [int(e) for e in (eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id])]


def check_arguments(model, draft, config, processors, criteria, model_kwargs, streamer, input_ids) -> None:
    """Raise for anything batchspec cannot honour, before any forward call."""
    for role, m in (("model", model), ("assistant_model", draft)):
        if getattr(m.config, "is_encoder_decoder", False):
            refuse(role, ENCODER_DECODER.format(type(m).__name__))
    for field, refused, instead in CONFIG_REFUSALS:
        if refused(getattr(config, field, None)):
            refuse(field, f"{getattr(config, field)!r} is not honoured by batchspec; {instead}")
    for processor in processors or ():
        if type(processor) not in WARPERS:
            field = PROCESSOR_FIELDS.get(type(processor).__name__, "logits_processor")
            refuse(field, f"{type(processor).__name__} would change the target's distribution, which batchspec "
                          f"verifies against unchanged (only temperature, top_k, top_p); drop it")
    for criterion in criteria or ():
        if not isinstance(criterion, (MaxLengthCriteria, EosTokenCriteria)):
            field = STOPPING_FIELDS.get(type(criterion).__name__, "stopping_criteria")
            refuse(field, f"{type(criterion).__name__}: batchspec stops at max_new_tokens and eos_token_id only; "
                          f"drop it and cut the rows afterwards")
    _check_model_kwargs(model_kwargs)
    vocab, other = model.get_output_embeddings().out_features, draft.get_output_embeddings().out_features
    if vocab != other:
        refuse("assistant_model", f"vocabulary of {other} ids, the target's {vocab}: an assistant with another "
                                  f"tokenizer cannot propose the target's ids; use a draft with the target's tokenizer")
    if streamer is not None and input_ids.shape[0] > 1:
        refuse("streamer", f"rows commit different numbers of tokens per round, at batch {input_ids.shape[0]}; "
                           f"stream at batch 1, or use batchspec.scheduler.Scheduler.stream()")


def _check_model_kwargs(model_kwargs) -> None:
    for key, value in model_kwargs.items():
        if key not in PREPARED and value is not None:
            refuse(key, "batchspec passes the model input_ids and attention_mask only; drop it")
    cache = model_kwargs.get("cache")
    if cache is not None and cache_length(cache) > 0:
        refuse("past_key_values", "batchspec decodes from the prompt with its own cache; drop it")
    mask, positions = model_kwargs.get("attention_mask"), model_kwargs.get("position_ids")
    if positions is not None:  # those generate derives from the mask, compared on the prompt's slots
        mask = torch.ones_like(positions) if mask is None else mask.to(positions.device)
        expected = mask.long().cumsum(-1) - 1
        if bool(((positions != expected) & (mask != 0)).any()):
            refuse("position_ids", "batchspec numbers each row's positions from its first prompt token; drop it")


def warping(processors, do_sample) -> tuple[float, int | None, float | None]:
    """``(temperature, top_k, top_p)`` of the warpers transformers prepared
    (under greedy none change the argmax, and none are prepared)."""
    found = {WARPERS[type(p)]: p for p in processors or () if type(p) in WARPERS}
    if len(found) < sum(type(p) in WARPERS for p in processors or ()):
        refuse("logits_processor", "a warper given twice; give temperature, top_k and top_p once each")
    if not do_sample:
        return 1.0, None, None
    top_k = found.get("top_k")
    return (found["temperature"].temperature if "temperature" in found else 1.0,
            None if top_k is None else max(top_k.top_k, top_k.min_tokens_to_keep),
            found["top_p"].top_p if "top_p" in found else None)


def draft_policy(config, draft):
    """``num_draft_tokens`` from ``num_assistant_tokens``, its schedule and
    ``assistant_confidence_threshold`` as ``generate`` prepared them (the
    call's keyword, else the target's saved config, else transformers'
    defaults 20, ``"constant"``, 0.4); where that is the default and the
    assistant's own generation config sets the field, the assistant's value
    (transformers' assisted decoding reads it there)."""
    def read(field):
        value, own = getattr(config, field, None), getattr(draft.generation_config, field, None)
        return own if own is not None and value == ASSISTED_DEFAULTS[field] else value

    k, schedule = read("num_assistant_tokens"), read("num_assistant_tokens_schedule")
    threshold = read("assistant_confidence_threshold")
    if schedule not in (None, "constant", "heuristic", "heuristic_transient"):
        refuse("num_assistant_tokens_schedule", f"{schedule!r} is unknown; use 'constant' or 'heuristic'")
    if schedule in ("heuristic", "heuristic_transient"):
        return "auto"  # batchspec's own adaptive k' (Spec §4.2.2), not transformers' +2/-1 rule
    if threshold:  # transformers drafts on while the draft's probability stays above it: Spec §4.2.3
        return Confident(float(threshold), int(k))
    return int(k)
