"""An outside batched greedy speculative decoder of many small calls, for the
overhead benchmark: right-padded prompts, and nothing in either cache ever
moves. Rejected drafts stay in the caches as masked holes; each round is ``k``
one-token draft calls, a one-token catch-up call that gives the draft its last
draft's key/value, and one target call verifying ``[newest, d_1 .. d_k]``
(four or more calls a round). Written without any ``batchspec`` import, as a
user of ``watch`` would write one (Spec §3.12).

    from holes_decoder import decode
    outputs = decode(target, draft, prompts, k=3, n=64)   # lists of new tokens
"""

import torch
from transformers import DynamicCache


class _Model:
    """One model over a cache that only grows: the mask over its slots and each row's position count."""

    def __init__(self, model, b):
        self.model, self.cache = model, DynamicCache(config=model.config)
        self.mask = torch.zeros((b, 0), dtype=torch.long)
        self.count = torch.zeros(b, dtype=torch.long)

    def __call__(self, ids, fed, positions):
        mask = torch.cat([self.mask, fed], 1)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=self.cache).logits
        self.mask = mask
        return logits

    def next_positions(self, n):
        return self.count[:, None] + torch.arange(n)[None, :]


@torch.no_grad()
def decode(target, draft, prompts, k, n):
    """``n`` greedy tokens per prompt (token lists), ``k`` drafts a round."""
    b = len(prompts)
    width = max(map(len, prompts))
    tokens = torch.tensor([list(p) + [0] * (width - len(p)) for p in prompts])
    mask = (torch.arange(width)[None, :] < torch.tensor([len(p) for p in prompts])[:, None]).long()
    big, small = _Model(target, b), _Model(draft, b)
    for m in (big, small):  # prefill every prompt token; the target's last choice is the first new token
        logits = m(tokens, mask, (mask.cumsum(1) - 1).clamp(min=0))
        m.count = mask.sum(1)
        if m is big:
            newest = logits[torch.arange(b), mask.sum(1) - 1].argmax(-1)
    out = [[int(x)] for x in newest]
    while min(map(len, out)) < n:
        drafts = newest[:, None][:, :0]
        for j in range(k + 1):  # k drafts, then the catch-up
            fed = newest[:, None] if j == 0 else drafts[:, -1:]
            logits = small(fed, torch.ones_like(fed), small.next_positions(1) + j)
            if j < k:
                drafts = torch.cat([drafts, logits[:, -1:].argmax(-1)], 1)
        inputs = torch.cat([newest[:, None], drafts], 1)
        choice = big(inputs, torch.ones_like(inputs), big.next_positions(k + 1)).argmax(-1)  # [B, k+1]
        m = (drafts == choice[:, :-1]).long().cumprod(1).sum(1)  # [B] accepted drafts
        newest = choice.gather(1, m[:, None])[:, 0]
        for i in range(b):
            out[i] += drafts[i, : m[i]].tolist() + [int(newest[i])]
        kept = (torch.arange(k)[None, :] < m[:, None]).long()  # [B, k]: the accepted drafts stay attended
        for model in (big, small):
            model.mask = torch.cat([model.mask[:, : -(k + 1)], torch.ones((b, 1), dtype=torch.long), kept], 1)
            model.count = model.count + m + 1
    return [o[:n] for o in out]
