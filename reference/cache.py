"""The one module that touches transformers' KV-cache API (Spec §2.3).

Everything else in batchspec sees a cache only through these functions. The
paper's own code died on a cache-API redesign; keeping the surface this small
is what lets the rest of the project survive the next one.

Tested against transformers 5.24 (see ``pyproject.toml`` for the range):

* the forward keyword is ``cache=`` (``past_key_values=`` warns, and is
  removed in 5.40) and outputs carry ``.cache``;
* ``DynamicCache.crop(n)`` takes a *negative* count of slots to drop;
* every layer exposes ``.keys`` / ``.values`` shaped ``[B, kv_heads, T, head_dim]``.

Attention must be SDPA. With ``attn_implementation="eager"`` in float64 and
left padding, transformers 5.24 produces NaN for Llama/Qwen: a pad query row
whose keys are all masked softmaxes over nothing, and the NaN then sits in the
cache's padding slots, where it poisons every later row (0 x NaN = NaN).
"""

from __future__ import annotations

import copy
import weakref

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = [
    "new_cache",
    "cache_length",
    "layer_tensors",
    "stacked_tensor",
    "crop_to",
    "realign",
    "shift",
    "stack",
    "split",
    "Row",
    "run_forward",
    "expanded_mask",
    "check_supported",
]


class Store:
    """One tensor per model holding every layer's keys and values (Spec §2.3):
    ``data[2l]`` / ``data[2l + 1]`` are layer ``l``'s keys / values, ``[B,
    kv_heads, capacity, head_dim]`` each, of which the first ``rows`` rows and
    ``length`` slots are live. Stacking the layers is what makes the
    realignment of Spec §4.5 one copy per moving row whatever the layer
    count, and spare capacity is what lets a forward call append its slots in place
    instead of concatenating (copying) the whole cache, as ``DynamicCache`` does.
    """

    def __init__(self, layers: int, capacity: int = 0):
        self.data: torch.Tensor | None = None  # [2·layers, B, H, capacity, D]
        self.reserve = capacity  # the least capacity of the first allocation
        self.rows = 0
        self.appended = 0  # slots appended since the last realignment (a round's speculative slots)
        self.scratch: torch.Tensor | None = None  # [2·layers, H, capacity, D], see row_scratch
        self.spare = 8  # capacity a realignment leaves after the live slots: the most a round appended
        self.layers = [StackedLayer(self, index) for index in range(layers)]

    def allocate(self, like: torch.Tensor, rows: int, capacity: int) -> None:
        """Zeroed storage for ``rows`` rows, heads and head dim as ``like`` ``[*,
        H, *, D]``; zeros keep never-written slots finite (I3)."""
        self.data = like.new_zeros((2 * len(self.layers), rows, like.shape[1], capacity, like.shape[3]))
        self.rows = rows
        self.refresh()

    def row_scratch(self) -> torch.Tensor:
        """A reusable buffer of one row's slots, ``[2·layers, H, capacity, D]``,
        for a row whose content moves within itself (:func:`shift`)."""
        if self.scratch is None or self.scratch.shape[2] < self.data.shape[3]:
            self.scratch = self.data.new_empty(self.data.shape[:1] + self.data.shape[2:])
        return self.scratch

    def fill(self, length: int) -> None:
        """Declare ``length`` slots of every layer live (after a bulk write)."""
        for layer in self.layers:
            layer.length, layer.is_initialized, layer.device = length, True, self.data.device
        self.refresh()

    def grow(self, needed: int) -> None:
        """Move to a larger buffer (one copy of the live rows, amortised:
        capacity grows by half). Rows that left the batch are not copied."""
        old = self.data[:, : self.rows]
        self.data = old.new_zeros(old.shape[:3] + (max(needed, old.shape[3] * 3 // 2 + 8),) + old.shape[4:])
        self.data[:, :, :, : old.shape[3]] = old
        self.refresh()

    def refresh(self) -> None:
        """Point every layer at its live rows of the storage, and its ``keys`` /
        ``values`` at its live slots (views); after the storage or the row
        count changed."""
        for layer in self.layers:
            layer.rows = (self.data[2 * layer.index, : self.rows], self.data[2 * layer.index + 1, : self.rows])
            layer.view()


class StackedLayer(CacheLayerMixin):
    """One model layer's cache as views into the model's :class:`Store`.

    ``keys`` / ``values`` are always ``[B, H, T, D]`` views of exactly the
    live slots, so transformers' attention and :func:`layer_tensors` read
    them as they would a ``DynamicLayer``'s tensors.
    """

    is_sliding = False
    is_croppable = True

    def __init__(self, store: Store, index: int):
        super().__init__()
        # a weak reference: the store holds its layers, and a strong one back would make a cycle that
        # keeps the cache's tensors alive until Python's cycle collector runs, after the decode is over
        self._store, self.index, self.length = weakref.ref(store), index, 0
        self.rows: tuple[torch.Tensor, torch.Tensor] | None = None  # keys, values [B, H, capacity, D]

    @property
    def store(self) -> Store:
        return self._store()

    def __deepcopy__(self, memo):
        """A copy over the copy of its store (``copy.deepcopy`` of a cache, as
        the exhaustive check does per branch): a weak reference would
        otherwise be copied as it is, pointing at the original store."""
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        store = copy.deepcopy(self.store, memo)  # the store's copy, made once per memo
        for name, value in self.__dict__.items():
            new.__dict__[name] = weakref.ref(store) if name == "_store" else copy.deepcopy(value, memo)
        return new

    def view(self) -> None:
        keys, values = self.rows
        self.keys, self.values = keys[:, :, : self.length], values[:, :, : self.length]

    def lazy_initialization(self, key_states, value_states) -> None:
        if self.store.data is None:
            n = key_states.shape[2]
            self.store.allocate(key_states, key_states.shape[0], max(n + max(n // 2, 16), self.store.reserve))
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        """Write ``n`` new slots after the live ones, in place; return the views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        data, n = self.store.data, key_states.shape[2]
        if key_states.shape[:2] != (self.store.rows, data.shape[2]) or key_states.shape[3] != data.shape[4]:
            raise ValueError(f"cache layer {self.index}: keys {tuple(key_states.shape)} do not fit the stacked "
                             f"cache {tuple(data.shape)} (every layer must have the same kv heads and head dim)")
        if self.length + n > data.shape[3]:
            self.store.grow(self.length + n)
            data = self.store.data
        keys, values = self.rows
        keys[:, :, self.length: self.length + n] = key_states
        values[:, :, self.length: self.length + n] = value_states
        if self.index == 0 and self.length:  # appends after the first fill, counted once per call
            self.store.appended += n
        self.length += n
        self.view()
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """Drop ``-tokens_to_remove`` trailing slots (transformers' negative count)."""
        self.length += tokens_to_remove
        self.view()

    def reset(self) -> None:
        self.length = 0
        if self.rows is not None:
            self.view()


class StackedCache(Cache):
    """A transformers ``Cache`` whose layers share one :class:`Store`."""

    def __init__(self, layers: int, capacity: int = 0):
        self.store = Store(layers, capacity)
        self.sources: list | None = None  # (Row, pad) of each row, when made by stack()
        super().__init__(layers=self.store.layers)

    def __iter__(self):
        """Per layer ``(keys, values)``, ``[B, H, T, D]`` each, as ``DynamicCache``
        yields them: what ``batchspec.invariants.watch`` reads of any cache."""
        for layer in self.layers:
            yield getattr(layer, "keys", None), getattr(layer, "values", None)


def new_cache(model, capacity: int = 0) -> StackedCache:
    """An empty layer-stacked cache for ``model`` (Spec §2.3), whose first
    write allocates room for at least ``capacity`` slots: a decoder that
    knows how long its rows can grow never has to grow the storage."""
    return StackedCache(model.config.get_text_config(decoder=True).num_hidden_layers, capacity)


def check_supported(model, name: str) -> None:
    """Raise ``ValueError`` when ``model`` cannot be run by batchspec (Spec §2.3)."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in (None, "sdpa"):
        raise ValueError(
            f"{name}: attn_implementation={impl!r} is not supported; load the model with "
            "attn_implementation='sdpa' (eager attention in float64 with left padding gives "
            "NaN in transformers 5.24: fully masked query rows)"
        )
    layer_types = DynamicCache(config=model.config).layers  # what transformers would build for this model
    if any(getattr(layer, "is_sliding", False) for layer in layer_types):
        raise ValueError(
            f"{name}: sliding-window cache layers are not supported (their slots are not the "
            "sequence positions that the realignment of Spec §4.5 moves)"
        )


def cache_length(cache: StackedCache) -> int:
    """Number of slots ``T`` held by every layer (0 for an empty cache)."""
    return cache.get_seq_length()


def layer_tensors(cache: StackedCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ``(keys, values)``, each ``[B, kv_heads, T, head_dim]``: views
    of exactly the live slots (no copy)."""
    return [(layer.keys, layer.values) for layer in cache.layers if layer.is_initialized and layer.length]


def stacked_tensor(cache: StackedCache) -> torch.Tensor | None:
    """Every layer's live keys and values as one view ``[2·layers, B, kv_heads, T,
    head_dim]`` of the store (layer ``l``'s keys at ``2l``, values at ``2l + 1``),
    of which :func:`layer_tensors` are the slices; None unless every layer is
    live at one length. Lets a check that reads every slot make one pass."""
    lengths = {layer.length if layer.is_initialized else 0 for layer in cache.layers}
    if cache.store.data is None or len(lengths) != 1 or not next(iter(lengths)):
        return None
    return cache.store.data[:, : cache.store.rows, :, : lengths.pop()]


def crop_to(cache: StackedCache, length: int) -> None:
    """Drop trailing slots so that ``length`` remain (no-op if already that long)."""
    extra = cache_length(cache) - length
    if extra < 0:
        raise ValueError(f"cannot crop a cache of {cache_length(cache)} slots to {length}")
    if extra:
        cache.crop(-extra)
    cache.store.spare = max(cache.store.spare, cache.store.appended)
    cache.store.appended = 0


def realign(cache: StackedCache, rows: torch.Tensor, slots: torch.Tensor) -> None:
    """Move cache entries: new ``[b, :, s]`` = old ``[rows[b], :, slots[b, s]]``.

    The general realignment, for an arbitrary slot map: the fault catalogue
    and the baselines use it to move slots where the paper's rule would not.
    EQSPEC itself uses :func:`shift`, which does the same for the maps the
    rule of Spec §4.4 makes without allocating. One ``index_select`` over the
    layer-stacked tensor, whatever the layer count (Spec §4.5); its result
    *is* the new storage, with ``spare`` slots after the ``T'`` moved ones
    (copies of slot 0, finite, never attended before they are written).
    ``rows``: ``[B']`` kept batch rows; ``slots``: ``[B', T']``.
    """
    store = cache.store
    if store.data is None:
        return
    layers2, _, heads, capacity, dim = store.data.shape
    width = slots.shape[1]
    store.spare = max(store.spare, store.appended)
    room = torch.cat([slots, slots.new_zeros((slots.shape[0], store.spare))], dim=1)  # [B', T' + spare]
    # flat index of source (row, head, slot) along the [B·H·capacity] axis: [B'·H·(T' + spare)]
    flat = (rows[:, None, None] * heads * capacity + torch.arange(heads, device=rows.device)[None, :, None]
            * capacity + room[:, None, :]).reshape(-1)
    moved = store.data.view(layers2, -1, dim).index_select(1, flat)  # [2·layers, B'·H·(T' + spare), D]
    store.data = moved.view(layers2, rows.numel(), heads, room.shape[1], dim)
    store.rows, store.appended = rows.numel(), 0
    for layer in cache.layers:
        layer.length = width
    store.refresh()


def shift(cache: StackedCache, rows: torch.Tensor, delta: torch.Tensor, pad: torch.Tensor, width: int) -> None:
    """Realign in place: kept row ``rows[b]`` becomes row ``b``, its content
    moved by ``δ_b`` so that it fills slots ``p'_b .. width - 1`` (Spec §4.5).

    ``rows``, ``delta`` (``δ_i``) and ``pad`` (``p'_i``) are ``[B']``;
    ``width`` is ``T' = L' - 1``. Row ``b``'s ``n_b = width - p'_b`` content
    slots come from old slots ``p'_b - δ_b ..`` of row ``rows[b]``: one copy
    per row that moves or changes index, all layers at once, and none for a
    row that stays put (``δ_b = 0``, ``rows[b] = b``), which is only cropped.
    Rows are taken in increasing order, so a row's source is never a row
    already overwritten. A row that moves within itself (source and target
    overlap) goes through the store's reusable one-row scratch; nothing else
    is allocated. Padding slots keep what the storage held there, finite and
    masked: I3 checks at every boundary that they are finite.
    """
    store = cache.store
    store.spare = max(store.spare, store.appended)
    store.appended = 0
    if store.data is None:  # nothing was ever written
        return
    data = store.data  # [2·layers, B, H, capacity, D]
    for b, (row, d, q) in enumerate(zip(rows.tolist(), delta.tolist(), pad.tolist())):
        n, p = width - q, q - d  # content slots; their old start p_i
        if n <= 0 or (row == b and d == 0):
            continue
        source = data[:, row, :, p: p + n]  # [2·layers, H, n, D]
        if row == b:  # source and target overlap: go through the one-row scratch
            source = store.row_scratch()[:, :, :n].copy_(source)
        data[:, b, :, q: q + n] = source
    for layer in cache.layers:
        layer.length = width
    if store.rows != rows.numel():
        store.rows = rows.numel()
        store.refresh()
    else:  # same rows: only the lengths changed
        for layer in cache.layers:
            layer.view()


class Row:
    """One sequence's cache, unpadded: an EXSPEC member's (Spec §8.3).

    ``data`` ``[2·layers, 1, H, capacity, D]`` holds every layer's keys and
    values as a :class:`Store` does, for one row, of which the first
    ``length`` slots are live (``data`` is None while nothing is cached).
    A Row never changes: :func:`split` gives the longer row as a new Row,
    which may share ``data``. It writes ``data`` only past this Row's
    ``length``, and only while no Row over ``data`` is longer (``tip``, the
    longest length written, shared by the Rows over one storage): so no
    reader of a Row, a pool snapshot's member included, ever sees its slots
    change, whatever is restored and run again (Spec §8.6).
    """

    __slots__ = ("data", "length", "tip")

    def __init__(self, data: torch.Tensor | None = None, length: int = 0, tip: list[int] | None = None):
        self.data, self.length = data, length
        self.tip = [length] if tip is None else tip

    def stacked(self) -> torch.Tensor | None:
        """Every layer's live slots, one view ``[2·layers, 1, H, length, D]``."""
        return self.data[:, :, :, : self.length] if self.length else None

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer ``(keys, values)`` ``[1, H, length, D]``, views, as
        :func:`layer_tensors` gives a batch's (``[]`` when empty)."""
        live = self.stacked()
        return [] if live is None else [(live[2 * i], live[2 * i + 1]) for i in range(live.shape[0] // 2)]

    def extensible(self, n: int) -> bool:
        """Whether :func:`split` may write slots ``length .. n - 1`` in place:
        nothing over this storage was written past ``length``, there is room,
        and the storage may be written here (an inference-mode tensor only
        inside inference mode)."""
        return (self.length > 0 and self.tip[0] == self.length and n <= self.data.shape[3]
                and _writable(self.data))


def _writable(t: torch.Tensor) -> bool:
    """Whether ``t`` may be written in place now (inference tensors refuse it outside inference mode)."""
    return not t.is_inference() or torch.is_inference_mode_enabled()


def _fits(cache: StackedCache | None, like: torch.Tensor, rows: int, capacity: int) -> bool:
    """Whether ``cache``'s storage can be written now and hold ``rows`` rows
    of ``capacity`` slots shaped as ``like`` ``[2·layers, 1, H, *, D]``."""
    data = cache.store.data if cache is not None else None
    return (data is not None and data.dtype == like.dtype and data.device == like.device
            and data.shape[1] >= rows and data.shape[3] >= capacity and _writable(data)
            and (data.shape[0], data.shape[2], data.shape[4]) == (like.shape[0], like.shape[2], like.shape[4]))


def stack(model, rows: list[Row], pad: list[int], reuse: StackedCache | None = None) -> StackedCache:
    """One batch cache from per-sequence rows (EXSPEC, Spec §8.3).

    Row ``b`` of the result is ``pad[b]`` padding slots, then ``rows[b]``'s
    slots; ``pad[b] = T - T_b``, so that every row ends at slot ``T`` (the
    only slots zeroed in reused storage are the padding). With every ``pad[b] = 0``
    (a same-length group) no slot moves; otherwise this is the fallback
    realignment. Either way it is one copy per row, all layers at once, into
    the layer-stacked storage: ``reuse``'s (the previous batch's cache, whose
    slots are then overwritten) when it is large enough, else a new one with
    room to grow. Padding slots are zeros, masked and finite (I3): in reused
    storage they are zeroed, since an earlier round may have left anything
    there, a non-finite rejected draft's key included.
    The result remembers where each row came from, for :func:`split`.
    """
    template = next((r.data for r in rows if r.length), None)
    if template is None:  # nothing cached in any row
        return new_cache(model)
    width = max(p + r.length for p, r in zip(pad, rows))
    reused = _fits(reuse, template, len(rows), width + 16)
    if reused:
        cache = reuse
        cache.store.rows = len(rows)
    else:
        cache = new_cache(model)
        cache.store.allocate(template[0], len(rows), width + max(width // 2, 16))  # zeros
    data = cache.store.data
    for b, (p, r) in enumerate(zip(pad, rows)):
        if r.length:
            data[:, b, :, p: p + r.length] = r.data[:, 0, :, : r.length]  # [2·layers, H, T_b, D]
        if reused and p:
            data[:, b, :, :p].zero_()
    cache.store.fill(width)
    cache.store.appended = 0
    cache.sources = [(r, p) for r, p in zip(rows, pad)]
    return cache


def split(cache: StackedCache, spans: list[tuple[int, int, int]]) -> list[Row]:
    """Per-sequence rows, one per span ``(row, start, stop)``: slots ``start
    .. stop-1`` of batch row ``row`` (EXSPEC, Spec §8.3).

    A span that is the slots a row was stacked from (:func:`stack`) plus the
    ones the round appended extends that Row when :meth:`Row.extensible`:
    only the new slots are copied, into its storage past its length (the old
    ones are taken as stacked, not read from the batch again). Any other
    span is copied whole into storage of its own with room to grow. A view
    of the *batch* is never returned: it would keep the whole batch's
    storage alive for as long as one sequence waits in the pool.
    """
    data, out = cache.store.data, []
    sources = cache.sources or []
    for row, start, stop in spans:
        n = stop - start
        source, offset = sources[row] if row < len(sources) else (None, None)
        if n <= 0:
            out.append(Row())
        elif source is not None and start == offset and source.length <= n and source.extensible(n):
            source.data[:, :, :, source.length: n] = data[:, row:row + 1, :, start + source.length: stop]
            source.tip[0] = n  # a second extension of this Row, or of a shorter one, now copies
            out.append(Row(source.data, n, source.tip))
        else:
            own = data.new_empty(data.shape[:1] + (1,) + data.shape[2:3] + (n + max(n // 2, 16),) + data.shape[4:])
            own[:, :, :, :n] = data[:, row:row + 1, :, start:stop]  # [2·layers, 1, H, T_b, D]
            out.append(Row(own, n))
    return out


def expanded_mask(attention_mask: torch.Tensor, n: int) -> torch.Tensor:
    """The mask as the model's attention reads it (Spec §2.4): ``[B, 1, n, T +
    n]`` boolean, slot ``s`` visible to input ``j`` when the row attends it and
    ``s <= T + j``. Passed to the model, transformers uses it as it is instead of
    rebuilding it from the ``[B, T + n]`` mask at every call (0.1–0.5 ms a call
    on the development CPU, where a draft call of the default pair costs about
    1 ms). Only for a mask with padding whose ``n`` inputs are all attended:
    an all-ones mask lets transformers drop the mask altogether, and a masked
    input would be a query row that attends nothing (NaN in SDPA), which
    transformers' own construction guards against. Otherwise the mask is
    returned unchanged."""
    full, fed = torch.stack([attention_mask.all(), attention_mask[:, -n:].all()]).tolist()
    if full or not fed:
        return attention_mask
    width = attention_mask.shape[1]
    slots = torch.arange(width, device=attention_mask.device)
    causal = slots[None, :] <= slots[width - n:, None]  # [n, T + n]
    return attention_mask.bool()[:, None, None, :] & causal


@torch.no_grad()
def run_forward(model, cache, input_ids, attention_mask, position_ids, logits_to_keep: int = 0):
    """One forward call that extends ``cache`` by ``input_ids.shape[1]`` slots.

    ``input_ids``/``position_ids``: ``[B, n]``; ``attention_mask``: ``[B, T + n]``
    over cache slots then inputs, given to the model as :func:`expanded_mask`
    after the prefill. Returns logits ``[B, n or logits_to_keep, V]``.
    """
    if cache_length(cache):
        attention_mask = expanded_mask(attention_mask, input_ids.shape[1])
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=logits_to_keep,
    )
    return out.logits
