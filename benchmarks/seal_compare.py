"""What the seal's re-read costs against what could replace it, side by side (Spec §3.12.1).

``watch`` proves, at each call, that the cached columns it hashed after the
model's previous call still hold those bits: it compares the first layer's
keys and the last layer's values (kv-head 0, the hashed dimensions, as int64
words) with the kept copy, bit for bit, every column every row (the
``re-read`` of ``check_overhead.py``; the design notes say why nothing
cheaper would tell). This benchmark asks whether the compare could read
less. It runs the holes decoder of ``check_overhead.py`` watched to
``--max-new-tokens`` and takes the target's last mask (the columns each row
attends; the rest are rejected drafts kept as holes). On tensors of that
cache's shape and strides (``[B, kv heads, S, head dim]``, ``S`` past the
columns held, as a static or grown cache keeps them), with the kept words
laid out as the seal keeps them, it times, interleaved, after reading the
target's weights between repeats (as a forward would, so the caches start
as cold as the seal finds them):

* ``whole``: the seal's compare, every held column;
* ``attended``: the same compare on the attended columns alone (a seal that
  skipped the holes would read at least these);
* ``hash``: hashing every held column again and comparing with the kept
  hashes (a seal that kept hashes, not bits).

It prints the medians in microseconds and each over ``whole``; all three
find the columns equal (asserted).

    python benchmarks/seal_compare.py [--pair default] [--batch 8] [--max-new-tokens 1024] [--repeat 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from alignment_overhead import load, pair_name  # noqa: E402
from check_overhead import _decoder, _reach  # noqa: E402

from batchspec.invariants import watch  # noqa: E402
from batchspec.invariants.slots import Hasher  # noqa: E402
from options import positive  # noqa: E402


def holes_mask(target, draft, prompts, eos, n: int) -> torch.Tensor:
    """``[B, T]`` bool: the columns each row of the holes decoder's last target call attends."""
    decode = _decoder("holes decoder", target, draft, prompts, 4, n, eos)
    with watch(target=target, draft=draft) as w:
        out = decode()
        w.outputs(prompts, out, max_new_tokens=n)
    assert not w.violations, w.violations[:1]
    last = w.history.carried["target"]
    return last.attended[:, :last.cached].clone()


def contenders(target, mask: torch.Tensor) -> dict:
    """The three compares, on cache-shaped tensors of ``mask``'s ``[B, T]``."""
    b, t = mask.shape
    config = target.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    g = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(b, heads, t + 64, dim, generator=g) for _ in range(2))
    hasher = Hasher()
    words = hasher.words(keys, t), hasher.words(values, t)  # [B, T, w] each: views of the cache
    w = words[0].shape[2]
    kept = torch.cat(words, -1)  # [B, T, 2w]: the seal's kept bits
    kept_hashes = hasher.word_hashes(kept)
    rows, cols = mask.nonzero().unbind(1)
    return {
        "whole": lambda: torch.equal(words[0], kept[..., :w]) and torch.equal(words[1], kept[..., w:]),
        "attended": lambda: torch.equal(words[0][rows, cols], kept[rows, cols, :w])
        and torch.equal(words[1][rows, cols], kept[rows, cols, w:]),
        "hash": lambda: torch.equal(hasher.pair_hashes(keys[:, :, :t], values[:, :, :t]), kept_hashes),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=pair_name, default="default")
    ap.add_argument("--batch", type=positive, default=8)
    ap.add_argument("--max-new-tokens", type=positive, default=1024)
    ap.add_argument("--repeat", type=positive, default=40)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    target, draft, prompts_for, eos = load(args.pair)
    prompts = prompts_for(args.batch)
    _reach(target, draft, max(map(len, prompts)) + args.max_new_tokens + 5)
    mask = holes_mask(target, draft, prompts, eos, args.max_new_tokens)
    runs = contenders(target, mask)
    weights = list(target.parameters())
    times: dict = {name: [] for name in runs}
    with torch.inference_mode():
        for _ in range(args.repeat):
            for name, run in runs.items():
                for p in weights:  # read the weights, as a forward does between two calls' checks
                    p.sum()
                start = time.perf_counter()
                assert run(), name
                times[name].append(time.perf_counter() - start)
    b, t = mask.shape
    print(f"holes decoder, pair {args.pair}, batch {b}, {args.max_new_tokens} tokens: {t} columns held a row, "
          f"{100 * mask.float().mean():.1f}% attended, {100 * mask.any(0).float().mean():.1f}% of columns "
          f"attended by some row; median of {args.repeat}, 1 thread")
    whole = statistics.median(times["whole"])
    for name, ts in times.items():
        median = statistics.median(ts)
        print(f"{name:>10} {1e6 * median:9.1f} us  {median / whole:5.2f}x whole")


if __name__ == "__main__":
    main()
