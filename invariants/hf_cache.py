"""A Hugging Face cache read through its public per-layer API, by layer kind (Spec §3.12.1, §3.12.2).

transformers 5 keeps one cache layer per model layer. What the checker needs
of each is the same whatever its class: ``layer.keys`` / ``layer.values``
(``[B, H, S, D]``), ``layer.get_seq_length()`` (the tokens it has seen, its
*stream length* ``T``) and ``cache.get_mask_sizes(n, i)``. Every attention
layer transformers 5.24 ships for decoder-only models keeps the same shape of
record: its first ``min(T, S)`` slots hold the stream's columns
``T - min(T, S) .. T - 1`` in order (a dynamic layer all of them; a static
layer, preallocated to ``max_cache_len``, its written prefix; a sliding
layer, dynamic or static, the newest of them). The checker never iterates a
cache (a static cache is not iterable) and hashes only the columns a call
attends or writes, never the preallocated rest.

A call is hashed only where its columns differ from what the model's
previous call left: a :class:`Seal` compares the rest bit for bit with
what was hashed then.

Layers are grouped by *kind*: ``full`` (every earlier column) and
``("window", W)`` (the newest ``W`` columns, Spec §3.12.2's window rule).
Kinds the checker cannot read (quantized, linear-attention and hybrid layers,
chunked or indexed attention, shared-KV layers, encoder-decoder caches) are
refused by name before the first call runs.
"""

from __future__ import annotations

import time

import torch
from transformers import cache_utils

from .columns import Columns, head

#: the content hash of a column whose key/value the cache no longer holds (evicted by a window):
#: an arbitrary odd constant (not -2**63: a slot of zeros with one negative zero hashes to that)
ABSENT = 0x2545F4914F6CDD1D

_READ = ("full_attention", "sliding_attention")
_WHY = {
    "chunked_attention": "its chunked mask is not a sliding window of the stream",
    "linear_attention": "it keeps a recurrent state, not one key/value per token",
    "conv": "it keeps a convolution state, not one key/value per token",
    "hybrid": "it keeps a recurrent state besides its keys/values",
    "hybrid_sliding": "it keeps a recurrent state besides its keys/values",
    "indexed_attention": "its indexer chooses the attended slots, which no mask shows",
    "dummy": "it shares another layer's keys/values (KV sharing) or holds none",
}


def _refuse(name: str, what: str, why: str) -> ValueError:
    return ValueError(f"watch: the {name} model has {what}, which watch cannot check: {why}")


def kinds_of(model, name: str) -> dict:
    """``{kind: [layer index, ...]}`` of ``model``'s attention layers, from its config
    (``"full"`` or ``("window", W)``); a model the checker cannot read is refused
    here, before any call, with one line naming the layer type and why."""
    config = getattr(model, "config", None)
    if config is None:  # not a transformers model: its cache's first and last layers, read as full attention
        return {"full": [0, -1]}
    if getattr(config, "is_encoder_decoder", False):
        raise _refuse(name, "an encoder-decoder architecture", "its cross-attention cache holds the encoder's "
                      "states, not a decoded stream; watch checks decoder-only models")
    types, kwargs = cache_utils.get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    kinds: dict = {}
    for i, (kind, extra) in enumerate(zip(types, kwargs)):
        if kind not in _READ:
            raise _refuse(name, f"layer {i} of type {kind!r}", _WHY.get(kind, "an unknown layer type"))
        key = "full" if kind == "full_attention" else ("window", int(extra["sliding_window"]))
        kinds.setdefault(key, []).append(i)
    return kinds


def refuse_cache(cache, name: str, accepted: set) -> None:
    """Refuse, before the call runs, a cache whose layers do not keep one key/value
    per token in the public ``keys``/``values`` (quantized, linear-attention,
    encoder-decoder). ``accepted``: the caller's set of the layer-type tuples let
    through so far (the verdict depends on nothing else)."""
    if isinstance(cache, cache_utils.EncoderDecoderCache):
        raise _refuse(name, "an EncoderDecoderCache", "watch checks decoder-only caches")
    layers = getattr(cache, "layers", ())
    types = tuple(map(type, layers))
    if types in accepted:  # read once per combination
        return
    for i, layer in enumerate(layers):
        if isinstance(layer, cache_utils.BaseQuantizedLayer):
            raise _refuse(name, f"a {type(layer).__name__} at layer {i}", "a quantized layer keeps its "
                          "older keys/values quantized and only the newest as computed, so slots cannot be "
                          "read back exactly")
        if isinstance(layer, cache_utils.LinearAttentionCacheLayerMixin):
            raise _refuse(name, f"a {type(layer).__name__} at layer {i}", _WHY["linear_attention"])
        if not isinstance(layer, cache_utils.CacheLayerMixin):  # a DummyLayer: shared or no keys/values
            raise _refuse(name, f"a {type(layer).__name__} at layer {i}", _WHY["dummy"])
    accepted.add(types)


def seen(cache, layer: int = 0) -> int:
    """``T``: the tokens layer ``layer`` of ``cache`` has seen (0 for ``None`` or an empty one)."""
    if cache is None or layer >= len(getattr(cache, "layers", ())):
        return 0
    return int(cache.layers[layer].get_seq_length())


def held(cache, layer: int) -> tuple:
    """``(keys, values, first)``: the slots of layer ``layer`` that hold stream columns,
    ``[B, H, m, D]`` each, and the stream column of the first (``m = min(T, S)``)."""
    entry = cache.layers[layer]
    keys, values = getattr(entry, "keys", None), getattr(entry, "values", None)
    if not isinstance(keys, torch.Tensor) or keys.dim() != 4:
        return None, None, 0
    t = int(entry.get_seq_length())
    m = min(t, keys.shape[2])
    return keys[:, :, :m], values[:, :, :m], t - m


def column_hashes(hasher, cache, layers: list, start: int, stop: int):
    """``[B, stop - start]`` content hashes of stream columns ``start .. stop-1`` as
    ``cache`` holds them now: the keys of the group's first layer and the values
    of its last, read only at those columns; :data:`ABSENT` where the group no
    longer holds a column (evicted by a window). ``None`` when it holds none."""
    if stop > start == seen(cache, layers[0]) - (stop - start) == seen(cache, layers[-1]) - (stop - start):
        keys, values = cache.layers[layers[0]].keys, cache.layers[layers[-1]].values  # the newest columns:
        if keys.shape[2] >= stop and values.shape[2] >= stop:  # read them alone (a call's writes)
            return hasher.pair_hashes(keys[:, :, start: stop], values[:, :, start: stop])
    keys, _, first_k = held(cache, layers[0])
    _, values, first_v = held(cache, layers[-1])
    if keys is None or values is None:
        return None
    first = max(first_k, first_v, start)
    last = min(first_k + keys.shape[2], first_v + values.shape[2], stop)
    out = torch.full((keys.shape[0], stop - start), ABSENT, dtype=torch.int64, device=keys.device)
    if last > first:
        out[:, first - start: last - start] = hasher.pair_hashes(keys[:, :, first - first_k: last - first_k],
                                                                 values[:, :, first - first_v: last - first_v])
    return out



#: From this many kept columns on, :class:`Seal` first compares the newest one alone: a
#: realigned cache fails there at once, without the whole compare (below it, that costs more than it saves)
GLANCE = 256


class Seal:
    """Proof, per model, of which cached columns still hold what was hashed after its
    previous call, so that a call is hashed only where it wrote (Spec §3.12.1).

    After a call, the bits its column hashes were read from (the group's first
    layer's keys and last layer's values, kv-head 0, the hashed dimensions, as
    int64 words: :meth:`~batchspec.invariants.slots.Hasher.words`) are kept. At
    the next call the first ``min(W, T)`` columns the cache holds are compared
    with them, bit for bit (``torch.equal`` on integer words: no rounding, a
    negative zero or a NaN compares as its bits); when all are equal, their
    hashes are the kept ones and only the rest is hashed. Whatever wrote
    into the cache in between (an in-place write, ``.data``, a kernel given
    the raw pointer, a crop, a call that overwrote a slot) shows as a difference
    and the call is hashed in full. A comparison reads the columns a hash would,
    and is a fraction of its cost; no tensor's identity or version is trusted.
    Neither could tell anything here: every call gives a dynamic layer a new
    tensor (``torch.cat``) and bumps a static layer's version (``index_copy_``),
    whether or not something also overwrote an old column, and a kernel given the
    raw pointer (or ``.data``, or an inference tensor) bumps no version at all.
    So the compare is the one part of a call's check that must grow with what
    the call attends rather than what it writes: it reads each cached column's hashed
    bits once (``reread_cpu_seconds`` counts its process CPU time). The hashing
    grows with what the calls wrote (``hashed_columns`` counts the columns hashed).
    From :data:`GLANCE` kept columns on, the newest is compared first, alone: a
    realigned cache differs there and is hashed in full without the whole
    compare; one that passes is still compared whole."""

    def __init__(self):
        #: model -> (words, hashes, views): two :class:`Columns` (each column's key words
        #: then value words; its hash) and their newest views, what was kept after the model's last call
        self._kept: dict = {}
        #: the last call's columns were all read where the cache holds them (no :data:`ABSENT`)
        self.held = False
        #: process CPU seconds spent comparing kept columns with the cache (the re-read)
        self.reread_cpu_seconds = 0.0
        #: stream columns hashed over all calls (each hashed in every row): what the calls wrote, or all
        #: the columns of a call whose compare failed (a realignment, a crop, a write between calls)
        self.hashed_columns = 0

    def hashes(self, hasher, name: str, cache, layers: list, t: int, n: int):
        """``[B, T + n]`` content hashes of the group's columns after a call of ``name``
        that found ``T`` cached (:func:`column_hashes`), the columns compared equal
        to the kept ones not hashed again; then keeps this call's."""
        kept = self._kept.pop(name, None)
        self.held = False
        if not (t + n and seen(cache, layers[0]) == seen(cache, layers[-1]) == t + n):
            return self._whole(hasher, cache, layers, t + n)
        keys, values = cache.layers[layers[0]].keys, cache.layers[layers[-1]].values
        if keys.shape[2] < t + n or values.shape[2] < t + n:  # a window: columns are not slots
            return self._whole(hasher, cache, layers, t + n)
        self.held = True  # every column read from a slot that holds it: none ABSENT
        words = hasher.words(keys, t + n), hasher.words(values, t + n)  # [B, T + n, w] each
        w = words[0].shape[2]
        if kept is None:
            kept = (Columns(), Columns(), None)
        views = kept[2]  # the views kept after the last call: (words [B, W, 2w], keys' then values', hashes)
        c = 0 if views is None or views[0].shape[0] != words[0].shape[0] else min(views[1].shape[1], t)
        start = time.process_time()
        # all or nothing: a decoder that rewrote early columns (a realignment) moved nearly all of them
        was = head(views[0], c) if c and views[0].shape[2] == w + words[1].shape[2] else None
        if was is not None and c >= GLANCE and not torch.equal(words[0][:, c - 1], was[:, c - 1, :w]):
            was = None  # the newest kept column moved: a realignment, whose compare would fail anyway
        if was is None or not (torch.equal(words[0][:, :c], was[..., :w])
                               and torch.equal(words[1][:, :c], was[..., w:])):
            c = 0
        self.reread_cpu_seconds += time.process_time() - start
        b, m = words[0].shape[0], t + n - c
        self.hashed_columns += m
        # the columns to hash, [B, T + n - c, 2w], and their hashes, written where they are kept
        kept_bits, bits = kept[0].reserve(head(views[0], c) if c else None, b, m, (w + words[1].shape[2],),
                                          torch.int64, keys.device)
        torch.cat([words[0][:, c:], words[1][:, c:]] if c else words, -1, out=bits)
        kept_hashes, fresh = kept[1].reserve(head(views[1], c) if c else None, b, m, (), torch.int64, keys.device)
        hasher.word_hashes(bits, out=fresh)
        self._kept[name] = (*kept[:2], (kept_bits, kept_hashes))
        return kept_hashes

    def _whole(self, hasher, cache, layers: list, width: int):
        """All ``width`` stream columns hashed where the cache holds them (:func:`column_hashes`),
        and counted; nothing kept: the next call is hashed whole too."""
        self.hashed_columns += width
        return column_hashes(hasher, cache, layers, 0, width)
