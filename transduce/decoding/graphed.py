"""A model whose search steps replay CUDA graphs (`--compile` on a GPU): the model's one-step
decode over its static cache (transduce.model.static_cache), as transduce.decoding.compiled
runs it on a CPU, captured once for each shape in a `torch.cuda.CUDAGraph` and replayed.

On a GPU an eager step is bound by launching its kernels: 2.3-4.3 ms a step on an H200 at every
shape from `tiny` with one row to `base` with 320, against 0.24-1.9 ms replayed from a graph
(benchmarks/cuda_graph_step.py, docs/speed.md). A graph replays the tensors it was captured with,
at their addresses and shapes, so each step runs on tensors kept for it (`_Slot`):

- rows padded: a batch of s sources runs as `row_bucket(s)` (1, 2, 4, 8, ...), each with its
  `group` rows (a source's beams); the rows past the batch's hold what they held, stay finite,
  and their logits are never read. Finished sentences leave as they do eagerly, and a graph of
  fewer rows takes over once the batch fits one;
- source positions padded to a multiple of 16, masked;
- the encoder's output (only its shape is read), mask and cross-attention keys copied into the
  slot's tensors when the sources change (a batch's first step, a sentence finished), the
  step's tokens at every step;
- the self-attention buffers are the storage's own (`GraphStorage`: room for the padded rows),
  read through a window (`bucket`) as on a CPU; a graph for each of the two buffers beams
  reorder into, and for each window;
- the position is one tensor of the storage, which the graph advances.

A graph is captured the first time its shape comes (a step run eagerly first, as CUDA asks, then
captured), kept with the storage for every later search, and shares the storage's memory pool
with its other graphs (each step's own tensors are dead once its logits are read). The tokens
are the eager search's, up to float rounding (tests/gpu); searches ran 2.3-4.5x as fast on an
H200 (docs/speed.md). What the storage keeps for each padded batch (its tokens, mask and every
layer's cross-attention keys) and each graph stays for the process's life: memory grows with
the shapes a process has seen, and is bounded by them. On a CPU (tests only) the same slots run
eagerly instead of replaying (`capture=False`), which tests the padding and the copies.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from transduce.decoding.compiled import Compiled, CompiledSteps, _decode_next
from transduce.model.cache import LayerCache, SourceKVCache
from transduce.model.static_cache import (
    StaticDecoderCache,
    StaticKVCache,
    StaticStorage,
    bucket,
)
from transduce.model.steps import DecoderSteps
from transduce.model.transformer import Transformer

SOURCE_POSITIONS = 16  # source lengths are padded to a multiple of this


def compile_for(model: Transformer, device: torch.device) -> Compiled:
    """`model` with its search steps compiled for `device`: on a GPU replayed from CUDA graphs
    (launching a step's kernels is what a GPU's step waits on), elsewhere by torch.compile."""
    return Graphed(model) if device.type == "cuda" else Compiled(model)


def row_bucket(n: int) -> int:
    """The rows (sources) a graph of a batch of n runs: the least power of two from n."""
    return 1 << max(n - 1, 0).bit_length()


class Graphed(Compiled):
    """A model whose search steps replay CUDA graphs (a `Searchable`), as `Compiled` on a CPU;
    `capture=False` runs the same steps eagerly (for testing them where no GPU is)."""

    def __init__(self, model: Transformer, capture: bool = True) -> None:
        super().__init__(model)
        self.capture = capture

    def steps(self, src: Tensor, *, use_cache: bool = True) -> DecoderSteps:
        if not use_cache:
            return self.model.steps(src, use_cache=False)
        try:
            storage = self._free.pop()
        except IndexError:
            storage = GraphStorage()
        steps = GraphedSteps(self.model, src, storage, self.capture)
        weakref.finalize(steps, self._free.append, storage)
        return steps


class GraphStorage(StaticStorage):
    """A `StaticStorage` whose buffers have room for the rows a graph pads a batch to
    (`least_rows`, set by the steps), its graphs and the memory pool they share, and the
    position its steps write at."""

    fitted = False  # a graph replays the buffers it was captured with

    def __init__(self) -> None:
        super().__init__()
        self.least_rows = 0
        self.slots: dict[tuple, _Slot] = {}
        self.inputs: dict[tuple, _Inputs] = {}
        self.pool = None  # the graphs' memory pool, made with the first
        self._positions: dict[torch.device, Tensor] = {}

    def take(self, name: tuple, like: Tensor, rows: int, capacity: int) -> Tensor:
        held = super().take(name, like, max(rows, self.least_rows), capacity)
        return held[:rows].detach()

    def position(self, device: torch.device) -> Tensor:
        """The position of the next token, one tensor for every search (zeroed by each)."""
        if device not in self._positions:
            self._positions[device] = torch.zeros((), dtype=torch.long, device=device)
        return self._positions[device].zero_()


class _Inputs:
    """A graph's inputs beside the storage's buffers: its padded batch's tokens, encoder
    output (its shape), mask and every layer's cross-attention keys and values, shared by the
    graphs of one padded batch (their windows and buffers differ)."""

    def __init__(self, steps: GraphedSteps, sources: int, group: int, length: int) -> None:
        memory, layers = steps.memory, steps.cache.layers
        self.tokens = torch.full((sources * group, 1), steps.model.config.bos_id,
                                 dtype=torch.long, device=memory.device)
        self.memory = memory.new_zeros(()).expand(sources, length, memory.shape[2])
        self.mask = torch.ones(sources, 1, 1, length, dtype=torch.bool, device=memory.device)
        self.cross = [tuple(x.new_zeros(sources, x.shape[1], length, x.shape[3])
                            for x in (layer.cross_attention.keys, layer.cross_attention.values))
                      for layer in layers]

    def fill(self, steps: GraphedSteps) -> None:
        """The steps' sources, in the first rows (positions past theirs masked)."""
        n, length = steps.memory.shape[:2]
        self.mask[:n, ..., :length] = steps.src_mask
        self.mask[:n, ..., length:] = False
        for (keys, values), layer in zip(self.cross, steps.cache.layers, strict=True):
            keys[:n, :, :length] = layer.cross_attention.keys
            values[:n, :, :length] = layer.cross_attention.values


class _Slot:
    """One graph: the step of one padded batch, window and pair of self-attention buffers."""

    def __init__(self, steps: GraphedSteps, inputs: _Inputs, rows: int, capture: bool) -> None:
        self.inputs = inputs
        self.cache = StaticDecoderCache([], steps.cache.position)
        for held, cross in zip(steps.cache.layers, inputs.cross, strict=True):
            attention = held.self_attention
            own = StaticKVCache(attention.position, attention.capacity, attention.storage,
                                attention.layer)
            own.keys, own.values = (_first_rows(x, rows) for x in (attention.keys,
                                                                   attention.values))
            own.window = attention.window
            across = SourceKVCache()
            across.keys, across.values = cross
            self.cache.layers.append(LayerCache(own, across))
        self.model = steps.model
        self.graph = None
        if capture:
            self._capture(steps.storage)

    def run(self) -> Tensor:
        """The step: the padded batch's logits."""
        if self.graph is None:
            return self._step()
        self.graph.replay()
        return self.logits

    def _step(self) -> Tensor:
        i = self.inputs
        return _decode_next(self.model, i.tokens, i.memory, i.mask, self.cache)

    def _capture(self, storage: GraphStorage) -> None:
        """Warm up (the step run once, as CUDA's capture asks), put the position back, and
        capture the step; `run` then replays it."""
        position = self.cache.position
        before = position.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step()
        torch.cuda.current_stream().wait_stream(side)
        position.copy_(before)
        if storage.pool is None:
            storage.pool = torch.cuda.graph_pool_handle()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=storage.pool):
            self.logits = self._step()


def _first_rows(x: Tensor, rows: int) -> Tensor:
    """The first `rows` rows of the buffer whose first rows `x` is (the storage's, which has
    room for them: `GraphStorage.least_rows`)."""
    return x.as_strided((rows, *x.shape[1:]), x.stride())


class GraphedSteps(CompiledSteps):
    """`CompiledSteps` whose every step replays a CUDA graph (`_Slot`); one token a step."""

    greedy_block = 1
    greedy = DecoderSteps.greedy

    def __init__(self, model: Transformer, src: Tensor, storage: GraphStorage,
                 capture: bool) -> None:
        self.capture = capture
        storage.least_rows = row_bucket(len(src))
        super().__init__(model, src, storage)
        self._filled: _Inputs | None = None  # whose tensors hold the sources now
        self._sources_changed = True

    def new_cache(self) -> StaticDecoderCache:
        cache = super().new_cache()
        cache.position = self.storage.position(self.memory.device)
        for layer in cache.layers:
            layer.self_attention.position = cache.position
        return cache

    def join(self, src: Tensor) -> None:
        raise ValueError("a CUDA graph replays the rows it was captured with: sentences cannot "
                         "join its search (continuous batching runs the eager steps on a GPU)")

    def split(self, k: int) -> None:
        self.storage.least_rows = row_bucket(len(self.memory)) * k  # the beams' buffers
        super().split(k)

    def select(self, sources: Tensor) -> None:
        super().select(sources)
        self._sources_changed = True

    def _decode(self) -> Tensor:
        if self.cache.layers[0].self_attention.keys is None:
            self._start()
        self.cache.read(self._window(bucket(self._position)))
        self._position += 1
        rows, sources = len(self.inputs), len(self.memory)
        padded = row_bucket(sources)
        length = -(-self.memory.shape[1] // SOURCE_POSITIONS) * SOURCE_POSITIONS
        key = (padded, self.group, length)
        inputs = self.storage.inputs.get(key)
        if inputs is None:
            inputs = self.storage.inputs[key] = _Inputs(self, padded, self.group, length)
        if inputs is not self._filled or self._sources_changed:
            inputs.fill(self)
            self._filled, self._sources_changed = inputs, False
        inputs.tokens[:rows] = self.inputs
        attention = self.cache.layers[0].self_attention
        key += (len(attention.window), attention.capacity,
                *(x.data_ptr() for layer in self.cache.layers
                  for x in (layer.self_attention.keys, layer.self_attention.values)))
        slot = self.storage.slots.get(key)
        if slot is None:
            slot = self.storage.slots[key] = _Slot(self, inputs, padded * self.group,
                                                   self.capture)
        return slot.run()[:rows]
