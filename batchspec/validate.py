"""Input validation for :func:`batchspec.generate` and the :class:`~batchspec.scheduler.Scheduler`:
a clear error naming the argument and the problem, before any model runs.

One function per argument group (the models, the prompts, the counts, the
method's own options, EOS), called in that order by :func:`validate`; a new
group of arguments (sampling, say) adds its own function and one call.
Every rejected input and its message is listed in ``docs/errors.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .reference.draft_policy import DraftPolicy, Fixed, require_count

if TYPE_CHECKING:
    from .methods import Method

CHECK_MODES = (False, True, "structural", "record", "semantic")

# What each method reads and how far its positions reach are properties of the method
# (``Method.options``, ``Method.tight_length`` in batchspec.methods), not of its name, so a
# wrapped method (a trace, a fault) keeps them. Tight methods provably stay below
# ``len(prompt) + max_new_tokens`` (Spec §4.2: ``k' <=`` every row's remaining budget); the
# broken alternatives keep a margin of ``k``.


require_int = require_count  # the one int check, shared with the draft policies


def vocab_size(model) -> int:
    """Rows of the output embedding, falling back to ``config.vocab_size``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and hasattr(head, "out_features"):
        return int(head.out_features)
    return int(model.config.vocab_size)


def context_window(model) -> int | None:
    """Positions ``model`` can attend over (``max_position_embeddings`` or its GPT-2 name), or None."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(model.config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_model(model, role: str) -> None:
    """``model`` is a decoder-only causal LM with an LM head, in eval mode, that batchspec can run."""
    if isinstance(model, str):
        raise TypeError(f"{role}: got the string {model!r}, not a model; load it first, e.g. "
                        f"AutoModelForCausalLM.from_pretrained({model!r}, attn_implementation='sdpa')")
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        swapped = " (arguments in the wrong order? generate(target, draft, prompts, ...))" \
            if isinstance(model, (list, tuple)) else ""
        raise TypeError(f"{role} must be a transformers causal LM, got {type(model).__name__}{swapped}")
    name = type(model).__name__
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{role}: {name} is an encoder-decoder model; batchspec decodes decoder-only causal LMs")
    if not hasattr(model, "get_output_embeddings") or model.get_output_embeddings() is None:
        raise ValueError(f"{role}: {name} has no LM head (a base model); load it with AutoModelForCausalLM")
    if model.training:
        raise ValueError(f"{role} is in training mode (dropout would make the output random and wrong); "
                         f"call {role}.eval() first")
    from .reference.storage import check_supported

    check_supported(model, role)


def check_pair(target, draft) -> None:
    """``draft`` can speculate for ``target``: one vocabulary, one device, one dtype."""
    if draft is None:
        return
    vocab, other = vocab_size(target), vocab_size(draft)
    if other != vocab:
        raise ValueError(f"draft: vocabulary size {other} differs from the target's {vocab}; if the ids agree "
                         f"on the shared range (padded embeddings), trim the larger model with "
                         f"resize_token_embeddings({min(vocab, other)})")
    if draft.device != target.device:
        raise ValueError(f"draft: on device {draft.device}, target on {target.device}")
    if draft.dtype != target.dtype:
        raise ValueError(f"draft: dtype {draft.dtype}, target {target.dtype}")


def check_counts(max_new_tokens, batch_size, check_invariants) -> None:
    """``max_new_tokens >= 0``, ``batch_size`` None or ``>= 1``, a known check mode."""
    require_int("max_new_tokens", max_new_tokens, 0)
    if batch_size is not None:
        require_int("batch_size", batch_size, 1)
    if not isinstance(check_invariants, (bool, str)) or check_invariants not in CHECK_MODES:
        # (0 == False and 1 == True, but they are not modes)
        raise ValueError(f"check_invariants must be one of {CHECK_MODES}, got {check_invariants!r}")


def method_spec(method: str | Method, methods: dict[str, Method]) -> tuple[str, Method]:
    """``(name, Method)`` of ``method``: a name registered in ``methods``, or a
    :class:`~batchspec.methods.Method` itself (named by its ``name``), which
    needs no registration."""
    from .methods import Method  # here: batchspec.methods imports this module

    if isinstance(method, Method):
        return method.name, method
    if not isinstance(method, str) or method not in methods:
        raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
    return method, methods[method]


def check_method_options(method: str | Method, methods: dict[str, Method], **options) -> None:
    """An option given (not None) to a method that does not read it (``Method.options``) is refused."""
    method, spec = method_spec(method, methods)
    for name, value in options.items():
        if value is not None and name not in spec.options:
            readers = sorted(m for m, other in methods.items() if name in other.options)
            raise ValueError(f"{name} applies to method {' or '.join(map(repr, readers))} only, "
                             f"not {method!r}; leave it None")


def check_prompts(prompts, vocab: int) -> None:
    """A list of non-empty lists of int token ids in ``[0, vocab)``."""
    if isinstance(prompts, torch.nn.Module):
        raise TypeError("prompts: got a model (arguments in the wrong order? generate(target, draft, prompts, ...))")
    if not isinstance(prompts, (list, tuple)):
        hint = "; a padded tensor needs its attention_mask" if isinstance(prompts, torch.Tensor) else \
            "; encode text with a tokenizer first" if isinstance(prompts, str) else ""
        raise ValueError(f"prompts must be a list of lists of token ids, got {type(prompts).__name__}{hint}")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, (list, tuple)) or len(prompt) == 0:
            hint = " (one prompt? wrap it in a list: [prompt])" if isinstance(prompt, int) else ""
            raise ValueError(f"prompts[{i}] must be a non-empty list of token ids, got {prompt!r:.60}{hint}")
        for j, t in enumerate(prompt):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise ValueError(f"prompts[{i}][{j}] = {t!r} ({type(t).__name__}) is not a token id in [0, {vocab})")


def check_lengths(prompts, reach: int, models: dict) -> None:
    """Every prompt plus the ``reach`` positions decoding can add fits every model's context window
    (a model with learned positions would otherwise fail inside torch after several forwards)."""
    for role, model in models.items():
        limit = context_window(model)
        for i, prompt in enumerate(prompts):
            if limit is not None and len(prompt) + reach > limit:
                raise ValueError(f"prompts[{i}]: {len(prompt)} tokens + {reach} more positions exceed the "
                                 f"{role}'s context window of {limit} (config.max_position_embeddings); "
                                 f"shorten the prompt or lower max_new_tokens")


def eos_ids(eos_token_id, vocab: int) -> list[int]:
    """Normalise ``eos_token_id`` (None, int or list of ints) to a list."""
    if eos_token_id is None:
        return []
    ids = [eos_token_id] if isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool) else eos_token_id
    if not isinstance(ids, (list, tuple, set, frozenset)) or not ids:
        raise ValueError(f"eos_token_id must be None, an int or a non-empty list of ints, got {eos_token_id!r}")
    for e in ids:
        if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < vocab:
            raise ValueError(f"eos_token_id: {e!r} is not a token id in [0, {vocab})")
    return sorted(set(ids))


def validate(target, draft, prompts, method, methods, policy: DraftPolicy, max_new_tokens,
             batch_size, eos_token_id, check_invariants, *, window_size=None, sort_by_length=None,
             overshoot: int = 0) -> list[int]:
    """Raise ``ValueError`` / ``TypeError`` naming the argument and the problem; return EOS ids.

    ``overshoot``: positions a row may reach past its budget (the scheduler's
    per-request budgets, Spec §8.6).
    """
    name, spec = method_spec(method, methods)
    if not isinstance(policy, Fixed) and not spec.tight_length:  # rounds that take only a fixed k
        able = sorted(m for m, other in methods.items() if other.tight_length)
        raise ValueError(f"num_draft_tokens={policy.describe()['policy']!r} is supported by methods {tuple(able)}, "
                         f"not {name!r}")
    check_counts(max_new_tokens, batch_size, check_invariants)
    check_method_options(method, methods, window_size=window_size, sort_by_length=sort_by_length)
    check_model(target, "target")
    vocab = vocab_size(target)
    used = {"target": target}
    if spec.needs_draft:
        if draft is None:
            raise ValueError(f"draft: method {name!r} needs a draft model, got None")
        check_model(draft, "draft")
        check_pair(target, draft)
        used["draft"] = draft
    check_prompts(prompts, vocab)
    reach = max_new_tokens + overshoot + (0 if spec.tight_length else policy.k_max)
    check_lengths(prompts, reach, used)
    return eos_ids(eos_token_id, vocab)


def window(window_size: int | None, batch_size: int, default: int) -> int:
    """EXSPEC's window ``W``: ``default`` when None, else an int ``>= batch_size``
    (a window smaller than the batch could never fill it)."""
    if window_size is None:
        return default
    require_int("window_size", window_size, 1)
    if window_size < batch_size:
        raise ValueError(f"window_size must be >= batch_size ({batch_size}), got {window_size}")
    return window_size


def validate_sampling(method: str | Method, methods: dict[str, Method], do_sample, temperature, top_k, top_p, seed,
                      prompts) -> list[tuple] | None:
    """Check the sampling arguments (Spec §4.3.2); return each request's key
    for the uniforms, or None for greedy decoding.

    ``top_k``, ``top_p`` and ``seed`` are checked even when greedy (a wrong
    value is a mistake either way); ``temperature`` only with ``do_sample``,
    where ``temperature=0`` is the common way of asking for greedy.
    ``seed`` an int gives request ``r`` the key ``(seed, r)``; a list gives
    it ``(seed[r], 0)``, so that a prompt decoded alone with ``seed=s`` and
    inside a batch with ``seed=[.., s, ..]`` draws the same numbers.
    """
    if not isinstance(do_sample, bool):
        raise ValueError(f"do_sample must be True or False, got {do_sample!r}")
    if top_k is not None:
        require_int("top_k", top_k, 1)
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    keys = _keys(seed, len(prompts))
    if not do_sample:
        return None
    name, spec = method_spec(method, methods)
    if not spec.can_sample:
        able = sorted(other for other, m in methods.items() if m.can_sample)
        raise ValueError(f"do_sample: method {name!r} cannot sample; use one of {able}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0 \
            or temperature == float("inf"):
        raise ValueError(f"temperature must be a finite number > 0 with do_sample=True, got {temperature!r}")
    return keys


def _keys(seed, count: int) -> list[tuple]:
    """Each request's key from ``seed`` (see :func:`validate_sampling`)."""
    if isinstance(seed, (list, tuple)):
        if len(seed) != count:
            raise ValueError(f"seed: {len(seed)} seeds for {count} prompts; give an int or one per prompt")
        for i, s in enumerate(seed):
            if isinstance(s, bool) or not isinstance(s, int):
                raise ValueError(f"seed[{i}] must be an int, got {type(s).__name__} {s!r}")
        return [(s, 0) for s in seed]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int or a list of ints (one per prompt), got {type(seed).__name__} {seed!r}")
    return [(seed, r) for r in range(count)]
