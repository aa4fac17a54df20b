"""Batched assisted generation from transformers' own ``generate`` (Spec §4, §8).

transformers refuses ``generate(..., assistant_model=draft)`` above batch 1;
its ``custom_generate`` hands the decoding loop over after it has prepared the
inputs. Two doors lead here:

* the folder :data:`HUB` (a Hub ``custom_generate`` repository shipped in the
  package): ``target.generate(**enc, assistant_model=draft,
  custom_generate=batchspec.hf.HUB, trust_remote_code=True)``. transformers
  passes such a folder every argument as written, ``assistant_model`` and
  ``streamer`` included, so nothing the caller wrote is dropped unseen; it
  then re-enters ``generate`` with the callable below;
* the callable :func:`generate`: ``target.generate(**enc,
  custom_generate=batchspec.hf.generate, draft=draft)``. transformers drops
  ``assistant_model``, ``streamer`` and the tokenizers before calling a
  callable and forwards only the keywords it declares, hence ``draft=`` and
  ``token_streamer=``.

The answer is the tensor plain greedy ``generate`` returns (Spec §5.2: each row
is the target's own batch-1 greedy continuation): the prompt, then the new
tokens, ``pad_token_id`` after a row's EOS, width ``L + max new``. A
right-padded row keeps its prompt at the left and its continuation right after
it, pads at the right end. What batchspec cannot honour is refused before any
forward call, in one line naming the argument (:mod:`batchspec.hf_refusals`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from . import api
from .hf_refusals import ENCODER_DECODER, check_arguments, draft_policy, eos_list, refuse, warping
from .inputs import read_rows
from .methods import METHODS
from .validate import method_spec

#: The Hub-layout folder: ``custom_generate=batchspec.hf.HUB, trust_remote_code=True``.
HUB = str(Path(__file__).parent / "batchspec_generate")


@dataclass
class SpeculativeOutput(GenerateDecoderOnlyOutput):
    """``return_dict_in_generate=True``: ``sequences`` as plain ``generate``
    returns them, each row's ``stop_reasons`` (``"eos"`` | ``"length"``) and
    batchspec's :class:`~batchspec.stats.Stats`; scores, logits, attentions,
    hidden states and the cache are not kept (asking for them is refused)."""

    stop_reasons: list | None = None
    stats: object | None = None


def generate(model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
             draft=None, method="eqspec", seed=None, token_streamer=None, **model_kwargs):
    """The ``custom_generate`` callable: decode ``input_ids`` ``[B, L]`` with
    ``method`` (``"eqspec"``, the default, Spec §4; or ``"exspec"``, Spec §8)
    and the draft ``draft``, reading what transformers prepared.

    ``generation_config.num_assistant_tokens`` is ``k``; a positive
    ``assistant_confidence_threshold`` selects the confident policy (Spec
    §4.2.3) with ``k_max = num_assistant_tokens`` (transformers' defaults,
    20 and 0.4, give that policy); the ``"heuristic"``
    schedules select ``"auto"`` (Spec §4.2.2), batchspec's own adaptive ``k'``.
    ``do_sample=True`` runs keyed speculative sampling (Spec §4.3.2) with the
    warpers transformers prepared; ``seed`` (an int or one per row) keys it,
    and when None one int is drawn from torch's generator, so that
    ``torch.manual_seed`` makes a call repeatable. ``token_streamer``
    (batch 1) gets the prompt, then each round's committed tokens.
    """
    if draft is None:
        refuse("draft", "no draft model arrived (transformers drops assistant_model before a callable "
                        "custom_generate); pass draft=assistant, or custom_generate=batchspec.hf.HUB with "
                        "trust_remote_code=True and assistant_model=assistant")
    check_arguments(model, draft, generation_config, logits_processor, stopping_criteria, model_kwargs,
                    token_streamer, input_ids)
    rows = read_rows(input_ids, model_kwargs.get("attention_mask"))
    left = bool((rows.start + rows.length == input_ids.shape[1]).all())
    right = bool((rows.start == 0).all()) and not left
    if not (left or right):
        refuse("attention_mask", "some rows are padded on the left and others on the right; pad one side "
                                 "(tokenizer.padding_side)")
    temperature, top_k, top_p = warping(logits_processor, generation_config.do_sample)
    eos = eos_list(generation_config.eos_token_id)
    pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else (eos or [None])[0]
    if token_streamer is not None:
        token_streamer.put(input_ids.cpu())
    result = api.generate(
        model, draft, rows.prompts, method=streaming(method, token_streamer),
        num_draft_tokens=draft_policy(generation_config, draft),
        max_new_tokens=generation_config.max_length - input_ids.shape[1],
        eos_token_id=eos or None,
        do_sample=bool(generation_config.do_sample), temperature=temperature, top_k=top_k, top_p=top_p,
        seed=_seed(seed, generation_config.do_sample))
    if token_streamer is not None:
        token_streamer.end()
    sequences = layout(input_ids, rows, result.sequences, pad, right)
    if generation_config.return_dict_in_generate:
        return SpeculativeOutput(sequences=sequences, stop_reasons=result.stop_reasons, stats=result.stats)
    return sequences


def hub_generate(model, assistant_model=None, streamer=None, tokenizer=None, assistant_tokenizer=None,
                 draft=None, **arguments):
    """The folder form's ``generate`` (:data:`HUB`): transformers passes it every
    argument of ``generate``; it hands them back to ``generate`` with the
    callable :func:`generate`, the assistant as ``draft`` and the streamer as
    ``token_streamer``."""
    for role, m in (("model", model), ("assistant_model", assistant_model)):  # before generate runs an encoder
        if m is not None and getattr(m.config, "is_encoder_decoder", False):
            refuse(role, ENCODER_DECODER.format(type(m).__name__))
    if assistant_tokenizer is not None:
        refuse("assistant_tokenizer", "an assistant with another tokenizer cannot speculate for batchspec (its "
                                      "drafts must be the target's token ids); use a draft sharing the target's tokenizer")
    if draft is not None and assistant_model is not None and draft is not assistant_model:
        refuse("draft", "given besides a different assistant_model; pass the draft once, as assistant_model")
    return type(model).generate(model, custom_generate=generate, draft=assistant_model or draft,
                                token_streamer=streamer, tokenizer=tokenizer, **arguments)


def layout(input_ids, rows, generated: list[list[int]], pad: int | None, right: bool) -> torch.Tensor:
    """``[B, L + N]``, ``N`` the longest continuation: plain ``generate``'s
    layout (prompt as given, continuation after column ``L``, ``pad`` after
    a row's end); a right-padded row has its continuation right after its
    prompt and ``pad`` up to the end."""
    batch, width = input_ids.shape
    new = max(map(len, generated), default=0)
    ragged = any(len(g) < new for g in generated) or (right and bool((rows.length < width).any()))
    if pad is None and ragged:
        refuse("pad_token_id", "rows of different lengths need a pad id to fill them; pass "
                               "pad_token_id=tokenizer.pad_token_id")
    fill = 0 if pad is None else pad
    tail = torch.tensor([g + [fill] * (new - len(g)) for g in generated], dtype=input_ids.dtype)  # [B, N]
    tail = tail.reshape(batch, new).to(input_ids.device)
    if not right:
        return torch.cat([input_ids, tail], dim=1)
    out = input_ids.new_full((batch, width + new), fill)
    for i, (n, g) in enumerate(zip(rows.length.tolist(), generated)):
        out[i, :n] = input_ids[i, :n]
        out[i, n:n + len(g)] = tail[i, :len(g)]
    return out


def streaming(method, streamer):
    """``method`` itself, or, with a ``streamer``, its :class:`~batchspec.methods.Method`
    whose decoders hand each round's committed tokens (Spec §4.7 step 4) to ``streamer``."""
    if streamer is None:
        return method
    name, spec = method_spec(method, METHODS)

    def decoders(models, prompts, config):
        for decoder in spec.decoders(models, prompts, config):
            yield _tapped(decoder, streamer)

    return replace(spec, decoders=decoders, name=name)


def _tapped(decoder, streamer):
    while True:
        try:
            event = next(decoder)
        except StopIteration as stop:
            return stop.value
        if event.committed:  # batch 1: the one row's a_i tokens of this round
            streamer.put(torch.tensor([event.committed[0]], dtype=torch.long))
        yield event


def _seed(seed, do_sample):
    """The key's seed: as given, or under sampling one int drawn from torch's global generator."""
    if seed is not None or not do_sample:
        return 0 if seed is None else seed
    return int(torch.randint(0, 2**31 - 1, ()).item())
