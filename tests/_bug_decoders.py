"""Outside batched greedy speculative decoders with one bug class planted at a
time, in several cache layouts; written without any ``batchspec`` import, as
a user of ``watch`` would write them (Spec §3.12).

Layouts (``layout=``):

* ``"repad"``: left-padded prompts, the caches rebuilt compact after every
  round (unpad, append, repad);
* ``"left_holes"`` / ``"right_holes"``: left- or right-padded prompts; nothing
  moves, rejected drafts stay in the caches as masked holes;
* ``"static"``: a preallocated tensor cache per model, ``[B, H, W, D]`` per
  layer, with a write offset per row (rows hold their tokens in slots
  ``0 .. offset - 1``; what lies beyond is stale and masked), the layout of
  kernels that take per-row cache lengths. Each call runs over a
  ``DynamicCache`` viewing slots ``0 .. max offset - 1``; what it wrote is
  copied back at each row's own offset.

Every round: ``k`` draft calls, a catch-up call that gives the draft its last
draft's key/value, one target call verifying ``[newest, d_1 .. d_k]``. Row
``i`` verifies only its first ``ks(round, i)`` drafts (``ks=None``: all ``k``);
the target's mask hides the others.

Bugs (``bug=``), each a class reported in real implementations:

* ``"stale"``: the target keeps attending its rejected drafts (positions right);
* ``"offset_block"``: every row's cache offset (and position count) advanced by
  the whole draft block, whatever was accepted;
* ``"zeroed"``: the target's rejected keys and values zeroed, still attended;
* ``"positions"``: position ids not advanced past the bonus token;
* ``"crop_short"``: the caches cropped one slot short after a round with an
  accepted draft (the last accepted draft's key/value dropped);
* ``"crop_rows"``: row 0's crop (its accepted count) applied to every row;
* ``"bonus_draft"``: the bonus token taken from the draft's argmax;
* ``"pad_from_ids"``: masks derived from token values (``token != 0``);
* ``"bonus_dup"``: the bonus duplicated into the next round's first draft and
  committed again as an accepted draft;
* ``"zero_drafts"``: a row that verifies no draft this round commits the
  draft's token instead of the target's;
* ``"batch_max"``: position ids counted from the batch's largest acceptance.
"""

import torch
from transformers import DynamicCache

WIDTH = 256  #: slots of a static cache
LAYOUTS = ("repad", "left_holes", "right_holes", "static")
BUGS = ("stale", "offset_block", "zeroed", "positions", "crop_short", "crop_rows", "bonus_draft", "pad_from_ids",
        "bonus_dup", "zero_drafts", "batch_max")


class Model:
    """One model's cache in a layout: the cache object, the mask over its slots
    ``[B, T]`` and each row's position count (tokens in its chain)."""

    def __init__(self, model, layout, b):
        self.model, self.layout = model, layout
        self.cache = DynamicCache(config=model.config)
        self.mask = torch.zeros((b, 0), dtype=torch.long)
        self.count = torch.zeros(b, dtype=torch.long)
        self.store, self.offset = None, torch.zeros(b, dtype=torch.long)  # static: [layers][2] [B, H, W, D]
        if layout == "static":
            self.mask = torch.ones((b, WIDTH), dtype=torch.long)

    def __call__(self, ids, fed_mask, positions):
        """One call over the cache: ``ids`` ``[B, n]``, ``fed_mask`` ``[B, n]``."""
        if self.layout == "static":
            return self._static(ids, fed_mask, positions)
        mask = torch.cat([self.mask, fed_mask], 1)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=self.cache).logits
        self.mask = mask
        return logits

    def _static(self, ids, fed_mask, positions):
        b, n = ids.shape
        t = int(self.offset.max())
        layers = [] if self.store is None else [(k[:, :, :t].clone(), v[:, :, :t].clone()) for k, v in self.store]
        cache = DynamicCache(layers, config=self.model.config) if layers else DynamicCache(config=self.model.config)
        held = (torch.arange(t)[None, :] < self.offset[:, None]).long() * self.mask[:, :t]  # [B, T]
        logits = self.model(input_ids=ids, attention_mask=torch.cat([held, fed_mask], 1), position_ids=positions,
                            cache=cache).logits
        if self.store is None:
            self.store = [tuple(x.new_zeros(x.shape[:2] + (WIDTH,) + x.shape[3:]) for x in (lay.keys, lay.values))
                          for lay in cache.layers]
        for (keys, values), lay in zip(self.store, cache.layers):
            for i in range(b):
                o = int(self.offset[i])
                keys[i, :, o:o + n], values[i, :, o:o + n] = lay.keys[i, :, t:], lay.values[i, :, t:]
        for i in range(b):
            self.mask[i, int(self.offset[i]): int(self.offset[i]) + n] = fed_mask[i]
        self.offset = self.offset + n
        return logits

    def positions(self, n):
        return self.count[:, None] + torch.arange(n)[None, :]


def left(prompts):
    width = max(map(len, prompts))
    tokens = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts])
    return tokens, (torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()


def right(prompts):
    width = max(map(len, prompts))
    tokens = torch.tensor([list(p) + [0] * (width - len(p)) for p in prompts])
    return tokens, (torch.arange(width)[None, :] < torch.tensor([len(p) for p in prompts])[:, None]).long()


@torch.no_grad()
def decode(target, draft, prompts, k, n, layout="right_holes", bug=None, ks=None, waste=False):
    """Greedy speculative decoding of ``prompts`` (see the module docstring). ``waste``:
    a correct but wasteful decoder: after a partial acceptance it commits the
    accepted drafts only, so the next round drafts, and verifies again, the very
    draft the target has just rejected."""
    b = len(prompts)
    models = [Model(target, layout, b), Model(draft, layout, b)]
    out = [[] for _ in prompts]
    if layout == "right_holes":  # prefill every prompt token; the target's last choice is the first token
        tokens, mask = right(prompts)
        for m in models:
            logits = m(tokens, mask, (mask.cumsum(1) - 1).clamp(min=0))
            m.count = mask.sum(1)
            if m.model is target:
                newest = logits[torch.arange(b), mask.sum(1) - 1].argmax(-1)
        out = [[int(x)] for x in newest]
    else:  # prefill every prompt token but the newest
        tokens, mask = left(prompts) if layout != "static" else right(prompts)
        newest = tokens[torch.arange(b), mask.sum(1) - 1] if layout == "static" else tokens[:, -1]
        for m in models:
            if layout == "static":
                fed = tokens.clone()
                fed_mask = mask.clone()
                fed_mask[torch.arange(b), mask.sum(1) - 1] = 0  # the newest token waits for the first round
                m(fed, fed_mask, (fed_mask.cumsum(1) - 1).clamp(min=0))
                m.offset = fed_mask.sum(1)  # the static cache keeps each row's content only
                m.mask[:] = 1
            else:
                fed_mask = _ids_mask(tokens[:, :-1]) if bug == "pad_from_ids" else mask[:, :-1]
                m(tokens[:, :-1], fed_mask, (fed_mask.cumsum(1) - 1).clamp(min=0))
            m.count = mask.sum(1) - 1
    rnd, dup = 0, None
    while min(map(len, out)) < n:
        rnd += 1
        drafts = newest[:, None][:, :0]
        for j in range(k + 1):  # k drafts, then the catch-up
            fed = newest[:, None] if j == 0 else drafts[:, -1:]
            logits = models[1](fed, torch.ones_like(fed), models[1].positions(1) + j)
            if j < k:
                guess = logits[:, -1:].argmax(-1)
                if bug == "bonus_dup" and j == 0 and dup is not None:
                    guess = dup[:, None]  # the last bonus again, as the first draft
                drafts = torch.cat([drafts, guess], 1)
        after = logits[:, -1].argmax(-1)  # the draft's guess after its last draft
        inputs = torch.cat([newest[:, None], drafts], 1)
        limit = torch.tensor([k if ks is None else ks(rnd, i) for i in range(b)])
        shown = (torch.arange(k + 1)[None, :] <= limit[:, None]).long()  # a row's drafts beyond its own k: masked
        choice = models[0](inputs, shown, models[0].positions(k + 1)).argmax(-1)  # [B, k+1]
        m = torch.minimum((drafts == choice[:, :-1]).long().cumprod(1).sum(1), limit)  # [B]
        if bug == "bonus_dup" and dup is not None:  # the duplicate counts as accepted
            m = torch.minimum(1 + (drafts[:, 1:] == choice[:, 1:-1]).long().cumprod(1).sum(1), limit)
        bonus = choice.gather(1, m[:, None])[:, 0]
        if bug == "bonus_draft":
            bonus = torch.where(m < k, drafts.gather(1, m.clamp(max=k - 1)[:, None])[:, 0], after)
        if bug == "zero_drafts":
            bonus = torch.where(limit == 0, drafts[:, 0], bonus)
        slow = (m > 0) & (m < k) & waste  # commit the accepted drafts only: the last one becomes the newest
        for i in range(b):
            out[i] += drafts[i, : m[i]].tolist() + ([] if slow[i] else [int(bonus[i])])
        _settle(models, layout, bug, m - slow.long(), k, inputs, drafts)
        dup = bonus if bug == "bonus_dup" else None
        newest = torch.where(slow, drafts.gather(1, (m - 1).clamp(min=0)[:, None])[:, 0], bonus)
    return [o[:n] for o in out]


def _ids_mask(ids):
    return (ids != 0).long()


def _settle(models, layout, bug, m, k, inputs, drafts):
    """After verification: each model keeps the newest token and the accepted drafts."""
    b = m.shape[0]
    keep = m
    if bug == "offset_block":
        keep = torch.full_like(m, k)
    if bug == "crop_rows":
        keep = m[:1].expand(b)
    if bug == "crop_short":
        keep = (m - 1).clamp(min=0)
    for which, model in enumerate(models):
        kept = (torch.arange(k)[None, :] < keep[:, None]).long()  # [B, k]: drafts kept
        if bug in ("stale", "zeroed") and which == 0:
            kept = torch.ones_like(kept)
        newest = torch.ones((b, 1), dtype=torch.long)
        if bug == "pad_from_ids":
            newest, kept = newest * _ids_mask(inputs[:, :1]), kept * _ids_mask(drafts)
        if bug == "zeroed" and which == 0:
            _zero(model, layout, m, k)
        if layout == "static":
            start = model.offset - k - 1
            for i in range(b):
                model.mask[i, int(start[i]): int(start[i]) + k + 1] = torch.cat([newest, kept], 1)[i]
            model.offset = start + 1 + kept.sum(1)
        elif layout == "repad":
            _repad(model, torch.cat([newest, kept], 1), k)
        else:
            model.mask = torch.cat([model.mask[:, : -(k + 1)], newest, kept], 1)
        advance = {"positions": keep, "batch_max": m.max().expand(b) + 1}.get(bug, keep + 1)
        if bug in ("stale", "zeroed") and which == 0:
            advance = m + 1  # positions counted right; only the mask keeps the rejected drafts
        model.count = model.count + advance


def _zero(model, layout, m, k):
    """Zero the keys and values of each row's rejected drafts in the target cache."""
    if layout == "static":
        pairs = model.store
        end = model.offset
    else:
        pairs = [(lay.keys, lay.values) for lay in model.cache.layers]
        end = torch.full_like(m, model.cache.get_seq_length())
    for keys, values in pairs:
        for i in range(m.shape[0]):
            start = int(end[i]) - k + int(m[i])
            keys[i, :, start: int(end[i])] = 0
            values[i, :, start: int(end[i])] = 0


def _repad(model, last, k):
    """Compact: each row keeps its attended slots, the round's last ``k + 1`` masked by ``last``."""
    mask = torch.cat([model.mask[:, : -(k + 1)], last], 1)
    width = int(mask.sum(1).max())
    layers = []
    for lay in model.cache.layers:
        new = [x.new_zeros(x.shape[:2] + (width,) + x.shape[3:]) for x in (lay.keys, lay.values)]
        for i in range(mask.shape[0]):
            slots = mask[i].nonzero().flatten()
            for old, dst in zip((lay.keys, lay.values), new):
                dst[i, :, width - len(slots):] = old[i, :, slots]
        layers.append(tuple(new))
    model.cache = DynamicCache(layers, config=model.model.config)
    model.mask = (torch.arange(width)[None, :] >= width - mask.sum(1)[:, None]).long()
