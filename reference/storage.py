"""The layer-stacked KV cache, as transformers' cache API sees it (Spec §2.3).

The one module that imports transformers' cache classes: :class:`StackedCache`
and :class:`StackedLayer` adapt the library's ``Cache`` / ``CacheLayerMixin``
to one tensor per model. The model-call API is touched in
:mod:`.model_call` alone; the moves (:mod:`.moves`) and EXSPEC's per-row
storage (:mod:`.rows`) work on the :class:`Store` and never on the library's
API. The paper's own code died on a cache-API redesign; keeping the surface
this small is what lets the rest of the project survive the next one.

Tested against transformers 5.24 (see ``pyproject.toml`` for the range):

* ``DynamicCache.crop(n)`` takes a *negative* count of slots to drop;
* every layer exposes ``.keys`` / ``.values`` shaped ``[B, kv_heads, T, head_dim]``.

Attention must be SDPA (:func:`check_supported`). With
``attn_implementation="eager"`` in float64 and left padding, transformers 5.24
produces NaN for Llama/Qwen: a pad query row whose keys are all masked
softmaxes over nothing, and the NaN then sits in the cache's padding slots,
where it poisons every later row (0 x NaN = NaN).
"""

from __future__ import annotations

import copy
import weakref

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["Store", "StackedLayer", "StackedCache", "new_cache", "check_supported", "cache_length",
           "layer_tensors", "stacked_tensor"]


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
        for a row whose content moves within itself (:func:`~.moves.realign`)."""
        if self.scratch is None or self.scratch.shape[2] < self.data.shape[3]:
            self.scratch = self.data.new_empty(self.data.shape[:1] + self.data.shape[2:])
        return self.scratch

    def fill(self, length: int) -> None:
        """Declare ``length`` slots of every layer live (after a bulk write)."""
        for layer in self.layers:
            layer.length, layer.is_initialized, layer.device = length, True, self.data.device
        self.refresh()

    def set_length(self, length: int) -> None:
        """Keep the first ``length`` slots of every layer live, the rest spare
        (after a move or a crop; nothing is copied)."""
        for layer in self.layers:
            layer.length = length
            layer.view()

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
