"""``--sample`` for ``batchspec demo`` and ``batchspec compare``: the sampling
arguments, and the sampled counterpart of the greedy reference (Spec §4.3.2,
§5.5.1): each prompt's per-position reference, which a correct sampled run
equals token for token in float64."""

from __future__ import annotations

from ..testing import reference_sampled
from ..validate import validate_sampling


def add_arguments(parser) -> None:
    """``--sample`` and the warping / seed options it takes."""
    group = parser.add_argument_group("sampling (Spec §4.3.2)")
    group.add_argument("--sample", action="store_true", help="speculative sampling instead of greedy")
    group.add_argument("--temperature", type=float, default=1.0, help="with --sample (default %(default)s)")
    group.add_argument("--top-k", type=int, default=None, help="with --sample")
    group.add_argument("--top-p", type=float, default=None, help="with --sample")
    group.add_argument("--sample-seed", type=int, default=0, help="seed of the keyed uniforms (default %(default)s)")


def options(args) -> dict:
    """``generate``'s sampling keywords from parsed ``args`` (empty when greedy)."""
    if not args.sample:
        return {}
    return dict(do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                seed=args.sample_seed)


def references(target, draft, prompts, max_new_tokens: int, sampling: dict, methods, eos=None) -> list[list[int]]:
    """Each prompt's per-position reference under ``sampling``, keyed as
    ``generate`` keys it (``draft=None``: the autoregressive reference)."""
    keys = validate_sampling("eqspec", methods, prompts=prompts, **sampling)
    return [reference_sampled(target, draft, prompt, max_new_tokens, key, eos, sampling["temperature"],
                              sampling["top_k"], sampling["top_p"]) for prompt, key in zip(prompts, keys)]
