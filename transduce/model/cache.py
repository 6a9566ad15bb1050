"""Key/value caches for incremental decoding: the growing one eager search uses and the
cross-attention's, filled once per source (the static one a compiled step runs over is
transduce.model.static_cache's)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer, (B, H, length, Dh), grown in place.

    Decoder self-attention appends one step at a time; cross-attention stores the projected
    encoder output once. Storage grows by doubling so that appending is amortised O(1) copies,
    and straight to `max_length` positions, when that is known (a search's length limit), once
    that is at most twice what doubling would give: never more, and no copy soon after.
    Reordering rows (`select`, every step of a beam search) copies into a second buffer kept
    from the previous reorder, and the two swap: a new buffer every step would cost page faults
    on first touch, the more so with transparent huge pages, which transduce enables
    (docs/speed.md).
    """

    def __init__(self, max_length: int | None = None) -> None:
        self.max_length = max_length
        self._k: Tensor | None = None  # (rows >= B, H, capacity, Dh): rows [0, B) in use
        self._v: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # the other buffer, same capacity
        self.rows = 0
        self.length = 0
        # the first position of each row, (B,), once rows have joined later (`join`); None:
        # every row starts at 0
        self.starts: Tensor | None = None

    def __len__(self) -> int:
        return self.length

    @property
    def mask(self) -> Tensor | None:
        """None while every row starts at 0 (every position held may be attended to, see
        StaticKVCache.mask); else (B, 1, 1, length): the positions of each row's own."""
        if self.starts is None:
            return None
        return (torch.arange(self.length, device=self.starts.device)
                >= self.starts[:, None])[:, None, None, :]

    def join(self, rows: int, device=None) -> None:
        """Add `rows` rows that begin at the next position (continuous batching): the positions
        before are theirs to ignore (`mask`), zeros. Their starts are the current length."""
        device = device if self._k is None else self._k.device
        old = (torch.zeros(self.rows, dtype=torch.long, device=device) if self.starts is None
               else self.starts)
        self.starts = torch.cat([old, torch.full((rows,), self.length, dtype=torch.long,
                                                 device=device)])
        if self._k is None:  # no step yet: the first append brings every row
            return
        if len(self._k) < self.rows + rows:  # room for more rows than now, as storage grows
            grown = [b.new_empty(2 * (self.rows + rows), *b.shape[1:]) for b in (self._k, self._v)]
            for new, held in zip(grown, (self.keys, self.values), strict=True):
                new[: self.rows, :, : self.length] = held
            self._k, self._v = grown
            self._spare = None
        for buffer in (self._k, self._v):  # masked, but finite: 0 x NaN would be NaN
            buffer[self.rows: self.rows + rows, :, : self.length] = 0
        self.rows += rows

    def trim(self) -> int:
        """Drop the positions no row attends to any more (before every row's start), when they
        are at least half the length: continuous batching would otherwise grow the cache for as
        long as the server is busy. Returns the positions dropped."""
        if self.starts is None or self._k is None or not self.rows:
            return 0
        first = int(self.starts.min())
        if 4 * first < self.length:
            return 0
        for buffer in (self._k, self._v):
            buffer[: self.rows, :, : self.length - first] = \
                buffer[: self.rows, :, first: self.length].clone()
        self.length -= first
        self.starts = self.starts - first
        return first

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, t, Dh) keys and values; return all of them, (B, H, length + t, Dh)."""
        end = self.length + k.shape[2]
        if self._k is None or end > self._k.shape[2]:
            capacity = max(2 * self.length, 16)
            if self.max_length is not None and self.max_length <= 2 * capacity:
                capacity = self.max_length  # all it will need: never to grow again
            self._grow(k, capacity=max(end, capacity))
        self._k[: self.rows, :, self.length:end] = k
        self._v[: self.rows, :, self.length:end] = v
        self.length = end
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        """Positions the storage holds before it must grow."""
        return 0 if self._k is None else self._k.shape[2]

    @property
    def keys(self) -> Tensor:
        return self._k[: self.rows, :, : self.length]

    @property
    def values(self) -> Tensor:
        return self._v[: self.rows, :, : self.length]

    def select(self, index: Tensor) -> None:
        """Keep batch rows `index` (1-D, may repeat): reorders beams and drops finished rows."""
        if self._k is None:
            if self.starts is not None:
                self.starts = self.starts[index]
            return
        rows = len(index)
        if self._spare is None or len(self._spare[0]) < rows:
            self._spare = (self._k.new_empty(rows, *self._k.shape[1:]),
                           self._v.new_empty(rows, *self._v.shape[1:]))
        k, v = self._spare
        # only the filled part is copied
        torch.index_select(self.keys, 0, index, out=k[:rows, :, : self.length])
        torch.index_select(self.values, 0, index, out=v[:rows, :, : self.length])
        self._spare = self._k, self._v
        self._k, self._v, self.rows = k, v, rows
        if self.starts is not None:
            self.starts = self.starts[index]

    def move(self, src: Tensor, dst: Tensor, rows: int | None = None, first: int = 0) -> None:
        """Copy rows `src` into rows `dst` (1-D, the same length), all read before any is
        written; the other rows stay; then keep the first `rows` rows (default: all). Cheaper
        than `select` when few rows change. Positions from `first` (`_select`'s
        `_first_moved`), before which none is a moved row's."""
        if self._k is None:
            return
        for buffer in (self._k, self._v):
            copy_rows(buffer[: self.rows, :, first: self.length], src, dst)
        if self.starts is not None:
            copy_rows(self.starts, src, dst)
            self.starts = self.starts[: self.rows if rows is None else rows]
        self.rows = self.rows if rows is None else rows

    def _grow(self, like: Tensor, capacity: int) -> None:
        batch, heads, _, head_dim = like.shape
        k = like.new_empty(batch, heads, capacity, head_dim)
        v = like.new_empty(batch, heads, capacity, head_dim)
        if self._k is not None:
            k[:, :, : self.length] = self.keys
            v[:, :, : self.length] = self.values
        self._k, self._v, self._spare, self.rows = k, v, None, batch


class SourceKVCache:
    """Cross-attention keys and values, (sources, H, S, Dh): computed from the encoder output at
    the first step, read at every later one. Held exactly (views of no larger buffer), so every
    size a compiled step sees is a tensor's, and never as a view (`detach()`: no copy), which a
    compiled step's guards would tell apart from a tensor of its own and compile again."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self._room: tuple[Tensor, Tensor] | None = None  # storage sources join (continuous)

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    mask = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Hold the keys and values of whole sources (B, H, S, Dh): once, or (continuous
        batching) those of sources that joined, after the ones held, the shorter padded."""
        if self.keys is None:  # contiguous: each step's products read them as they are (a
            # view of the packed projection would be copied by every step's matmul)
            self.keys, self.values = k.contiguous().detach(), v.contiguous().detach()
            return self.keys, self.values
        held, new = self.keys.shape[0], k.shape[0]
        length = max(k.shape[2], self.keys.shape[2])
        room = self._room
        if room is None or len(room[0]) < held + new or room[0].shape[2] < length:
            # storage with room for as many sources again, so that joining is not a copy of
            # every source's keys and values each time
            room = tuple(x.new_zeros(2 * (held + new), x.shape[1], length, x.shape[3])
                         for x in (self.keys, self.values))
            for buffer, x in zip(room, (self.keys, self.values), strict=True):
                buffer[:held, :, : x.shape[2]] = x
            self._room = room
        for buffer, x, old in zip(room, (k, v), (self.keys, self.values), strict=True):
            buffer[held: held + new, :, : x.shape[2]] = x
            buffer[held: held + new, :, x.shape[2]: length] = 0
            if old.shape[2] < length:  # the sources held, padded further (masked)
                buffer[:held, :, old.shape[2]: length] = 0
        self.keys, self.values = (b[: held + new, :, :length].detach() for b in room)
        return self.keys, self.values

    def select(self, index: Tensor) -> None:
        """Keep sources `index` (1-D): in place where few move (see `compacting_order`)."""
        if self.keys is None:
            return
        moved = moved_rows(index) if len(index) <= len(self.keys) else None
        if moved is None:
            self.keys, self.values = self.keys[index], self.values[index]
            self._room = None  # the keys are no longer its rows
            return
        for buffer in (self.keys, self.values):
            copy_rows(buffer, index[moved], moved)
        self.keys, self.values = (x[: len(index)].detach() for x in (self.keys, self.values))


@dataclass
class LayerCache:
    """The caches of one decoder layer."""

    self_attention: KVCache = field(default_factory=KVCache)  # or a StaticKVCache
    cross_attention: SourceKVCache = field(default_factory=SourceKVCache)


@dataclass
class DecoderCache:
    """Everything a decoder keeps between steps: per-layer caches and the next position."""

    layers: list[LayerCache]

    @classmethod
    def empty(cls, n_layers: int) -> DecoderCache:
        return cls([LayerCache() for _ in range(n_layers)])

    @property
    def length(self) -> int:
        """Target positions decoded so far (the position of the next token)."""
        return len(self.layers[0].self_attention) if self.layers else 0

    @property
    def offset(self) -> int | Tensor:
        """The position of the next token: `length`, or once rows have joined later, each
        row's own (B,)."""
        starts = self.layers[0].self_attention.starts if self.layers else None
        return self.length if starts is None else self.length - starts

    def advance(self, steps: int) -> None:
        """After the decoder has read `steps` more tokens: the layers' caches count their own."""

    def join(self, rows: int, device=None) -> None:
        """`rows` decoder rows join, after the others, at the next position (their sources'
        cross-attention keys and values are made as the decoder first meets them)."""
        for layer in self.layers:
            layer.self_attention.max_length = None  # its length is no longer one search's
            layer.self_attention.join(rows, device)

    def trim(self) -> None:
        """Drop the positions no row attends to (`KVCache.trim`)."""
        for layer in self.layers:
            layer.self_attention.trim()

    def limit(self, max_length: int) -> None:
        """No row will have more than `max_length` target positions: the self-attention caches
        never make room for more (a search knows its length limit before the first step)."""
        for layer in self.layers:
            layer.self_attention.max_length = max_length

    def select(self, index: Tensor) -> None:
        """Keep batch rows `index` (1-D, may repeat) in every layer, where each row has its own
        source (greedy search dropping finished sentences)."""
        self.select_rows(index)
        self.select_sources(index)

    def select_rows(self, rows: Tensor) -> None:
        """Keep decoder rows `rows` in the self-attention caches (beams reordered or repeated,
        finished ones dropped)."""
        _select([layer.self_attention for layer in self.layers], rows)

    def select_sources(self, sources: Tensor) -> None:
        """Keep sources `sources` in the cross-attention caches, which hold one row per source
        (however many decoder rows, beams, it serves)."""
        for layer in self.layers:
            layer.cross_attention.select(sources)


def copy_rows(x: Tensor, src: Tensor, dst: Tensor) -> None:
    """Copy rows `src` of x into its rows `dst` (1-D, the same length), in place, all read before
    any is written."""
    x.index_copy_(0, dst, x.index_select(0, src))


def moved_rows(index: Tensor) -> Tensor | None:
    """For a selection `index` of rows: the rows i that do not keep row i, (m,), when at most
    half of them are (then copying those in place beats copying all), else None."""
    moved = (index != torch.arange(len(index), device=index.device)).nonzero().squeeze(1)
    return moved if 2 * len(moved) <= len(index) else None


def _select(caches: list[KVCache], index: Tensor) -> None:
    """`select(index)` on caches of the same rows: in place where few kept rows change (beams
    that stay in their parents' rows, sentences that leave the batch with the last ones taking
    their places: see `compacting_order`), else into the spare buffers."""
    fits = caches and caches[0].rows and len(index) <= caches[0].rows
    moved = moved_rows(index) if fits else None
    if moved is None:
        for cache in caches:
            cache.select(index)
        return
    src = index[moved]
    first = _first_moved(caches[0].starts, src)  # the layers' rows start alike
    for cache in caches:
        cache.move(src, moved, rows=len(index), first=first)


def _first_moved(starts: Tensor | None, src: Tensor) -> int:
    """The earliest position rows `src` read: their earliest start once rows have joined later
    (continuous batching: the positions before are none of theirs, masked and left as they
    are), else 0."""
    return 0 if starts is None or not len(src) else int(starts[src].min())


__all__ = ["DecoderCache", "KVCache", "LayerCache", "SourceKVCache", "copy_rows",
           "moved_rows"]
