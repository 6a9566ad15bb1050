"""A model whose search steps run compiled by `torch.compile`: the model's own one-step decode
over its static cache (transduce.model.cache.StaticKVCache), as gpt-fast compiles its model's
forward over its own cache.

`Compiled(model)` is searched like the model itself (greedy, beam, sampling, in ensembles): its
`steps` are the model's `DecoderSteps` over a `StaticDecoderCache`, written at a position that
is a tensor; each step attends to a window of the positions, those written (at least two: a
size of one Dynamo would specialise), in buffers whose length grows in a few steps (the least
power of two above the window and one more: `bucket`), so the step's code stays the same from
step to step and Inductor compiles it once: every size is one that varies from the first trace
(`dynamic=True`: rows, as finished sentences leave the batch, source length, window length,
buffer length), so one graph serves them all and one more a single source, which Dynamo
specialises. (A window of a power of two, the positions not written masked, read up to twice the
keys and values: 1.01-1.04x slower, docs/speed.md.) No two sizes are taken for one because they
were equal when traced (duck sizing, off in a process that compiles a step: a first batch of 16
source tokens, as many as the first window's positions then, compiled a graph for that equality
and two more for the batches after it); the step's tensors are never views (Dynamo guards a
view's base); so no batch compiles again (tests/serve/test_models.py,
tests/decoding/test_compiled.py). Before the first step the cross-attention caches are filled
(eager products over the whole source) and the static buffers taken; every step then runs
compiled, and only reads and writes them, but for the first of one row a source
(`CompiledSteps._decode`): beam search's, before its k beams, is its only step of that kind, and
compiled it would be two graphs more (one source or several), as long to compile as the two of
every other step, for one step a search. Steps of one row a source throughout (sampling, forced
prefixes) compile theirs at the second. Greedy search takes its tokens `greedy_block` at a time
from one graph (`CompiledSteps.greedy`: the steps unrolled, each argmax fed to the next inside
the graph), so the Python around a step comes once for several; its rows leave the batch once a
block. The buffers are the `Compiled` model's, kept from search to search (`StaticStorage`s: one
for each search in flight, taken when its steps are made and given back when they are dropped,
so that searches at once, transduce.decoding.parallel, each have their own, as each calls its
own copy of the compiled functions: `use_copy`): allocating and zeroing a batch's took 40% of a
greedy search of Multi30k (batches of 64, room for 200 tokens).
Sentences may join the steps between them (continuous batching, transduce.decoding.continuous:
`DecoderSteps.join`): their rows' self-attention starts at the next position, each row masked
before its own start (`StaticKVCache.join`), their cross-attention keys made as they join, and
positions no row reads any more dropped (`StaticDecoderCache.trim`); a search that rows have
joined is a graph of its own (and one more for a single source), once a process.
Inductor's C++ wrapper calls the kernels, not Python, and in a graph of one row the linear layers
are Inductor's own loops (`INDUCTOR_OPTIONS`).

What it gains is the per-step overhead of eager PyTorch, which is what one sentence's step costs
(an interactive request): on the trained Multi30k model in batches of 64, greedy search 1.36x
eager and beam search 1.05x (a source's beams attend to its keys together through the fused
kernel: transduce.kernels.attention; benchmarks/compiled_step.py and docs/speed.md). Compiling
takes tens of seconds for each kind of search the first time a process runs it, so it is used
by default only where it pays (`pays`: a server, or an input of a million words or more; on a
GPU, where the steps replay CUDA graphs instead, transduce.decoding.graphed, always);
`--compile` / `--no-compile`, `Translator.load(..., compile=True)` choose. The tokens are those
of the eager search, up to float rounding (another order of summation); the tests check they
are identical.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

from transduce.decoding.ranking import argmax
from transduce.model.static_cache import StaticDecoderCache, StaticStorage
from transduce.model.steps import DecoderSteps
from transduce.model.transformer import Transformer


class Compiled(nn.Module):
    """A model whose search steps run compiled (a `Searchable`); everything else (encoding,
    attention pictures) runs the model as it is."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self._free: list[StaticStorage] = []  # static caches' buffers no search holds now

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return self.model.encode(src, src_mask)

    def steps(self, src: Tensor, *, use_cache: bool = True) -> DecoderSteps:
        """The compiled steps; without the cache, the model's own eager ones (for checking)."""
        if not use_cache:
            return self.model.steps(src, use_cache=False)
        try:
            storage = self._free.pop()  # atomic: searches on other threads pop and append too
        except IndexError:
            storage = StaticStorage()
        steps = CompiledSteps(self.model, src, storage)
        weakref.finalize(steps, self._free.append, storage)  # back when the search drops them
        return steps

    def decode_with_attention(self, *args, **kwargs) -> tuple[Tensor, Tensor]:
        return self.model.decode_with_attention(*args, **kwargs)

    def num_parameters(self) -> int:
        return self.model.num_parameters()


class CompiledSteps(DecoderSteps):
    """`DecoderSteps` over a static cache, every step by the compiled `decode_next`, or greedy
    search's `greedy_block` steps at a time by `compiled_greedy`."""

    greedy_block = 2  # greedy tokens a graph takes (docs/speed.md: 1.28x one, 4 no more)

    def __init__(self, model: Transformer, src: Tensor, storage: StaticStorage) -> None:
        self.storage = storage
        self._position = 0  # the next token's
        super().__init__(model, src)

    def new_cache(self) -> StaticDecoderCache:
        return StaticDecoderCache.empty(len(self.model.decoder.layers),
                                        self.model.config.max_positions, self.memory.device,
                                        self.storage)

    def _decode(self) -> Tensor:
        self.cache.read(self._window(self._position + 1))
        if self.cache.layers[0].self_attention.keys is None:
            self._start()
        first = self._position == 0
        self._position += 1
        # a first step of one row a source (beam search's, before its k beams) runs eagerly:
        # two graphs fewer to compile (see the module)
        step = _decode_next if first and self.group == 1 else compiled_decode_next()
        # never views (`detach()`, no copy): Dynamo guards a view's base, so a graph traced
        # with a view would not take the same tensor unviewed (after an index_select) and
        # compile again, in a server while a client waits; the caches hold no views either
        return step(self.model, self.inputs.detach(), self.memory.detach(),
                    self.src_mask.detach(), self.cache)

    def greedy(self, eos_bias: Tensor) -> Tensor:
        """The next k = len(eos_bias) greedy tokens of every row in one compiled graph (`Steps.
        greedy`): each step's argmax fed to the next without leaving it, so the Python and
        dispatch around a step (~45% of a compiled greedy search's time) come once in k.
        The k steps attend to the window of the last (the same code for each)."""
        k = len(eos_bias)
        self.cache.read(self._window(self._position + k))
        if self.cache.layers[0].self_attention.keys is None:
            self._start()
        self._position += k
        tokens, self.inputs = compiled_greedy(k)(
            self.model, self.inputs.detach(), self.memory.detach(), self.src_mask.detach(),
            self.cache, self._never, eos_bias)
        return tokens

    def append(self, tokens: Tensor) -> None:
        super().append(tokens)
        if self.joined:  # positions no row reads any more dropped: the cache's position moved
            self._position = int(self.cache.position)

    def _start(self) -> None:
        """Before the first step: the cross-attention keys and values of every layer (eager
        products over the whole source, which the compiled steps only read) and the static
        buffers of the rows, so that the first step is a compiled step like the others."""
        rows = len(self.inputs)
        for layer, cache in zip(self.model.decoder.layers, self.cache.layers, strict=True):
            keys, values = layer.cross_attn.source_keys(self.memory)
            cache.cross_attention.append(keys, values)
            cache.self_attention.reserve(rows, keys)

    def _window(self, n: int) -> Tensor:
        """arange(n), one tensor for each n in a process; n at least 2: a window of one
        position (the first step's) would be a size Dynamo specialises, a graph more."""
        n = max(n, 2)
        key = (n, self.memory.device)
        window = self.storage.windows.get(key)
        if window is None:
            window = self.storage.windows[key] = torch.arange(n, device=self.memory.device)
        return window


# Where compiling pays for itself by default (`--compile` not given): source words from which
# a search repays its compiling, by kind (`pays`)
PAYS_AFTER_WORDS = {"greedy": 1_000_000, "beam": 2_500_000}


def pays(device: torch.device, dtype: str, words: int | None = None, beams: int = 1) -> bool:
    """Whether to compile when not told. On a GPU always: its steps replay CUDA graphs
    (transduce.decoding.graphed), each captured in milliseconds, and a search ran 2.3-4.5x as
    fast on an H200 (docs/speed.md). On a CPU in float32, for a server (`words` None: it
    searches for as long as it runs, and compiles before it counts as up), or for an input of
    `PAYS_AFTER_WORDS` source words or more, searched with `beams` beams. Measured on the
    trained Multi30k model (docs/speed.md): compiling a kind of search takes ~40 s in a fresh
    process, and saves ~31 us a target token in greedy search, ~12 in beam search: it repays
    after ~1.3 and ~3.4 million target tokens, about 1 and 2.5 million source words."""
    if device.type == "cuda":
        return True
    if device.type != "cpu" or dtype != "float32":
        return False
    return words is None or words >= PAYS_AFTER_WORDS["greedy" if beams == 1 else "beam"]


# Inductor's options for the search's graphs: its C++ wrapper calls the kernels, not Python; and
# in a graph of one row (a size Dynamo specialises) a linear layer of up to 2,048 x 2,048 is
# Inductor's own vectorised loop over the weight, fused with what surrounds it, not a call to
# the BLAS (its "decompose_mm_pass"; larger layers, the custom operators of
# transduce.kernels.linear and graphs of several rows keep theirs). MKL's product of one row
# is a matrix-vector product of its generic code on an AMD CPU: with the pass a sentence's
# greedy block ran 1.66-1.88x as fast on the trained Multi30k model, 1.21x at the `base` shape,
# whole greedy searches of test2016 1.02-1.13x, within the host's noise
# (benchmarks/one_row_graphs.py, docs/speed.md). The tokens are the same up to float rounding
# (another order of summation); the tests check they are identical.
INDUCTOR_OPTIONS = {"cpp_wrapper": True,
                    "post_grad_fusion_options": {"decompose_mm_pass": {}}}

# Graphs Dynamo keeps for one function before it runs it eagerly, silently but for a warning:
# each shape of model a process searches adds its own (greedy and beam steps, a single
# source's), so Dynamo's 8 would leave a server's third or fourth model uncompiled
RECOMPILE_LIMIT = 64


def _configure() -> None:
    """Dynamo's settings for the compiled search, for the process, as Dynamo reads them when
    it traces, on whichever thread a search compiles: no duck sizing (sizes equal when traced
    taken for one, see the module), room for every model's graphs (`RECOMPILE_LIMIT`),
    Python floats taken as the constants they are, and a model's guards checked through its
    modules' dictionaries. With `dynamic=True` Dynamo first makes a
    symbol of each float a step reads (`nn.Embedding`'s norm_type, 2.0), finds it must be
    specialised, and traces the whole step again: a second trace that also missed the
    AOTAutograd cache, so a step with Inductor's cache on disk still took ~80 s to compile
    on a 2-core AVX2 EPYC, against ~26 s without it (docs/speed.md). Before each call of a
    graph Dynamo checks its guards, the model's every module, parameter and setting; with
    recursive dictionary tags a module none of whose attributes was reassigned since the last
    call passes at once (a third less time, docs/speed.md). That assumes what Dynamo's default
    (`skip_tensor_guards_with_matching_dict_tags`) already assumes of a tensor held in a
    module's dictionary: that it keeps its dtype and shape, as weights loaded in place do.
    Imported here, not with the module: Dynamo takes ~2 s to import, a third of a
    `translate` that does not compile."""
    import torch._dynamo.config as dynamo_config
    import torch.fx.experimental._config as fx_config

    fx_config.use_duck_shape = False
    dynamo_config.specialize_float = True
    dynamo_config.use_recursive_dict_tags_for_guards = True
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)


# Dynamo keeps a function's graphs, and the guards it checks before each call of one, with the
# function's code object, and checking them is not safe from two threads at once: guards that
# relate several inputs (that two tensors are not one) keep what they have seen in the guard
# object until the check ends, and a check that runs Python (a shape guard) can let the other
# thread in halfway, whose check then fails against the first one's inputs. The call compiles
# the graph again, while a client waits ("Unexpected recompilation: runtime guards failed even
# though they passed", in ~1 of 10 runs of 64 concurrent requests to a server of two searches).
# So each of the searches at once (transduce.decoding.parallel) calls a copy of its own: the same
# function with a code object of its own (`_compile`), whose graphs Inductor's cache gives at
# the cost of tracing them (`use_copy`; the copy a thread calls, 0 unless told).
_COPY = threading.local()


def use_copy(index: int) -> None:
    """The calling thread calls copy `index` (0, 1, ...) of the compiled functions from now on:
    one for each of the searches at once (see above)."""
    _COPY.index = index


_DECODE_NEXT: dict[int, Callable] = {}


def compiled_decode_next() -> Callable:
    """`Transformer.decode_next` through `torch.compile` (Inductor, `INDUCTOR_OPTIONS`), made
    once a process for each copy (`use_copy`) and shared by every model."""
    index = getattr(_COPY, "index", 0)
    if index not in _DECODE_NEXT:
        _DECODE_NEXT[index] = _compile(_decode_next, index)
    return _DECODE_NEXT[index]


_GREEDY: dict[tuple[int, int], Callable] = {}


def compiled_greedy(k: int) -> Callable:
    """`_greedy` of k tokens through `torch.compile` as `compiled_decode_next`: one graph, the
    k steps unrolled in it; made once a process for each k and copy."""
    index = getattr(_COPY, "index", 0)
    if (k, index) not in _GREEDY:
        def greedy(model: Transformer, inputs: Tensor, memory: Tensor, src_mask: Tensor,
                   cache: StaticDecoderCache, never: Tensor, eos_bias: Tensor):
            return _greedy(model, inputs, memory, src_mask, cache, never, eos_bias, k)

        _GREEDY[k, index] = _compile(greedy, index)
    return _GREEDY[k, index]


def _compile(function: Callable, index: int) -> Callable:
    """Copy `index` of the function through `torch.compile` as the search's steps are compiled
    (every size dynamic, Inductor with `INDUCTOR_OPTIONS`, Dynamo as `_configure` sets it):
    the function itself for copy 0; for another, the same function with a code object of its
    own (named for its copy: `_decode_next_1`), to which Dynamo keeps its own graphs and guards."""
    _configure()
    if index:
        function = _own_code(function, index)
    return torch.compile(function, dynamic=True, options=INDUCTOR_OPTIONS)


def _own_code(function: Callable, index: int) -> Callable:
    """The same function with a code object of its own, named for copy `index`."""
    code = function.__code__
    renamed = {"co_name": f"{code.co_name}_{index}"}
    if hasattr(code, "co_qualname"):  # Python 3.11 on
        renamed["co_qualname"] = f"{code.co_qualname}_{index}"
    code = code.replace(**renamed)
    return types.FunctionType(code, function.__globals__, code.co_name, function.__defaults__,
                              function.__closure__)


def _greedy(model: Transformer, inputs: Tensor, memory: Tensor, src_mask: Tensor,
            cache: StaticDecoderCache, never: Tensor, eos_bias: Tensor,
            k: int) -> tuple[Tensor, Tensor]:
    """k greedy steps (`transduce.model.steps.greedy_tokens`): their tokens (rows, k) and the
    last as the next step's input (rows, 1)."""
    eos = model.config.eos_id
    chosen = []
    for j in range(k):
        logits = model.decode_next(inputs, memory, src_mask, cache=cache).float()
        logits = logits.index_fill(1, never, float("-inf"))
        logits[:, eos] += eos_bias[j]
        inputs = argmax(logits)[:, None]  # in two stages, as eagerly (transduce.decoding.ranking)
        chosen.append(inputs)
    return torch.cat(chosen, dim=1), inputs


def _decode_next(model: Transformer, inputs: Tensor, memory: Tensor, src_mask: Tensor,
                 cache: StaticDecoderCache) -> Tensor:
    return model.decode_next(inputs, memory, src_mask, cache=cache)
