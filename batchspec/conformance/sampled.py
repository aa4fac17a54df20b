"""Sampled vectors: speculative sampling checked token for token (Spec §4.3.2).

A sampled vector adds to the format ``sampling``: ``temperature``, ``top_k``,
``top_p`` (``null`` when off; transformers' warpers in that order, applied to
both models), ``seed`` and ``keys`` (request ``r``'s key, ``[seed, r]``); and
``uniforms``: per prompt, ``from`` (the prompt's length, the first position
decided) and the lists ``draft``, ``accept`` and ``residual``, entry ``i``
being ``u(key, from + i, purpose)`` for ``i = 0 .. max_new_tokens``. The rule
at position ``t``: the draft proposes ``y ~ q_t`` by an inverse-CDF draw with
``u_draft``; the target accepts ``y`` if ``u_accept < min(1, p_t(y) / q_t(y))``,
else draws ``x ~ norm(max(0, p_t - q_t))`` with ``u_residual`` (``p_t`` when
that is all zero). A decoder that follows it returns the ``expected``
sequences exactly, whatever its batch, ``k`` or rounds.

A Python decoder gets the vector's ``sampling``, with ``uniforms`` added, as
the keyword argument ``sampling``; a command reads them from the file.
"""

from __future__ import annotations

#: class -> (temperature, top_k, top_p, draft kind); each draft has some drafts rejected, some accepted
SAMPLED = {"sampled_keyed": (1.0, None, None, "unrelated"), "sampled_warped": (0.7, 8, 0.9, "perturbed")}
HINTS = {
    "sampled_keyed": "a sampled decoder whose random numbers come from a stream, or are keyed by batch row, "
                     "round or slot instead of (request key, absolute position, purpose), returns other tokens; "
                     "the uniforms to use are in the vector",
    "sampled_warped": "a sampled decoder that warps the logits otherwise than temperature, then top-k, then "
                      "top-p (transformers' warpers), or warps the target and not the draft, returns other tokens",
}
PURPOSES = ("draft", "accept", "residual")
SEED = 0


def fields(cls: str, prompts: list[list[int]], n: int) -> dict:
    """The vector's ``sampling`` and ``uniforms`` for class ``cls``."""
    from ..reference.sampling import uniform

    temperature, top_k, top_p, _ = SAMPLED[cls]
    keys = [[SEED, r] for r in range(len(prompts))]
    table = [{"from": len(p), **{purpose: [uniform(tuple(key), len(p) + i, purpose) for i in range(n + 1)]
                                 for purpose in PURPOSES}} for p, key in zip(prompts, keys)]
    return {"sampling": {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": SEED, "keys": keys},
            "uniforms": table}


def options(sampling: dict) -> dict:
    """``batchspec.generate``'s keywords for a vector's ``sampling`` (keys ``[seed, r]``: an int seed)."""
    return dict(do_sample=True, temperature=sampling["temperature"], top_k=sampling["top_k"],
                top_p=sampling["top_p"], seed=sampling["seed"])


def argument(vector: dict) -> dict:
    """What a Python decoder gets as ``sampling=``: the vector's ``sampling`` with its ``uniforms``."""
    return {**vector["sampling"], "uniforms": vector["uniforms"]}
