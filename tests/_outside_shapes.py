"""Outside greedy speculative decoders of other shapes than the paper's compact
layout, written without any ``batchspec`` import and without glue: what the
correctness invariants C1-C3 (Spec §3.12) must stay silent on when they are
correct, and must catch when a bug is planted (``bug=``).

* :func:`decode_one`: batch 1, with a fused prefill-and-verify first call
  (``fused``), a draft cache cropped lazily to ``L - 2`` at the next round
  (``lazy``, as transformers' assisted generation does), or a draft re-run
  from scratch every round (``redraft``).
* :func:`decode_subset`: batched; the target keeps a repadded cache, the draft
  is re-run from scratch each round on the rows still running only.
* :func:`decode_right`: batched, right-padded: the prefill feeds every prompt
  slot and commits the first token from its logits; rejected drafts stay in
  the caches as holes.
"""

import torch
from transformers import DynamicCache

from batchspec.examples.outside_decoder import left_pad, repad  # the compact decoder's grid and cache moves


def forward(model, cache, ids, mask):
    """One call; positions are the content index of each input (the mask's running count)."""
    positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -ids.shape[1]:]
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache).logits


def length(cache) -> int:
    return cache.get_seq_length()


def crop_to(cache, n: int) -> None:
    if length(cache) > n:
        cache.crop(n - length(cache))  # transformers 5.24: a negative count


@torch.no_grad()
def decode_one(target, draft, prompt, k, n, fused=False, lazy=False, redraft=False):
    """Greedy speculative decoding of one prompt (see the module docstring)."""
    seq, out = list(prompt), []
    tc, dc = DynamicCache(config=target.config), DynamicCache(config=draft.config)
    if not fused:  # prefill every token but the newest
        forward(target, tc, torch.tensor([seq[:-1]]), torch.ones(1, len(seq) - 1, dtype=torch.long))
    while len(out) < n:
        if redraft:
            dc = DynamicCache(config=draft.config)
        elif lazy:
            crop_to(dc, len(seq) - 2)  # the slot before the newest token is rewritten too
        else:
            crop_to(dc, len(seq) - 1)
        fed, drafts = seq[length(dc):], []
        for _ in range(k):
            logits = forward(draft, dc, torch.tensor([fed]), torch.ones(1, length(dc) + len(fed), dtype=torch.long))
            fed = [int(logits[0, -1].argmax())]
            drafts.append(fed[0])
        inputs = seq[length(tc):] + drafts  # the fused first call: the whole prompt, then the drafts
        logits = forward(target, tc, torch.tensor([inputs]), torch.ones(1, length(tc) + len(inputs), dtype=torch.long))
        choice = logits[0, -(k + 1):].argmax(-1).tolist()
        m = next((j for j in range(k) if drafts[j] != choice[j]), k)
        new = drafts[:m] + [choice[m]]
        seq, out = seq + new, out + new
        crop_to(tc, len(seq) - 1)
    return out[:n]


@torch.no_grad()
def decode_subset(target, draft, prompts, k, budgets):
    """Batched; the draft re-runs from scratch on the still-running rows only
    (``budgets[i]``: tokens row ``i`` wants), the paper's public code's shape."""
    rows, out = [list(p) for p in prompts], [[] for _ in prompts]
    tokens, mask = left_pad(rows)
    tc = DynamicCache(config=target.config)
    forward(target, tc, tokens[:, :-1], mask[:, :-1])
    while any(len(o) < b for o, b in zip(out, budgets)):
        active = [i for i, (o, b) in enumerate(zip(out, budgets)) if len(o) < b]
        sub, sub_mask = left_pad([rows[i] for i in active])
        dc, fed, fed_mask = DynamicCache(config=draft.config), sub, sub_mask
        drafts = sub[:, :0]
        for _ in range(k):
            logits = forward(draft, dc, fed, fed_mask)
            fed = logits[:, -1:].argmax(-1)
            fed_mask = torch.cat([fed_mask, torch.ones_like(fed)], 1)
            drafts = torch.cat([drafts, fed], 1)
        full = torch.zeros((len(rows), k), dtype=torch.long)
        full[active] = drafts  # finished rows verify dummies; their result is discarded
        b, width = tokens.shape
        choice = forward(target, tc, torch.cat([tokens[:, -1:], full], 1),
                         torch.cat([mask, mask.new_ones(b, k)], 1)).argmax(-1)
        m = (full == choice[:, :-1]).long().cumprod(1).sum(1).tolist()
        pad = (mask == 0).sum(1).tolist()
        for i in active:
            new = choice[i, : m[i] + 1].tolist()
            rows[i] += new
            out[i] += new
        keep = [width + (m[i] if i in active else -1) for i in range(len(rows))]
        tokens, mask = left_pad(rows)
        tc = repad(target, tc, pad, keep, tokens.shape[1] - 1)
    return [o[:b] for o, b in zip(out, budgets)]


@torch.no_grad()
def decode_right(target, draft, prompts, k, n):
    """Batched, right-padded prompts; the prefill commits the first token; rejected
    drafts stay as holes (mask 0) and every row appends at the same slot."""
    width = max(map(len, prompts))
    tokens = torch.tensor([list(p) + [0] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
    caches = [DynamicCache(config=target.config), DynamicCache(config=draft.config)]
    b = len(prompts)
    logits = forward(target, caches[0], tokens, mask)  # [B, L, V]
    newest = logits[torch.arange(b), mask.sum(1) - 1].argmax(-1)[:, None]  # [B, 1]: the first token
    forward(draft, caches[1], tokens, mask)
    out = [[int(t)] for t in newest[:, 0]]
    while min(map(len, out)) < n:
        drafts = newest[:, :0]
        for j in range(k + 1):  # k drafts, then the last one's key/value
            fed = newest if j == 0 else drafts[:, -1:]
            logits = forward(draft, caches[1], fed, torch.cat([mask, mask.new_ones(b, j + 1)], 1))
            drafts = torch.cat([drafts, logits[:, -1:].argmax(-1)], 1) if j < k else drafts
        choice = forward(target, caches[0], torch.cat([newest, drafts], 1),
                         torch.cat([mask, mask.new_ones(b, k + 1)], 1)).argmax(-1)  # [B, k + 1]
        m = (drafts == choice[:, :-1]).long().cumprod(1).sum(1)  # [B]
        bonus = choice.gather(1, m[:, None])
        for i in range(b):
            out[i] += drafts[i, : m[i]].tolist() + [int(bonus[i])]
        kept = (torch.arange(k)[None, :] < m[:, None]).long()
        mask = torch.cat([mask, mask.new_ones(b, 1), kept], 1)  # the newest token's slot, then the drafts'
        newest = bonus
    return [o[:n] for o in out]
