"""The static caches of a compiled search step (transduce.decoding.compiled): self-attention
keys and values in buffers of a fixed length (the window's bucket and one more, or the
search's whole length), written at a position that is a tensor, read through a window of
positions, the buffers' length growing in a few steps (`bucket`), kept from search to search
(`StaticStorage`). Rows may join at the next position (continuous batching: `join`, each row's
start masking the positions before it, as `KVCache.join`), and positions before every row's
start are dropped (`trim`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from transduce.model.cache import DecoderCache, LayerCache, copy_rows


class StaticStorage:
    """The static caches' buffers, kept from one search to the next: two (keys and values) of
    each layer's, and two more to reorder rows into, for each capacity a search has used. Fresh
    buffers cost more to allocate and zero (page faults on first touch) than the search's steps
    on a small model. Zeroed once: a position not written yet in this search holds zeros or an
    earlier search's keys, finite either way, and the mask gives it no weight. One search at a
    time uses a storage (a compiled model's: transduce.decoding.compiled).

    `fitted`: the buffers in use hold one position more than the window's bucket
    (`StaticKVCache.fit`), moved to the next capacity as it grows, not the search's whole
    length from the first step: a compiled step's attention over 16 positions of each row's 129 took
    1.4-2.3 ms a layer, of each row's 17 0.66-0.89 (290 rows, 4 heads of 32, one thread, AVX2;
    1.4x at 64 positions: docs/speed.md); the move costs a copy of the positions filled, three
    or four times a search. CUDA graphs' storage keeps whole-length buffers (a graph replays
    the buffers it was captured with)."""

    fitted = True

    def __init__(self) -> None:
        self._held: dict[tuple, Tensor] = {}
        self.windows: dict[tuple, Tensor] = {}  # (n, device): arange(n), a window to read

    def take(self, name: tuple, like: Tensor, rows: int, capacity: int) -> Tensor:
        """Buffer `name` as (rows, H, capacity, Dh) for tensors like `like` (B, H, 1, Dh): the
        first rows of the one held for that capacity (a few: `bucket`), which grows (zeroed)
        where it has too few. One buffer per capacity, so that its rows' stride is always the
        same multiple of its length, as a compiled step's graph assumes."""
        _, heads, _, head_dim = like.shape
        name = (*name, capacity, like.dtype, like.device)
        held = self._held.get(name)
        if held is None or held.shape[0] < rows:  # (one model's: its heads are these)
            held = self._held[name] = like.new_zeros(rows, heads, capacity, head_dim)
        return held[:rows].detach()  # a tensor, not a view (see CompiledSteps)


class StaticKVCache:
    """Self-attention keys and values in buffers of a fixed length, (B, H, capacity, Dh): the
    window's bucket and one more (`fit`), or the search's whole length (`limit`); each step's
    written at the decoder's position (a tensor shared by the layers), as gpt-fast keeps them: the
    step's code stays the same from step to step, so `torch.compile` compiles it once
    (transduce.decoding.compiled). Attention reads the positions of the window
    (`StaticDecoderCache.read`; without one, every position) and `mask` hides those not written
    yet. Rows are reordered as KVCache's (in place where few move, else into a spare buffer),
    copying only the positions filled. The buffers are views of a `StaticStorage`'s."""

    def __init__(self, position: Tensor, capacity: int, storage: StaticStorage | None = None,
                 layer: int = 0) -> None:
        self.position = position  # 0-d: of the next token
        self.capacity = capacity
        self.storage = storage if storage is not None else StaticStorage()
        self.layer = layer  # its buffers' name in the storage
        self.window: Tensor | None = None  # arange(n): attention reads positions < n, if set
        self.keys: Tensor | None = None  # (B, H, capacity, Dh): the rows in use of _buffers
        # the first position of each row, (B,), once rows have joined later (`join`: continuous
        # batching); None: every row starts at 0
        self.starts: Tensor | None = None
        self.values: Tensor | None = None
        self._buffers: tuple[Tensor, Tensor] | None = None
        self._spare: tuple[Tensor, Tensor] | None = None
        self._side = 0  # which of the storage's two buffers _buffers are

    @property
    def mask(self) -> Tensor:
        """(1, window): the positions up to the newest query's (one query a step); once rows
        have joined later, (B, 1, 1, window): those from each row's start."""
        if self.window is not None:
            positions = self.window
        else:  # the capacity, as a size (a compiled step's may vary)
            positions = torch.arange(self.keys.shape[2], device=self.position.device)
        if self.starts is None:
            return (positions <= self.position)[None]
        return ((positions <= self.position) & (positions >= self.starts[:, None]))[:, None, None]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write one step's (B, H, 1, Dh) at the position; return the buffers' window (B, H,
        window, Dh), to be read with `mask`."""
        if self.keys is None:  # the first step's rows
            self.reserve(len(k), k)
        at = self.position.view(1)
        self.keys.index_copy_(2, at, k)
        self.values.index_copy_(2, at, v)
        if self.window is None:
            return self.keys, self.values
        n = self.window.shape[0]
        return self.keys[:, :, :n], self.values[:, :, :n]

    def fit(self, capacity: int) -> None:
        """Buffers of `capacity` positions from now on (the window's bucket and one more, see
        `StaticStorage.fitted`): the positions filled copied over."""
        if capacity == self.capacity:
            return
        self.capacity = capacity
        if self.keys is None:  # taken at the first step
            return
        filled, rows, held = int(self.position), self.rows, (self.keys, self.values)
        self._buffers = tuple(self.storage.take((self.layer, name, self._side), b, rows, capacity)
                              for name, b in enumerate(held))
        for buffer, old in zip(self._buffers, held, strict=True):
            buffer[:, :, :filled] = old[:, :, :filled]
        self._spare = None  # taken again, of this capacity, by the next `select`
        self._keep(rows)

    def reserve(self, rows: int, like: Tensor) -> None:
        """Take the buffers for `rows` rows of keys like `like` (its heads, head size, dtype and
        device), before the first step writes to them (or as it does)."""
        self._buffers = tuple(self.storage.take((self.layer, name, 0), like, rows, self.capacity)
                              for name in range(2))
        self.keys, self.values = self._buffers

    @property
    def rows(self) -> int:
        return 0 if self.keys is None else len(self.keys)

    def join(self, rows: int) -> None:
        """Add `rows` rows that begin at the next position (continuous batching): the positions
        before are not theirs (`mask`; they hold what the buffers held, finite). In the
        storage's buffers, which keep the rows held in place where they have room for more."""
        position, held = int(self.position), self.rows
        old = (self.position.new_zeros(held) if self.starts is None else self.starts)
        self.starts = torch.cat([old, old.new_full((rows,), position)])
        if self.keys is None:  # no step yet: the first brings every row
            return
        before = (self.keys, self.values)
        self._buffers = tuple(self.storage.take((self.layer, name, self._side), b, held + rows,
                                                self.capacity)
                              for name, b in enumerate(before))
        for buffer, old_rows in zip(self._buffers, before, strict=True):
            if buffer.data_ptr() != old_rows.data_ptr():  # grown: a fresh buffer
                buffer[:held, :, :position] = old_rows[:, :, :position]
        self._spare = None  # taken again, with room for them, by the next `select`
        self._keep(held + rows)

    def trim(self, first: int) -> None:
        """Move positions `first` .. the position to the front (positions before `first`, which
        no row reads any more, dropped): `StaticDecoderCache.trim`, which moves the position."""
        self.starts = self.starts - first
        if self.keys is None:
            return
        end = int(self.position)
        for buffer in (self.keys, self.values):
            buffer[:, :, : end - first] = buffer[:, :, first:end].clone()

    def select(self, index: Tensor) -> None:
        """Keep rows `index` (1-D, may repeat), copied into the spare buffers."""
        if self.keys is None:
            return
        filled, rows = int(self.position), len(index)
        if self._spare is None or len(self._spare[0]) < rows:
            self._spare = tuple(self.storage.take((self.layer, name, 1 - self._side), b, rows,
                                                  self.capacity)
                                for name, b in enumerate(self._buffers))
        for spare, held in zip(self._spare, (self.keys, self.values), strict=True):
            torch.index_select(held[:, :, :filled], 0, index, out=spare[:rows, :, :filled])
        self._buffers, self._spare = self._spare, self._buffers
        self._side = 1 - self._side
        self._keep(rows)
        if self.starts is not None:
            self.starts = self.starts[index]

    def move(self, src: Tensor, dst: Tensor, rows: int | None = None, first: int = 0) -> None:
        """Copy rows `src` into rows `dst` in place, positions from `first` on, then keep the
        first `rows` (as KVCache.move; the choice between the two is
        `transduce.model.cache._select`'s)."""
        if self.keys is None:
            return
        filled = int(self.position)
        for buffer in (self.keys, self.values):
            copy_rows(buffer[:, :, first:filled], src, dst)
        self._keep(self.rows if rows is None else rows)
        if self.starts is not None:
            copy_rows(self.starts, src, dst)
            self.starts = self.starts[: self.rows].detach()  # not a view, as `_keep`'s

    def _keep(self, rows: int) -> None:
        self.keys, self.values = (b[:rows].detach() for b in self._buffers)


@dataclass
class StaticDecoderCache(DecoderCache):
    """A decoder's caches for a compiled step: static self-attention caches of one length,
    written at one position, a tensor (`length`), which the decoder advances."""

    position: Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.long))

    @classmethod
    def empty(cls, n_layers: int, max_length: int = 0, device=None,
              storage: StaticStorage | None = None) -> StaticDecoderCache:
        position = torch.zeros((), dtype=torch.long, device=device)
        storage = storage if storage is not None else StaticStorage()
        return cls([LayerCache(StaticKVCache(position, max_length, storage, i))
                    for i in range(n_layers)], position)

    @property
    def length(self) -> Tensor:
        return self.position

    @property
    def offset(self) -> Tensor:
        """The position of the next token: every row's, or once rows have joined later, each
        row's own (B,)."""
        starts = self.layers[0].self_attention.starts if self.layers else None
        return self.position if starts is None else self.position - starts

    def advance(self, steps: int) -> None:
        self.position.add_(steps)

    def read(self, window: Tensor) -> None:
        """The next steps attend to the positions below len(window) (window = arange(n), n at
        least the next position + 1, less than the capacity), not to every one held: a
        compiled step's attended length, a size that varies (each step's own on a CPU, a few
        for CUDA graphs: `bucket`); the buffers grow in a few steps, where the storage fits
        them to the window (`StaticStorage.fitted`): room for the window's bucket and one
        position more, so that they are copied three or four times a search, not every step.
        """
        for layer in self.layers:
            attention = layer.self_attention
            attention.window = window
            if attention.storage.fitted:
                attention.fit(bucket(len(window) - 1) + 1)

    def limit(self, max_length: int) -> None:
        """The length of every static buffer: set before the first step. Room for the largest
        window read and one position more (a window never the whole buffer, so that its length
        is never the buffer's, which a compiled step would have to tell apart)."""
        for layer in self.layers:
            layer.self_attention.capacity = bucket(max_length - 1) + 1

    def join(self, rows: int, device=None) -> None:
        """`rows` rows join, after the others, at the next position (continuous batching), on
        the cache's own device (`device`: `DecoderCache.join`'s, for a cache not made yet)."""
        for layer in self.layers:
            layer.self_attention.join(rows)

    def trim(self) -> int:
        """Drop the positions before every row's start, once they are at least a quarter of
        those held (as `KVCache.trim`): the rest moved to the front, the position back by as
        many. Returns the positions dropped."""
        starts = self.layers[0].self_attention.starts if self.layers else None
        if starts is None or not len(starts):
            return 0
        first = int(starts.min())
        if not first or 4 * first < int(self.position):
            return 0
        for layer in self.layers:
            layer.self_attention.trim(first)
        self.position.sub_(first)
        return first


def bucket(position: int) -> int:
    """The buffers' length for a step at `position` (one more), and CUDA graphs' attended
    length: the least power of two above it, at least 16 (so 16, 32, 64, ...: a handful of
    lengths, and never more than twice those written)."""
    window = 16
    while window <= position:
        window *= 2
    return window
