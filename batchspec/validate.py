"""Input validation for :func:`batchspec.generate`: clear errors before any model runs."""

from __future__ import annotations

CHECK_MODES = (False, True, "structural", "record", "semantic")


def _int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def vocab_size(model) -> int:
    """Rows of the output embedding, falling back to ``config.vocab_size``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and hasattr(head, "out_features"):
        return int(head.out_features)
    return int(model.config.vocab_size)


def eos_ids(eos_token_id, vocab: int) -> list[int]:
    """Normalise ``eos_token_id`` (None, int or list of ints) to a list."""
    if eos_token_id is None:
        return []
    ids = [eos_token_id] if isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool) else eos_token_id
    if not isinstance(ids, (list, tuple)) or not ids:
        raise ValueError(f"eos_token_id must be None, an int or a non-empty list of ints, got {eos_token_id!r}")
    for e in ids:
        if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < vocab:
            raise ValueError(f"eos_token_id: {e!r} is not a token id in [0, {vocab})")
    return list(ids)


def validate(target, draft, prompts, method, methods, num_draft_tokens, max_new_tokens,
             batch_size, eos_token_id, check_invariants) -> list[int]:
    """Raise ``ValueError`` naming the argument and the problem; return EOS ids."""
    if method not in methods:
        raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
    _int("num_draft_tokens", num_draft_tokens, 1)
    _int("max_new_tokens", max_new_tokens, 0)
    if batch_size is not None:
        _int("batch_size", batch_size, 1)
    if check_invariants not in CHECK_MODES:
        raise ValueError(f"check_invariants must be one of {CHECK_MODES}, got {check_invariants!r}")
    from .reference.cache import check_supported

    check_supported(target, "target")
    vocab = vocab_size(target)
    if methods[method].needs_draft:
        if draft is None:
            raise ValueError(f"draft: method {method!r} needs a draft model, got None")
        check_supported(draft, "draft")
        if vocab_size(draft) != vocab:
            raise ValueError(f"draft: vocabulary size {vocab_size(draft)} differs from the target's {vocab}")
        if draft.device != target.device:
            raise ValueError(f"draft: on device {draft.device}, target on {target.device}")
        if draft.dtype != target.dtype:
            raise ValueError(f"draft: dtype {draft.dtype}, target {target.dtype}")
    if not isinstance(prompts, (list, tuple)):
        raise ValueError(f"prompts must be a list of lists of token ids, got {type(prompts).__name__}")
    limit = getattr(target.config, "max_position_embeddings", None)
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, (list, tuple)) or len(prompt) == 0:
            raise ValueError(f"prompts[{i}] must be a non-empty list of token ids, got {prompt!r}")
        for j, t in enumerate(prompt):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
                raise ValueError(f"prompts[{i}][{j}] = {t!r} is not a token id in [0, {vocab})")
        if limit and len(prompt) + max_new_tokens + num_draft_tokens > limit:
            raise ValueError(f"prompts[{i}]: {len(prompt)} tokens + max_new_tokens {max_new_tokens} "
                             f"+ num_draft_tokens exceeds the target's max_position_embeddings {limit}")
    return eos_ids(eos_token_id, vocab)


def window(window_size: int | None, batch_size: int, default: int) -> int:
    """EXSPEC's window ``W``: ``default`` when None, else an int ``>= batch_size``
    (a window smaller than the batch could never fill it)."""
    if window_size is None:
        return default
    _int("window_size", window_size, 1)
    if window_size < batch_size:
        raise ValueError(f"window_size must be >= batch_size ({batch_size}), got {window_size}")
    return window_size
