"""An outside batch speculative decoder, written from the paper's description
only (no ``batchspec`` import): greedy EQSPEC over stock ``DynamicCache`` s,
unpad – append – repad after every round. ``on_boundary(tokens, mask, ...)``
is the optional glue of the layout checks (I1-I8); the correctness checks
(C1-C3) need none. ``bug`` injects one real outsider bug:

* ``"batch_min"``: the target cache realigned by the batch-minimum accepted count;
* ``"rejected"``: the rejected draft appended instead of the target's own token;
* ``"bonus_draft"``: after a round whose drafts were all accepted, the bonus
  token taken from the draft's catch-up prediction instead of the target's;
* ``"pad_from_ids"``: the mask derived from token values (``tokens != 0``), so
  a committed token equal to the pad id 0 is masked out;
* ``"eos_in_prompt"``: a row whose prompt holds ``eos`` returns nothing (the
  stop test reads the whole row, prompt included).

With ``eos``, each output is cut after its first generated EOS. :func:`decode_vector`
is the same decoder called the way ``batchspec conformance check`` calls one."""

# --8<-- [start:decoder]
import torch
from transformers import DynamicCache


def left_pad(rows, device="cpu", from_ids=False):
    """Grid ``[B, L]`` and its mask, each row padded on the left (``from_ids``: the
    mask read off the token values, the bug)."""
    width = max(map(len, rows))
    tokens = torch.tensor([[0] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return tokens, ((tokens != 0).long() if from_ids else mask)


def forward(model, cache, ids, mask, slots=False):
    """``slots``: positions count grid slots, holes included (the BSP masking bug)."""
    if slots:
        positions = torch.arange(mask.shape[1], device=mask.device) - (mask.cumsum(1) == 0).sum(1, keepdim=True)
    else:
        positions = mask.cumsum(1) - 1  # content index
    positions = positions.clamp(min=0)[:, -ids.shape[1]:]
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache).logits


def repad(model, cache, pad, keep, width):
    """A new cache: row ``i``'s slots ``pad[i] .. keep[i]-1``, left-padded to ``width`` slots."""
    layers = []
    for keys, values, *_ in cache:
        new = [t.new_zeros(t.shape[:2] + (width,) + t.shape[3:]) for t in (keys, values)]
        for i, (p, e) in enumerate(zip(pad, keep)):
            for old, out in zip((keys, values), new):
                out[i, :, width - (e - p):] = old[i, :, p:e]
        layers.append(tuple(new))
    return DynamicCache(layers, config=model.config)


@torch.no_grad()
def decode(target, draft, prompts, k, n, on_boundary=lambda *a, **kw: None, bug=None, eos=None):
    rows, out = [list(p) for p in prompts], [[] for _ in prompts]
    tokens, mask = left_pad(rows, target.device)
    caches = [DynamicCache(config=target.config), DynamicCache(config=draft.config)]
    for model, cache in zip((target, draft), caches):  # prefill: every slot but the newest
        forward(model, cache, tokens[:, :-1], mask[:, :-1])
    on_boundary(tokens, mask)
    while min(map(len, out)) < n:
        b, width = tokens.shape
        drafts = tokens[:, :0]
        for j in range(k + 1):  # k drafts, then the last one's key/value (catch-up)
            fed = tokens[:, -1:] if j == 0 else drafts[:, -1:]
            logits = forward(draft, caches[1], fed, torch.cat([mask, mask.new_ones(b, j)], 1))
            drafts = torch.cat([drafts, logits[:, -1:].argmax(-1)], 1) if j < k else drafts
        after = logits[:, -1].argmax(-1)  # the draft's guess after its last draft (catch-up)
        choice = forward(target, caches[0], torch.cat([tokens[:, -1:], drafts], 1),
                         torch.cat([mask, mask.new_ones(b, k)], 1)).argmax(-1)  # [B, k+1]
        m = (drafts == choice[:, :-1]).long().cumprod(1).sum(1).tolist()  # accepted drafts
        for i in range(b):
            new = (drafts[i, :m[i] + 1] if bug == "rejected" and m[i] < k else choice[i, :m[i] + 1]).tolist()
            if bug == "bonus_draft" and m[i] == k:
                new[-1] = int(after[i])
            rows[i] += new
            out[i] += new
        pad = (mask == 0).sum(1).tolist()
        keep = [width + mi for mi in m]  # the newest token and the accepted drafts gain slots
        if bug == "batch_min":
            keep0 = [width + min(m)] * b
        tokens, mask = left_pad(rows, target.device, from_ids=bug == "pad_from_ids")
        caches = [repad(target, caches[0], pad, keep0 if bug == "batch_min" else keep, tokens.shape[1] - 1),
                  repad(draft, caches[1], pad, keep, tokens.shape[1] - 1)]
        on_boundary(tokens, mask, target_cache=caches[0], draft_cache=caches[1])
    return [cut(o[:n], p, eos, bug) for o, p in zip(out, prompts)]


def cut(out, prompt, eos, bug=None):
    """``out`` after its first EOS (the bug: nothing at all when the prompt holds one)."""
    if eos is None:
        return out
    if bug == "eos_in_prompt" and eos in prompt:
        return []
    return out[: out.index(eos) + 1] if eos in out else out
# --8<-- [end:decoder]


def decode_vector(target, draft, prompts, k, max_new_tokens, eos_token_id):
    """:func:`decode` with the conformance checker's signature (``batchspec conformance
    check DIR --decoder batchspec.examples.outside_decoder:decode_vector --greedy-only``):
    one budget per prompt (a list) is decoded to the largest and each row cut at its own
    budget, then after its first id from the list ``eos_token_id``."""
    budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
    out = [row[:budget] for row, budget in zip(decode(target, draft, prompts, k, max(budgets, default=0)), budgets)]
    ends = [next((j + 1 for j, t in enumerate(row) if t in eos_token_id), len(row)) for row in out]
    return [row[:end] for row, end in zip(out, ends)]


@torch.no_grad()
def decode_holes(target, draft, prompts, k, n, on_boundary=lambda *a, **kw: None, slots=False):
    """The same rounds, but nothing moves: rejected drafts stay in the grid as
    holes (mask 0) and the bonus token takes the round's last slot (Spec §7.1)."""
    tokens, mask = left_pad([list(p) for p in prompts], target.device)
    out = [[] for _ in prompts]
    caches = [DynamicCache(config=target.config), DynamicCache(config=draft.config)]
    for model, cache in zip((target, draft), caches):
        forward(model, cache, tokens[:, :-1], mask[:, :-1], slots)
    on_boundary(tokens, mask)
    while min(map(len, out)) < n:
        b = tokens.shape[0]
        drafts = tokens[:, :0]
        for j in range(k + 1):
            fed = tokens[:, -1:] if j == 0 else drafts[:, -1:]
            logits = forward(draft, caches[1], fed, torch.cat([mask, mask.new_ones(b, j)], 1), slots)
            drafts = torch.cat([drafts, logits[:, -1:].argmax(-1)], 1) if j < k else drafts
        choice = forward(target, caches[0], torch.cat([tokens[:, -1:], drafts], 1),
                         torch.cat([mask, mask.new_ones(b, k)], 1), slots).argmax(-1)  # [B, k+1]
        m = (drafts == choice[:, :-1]).long().cumprod(1).sum(1)  # [B]
        bonus = choice.gather(1, m[:, None])  # [B, 1]
        for i in range(b):
            out[i] += drafts[i, :m[i]].tolist() + [int(bonus[i])]
        tokens = torch.cat([tokens, drafts, bonus], 1)
        mask = torch.cat([mask, (torch.arange(k, device=m.device)[None, :] < m[:, None]).long(), mask.new_ones(b, 1)], 1)
        on_boundary(tokens, mask)
    return [o[:n] for o in out]
