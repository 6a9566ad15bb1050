"""A decoder step compiled by `torch.compile`, over a cache laid out for it (as gpt-fast does).

`Compiled(model)` is searched like the model itself (greedy, beam, sampling: `decoder_steps`
gives it `StaticSteps`). The self-attention keys and values of all layers live in one buffer per
search, (rows, layers, heads, length, Dh), preallocated to the search's length limit; each step
writes its keys and values at its position, a tensor, and attends to every position with the
later ones masked, so the step's code and shapes stay the same from step to step and Inductor
compiles it once (its rows vary: finished sentences leave the batch; those compile as a dynamic
dimension). The cross-attention keys and values of all layers are computed in one product
before the first step. Inductor's C++ wrapper calls the kernels, not Python.

What it gains is the per-step overhead of eager PyTorch, which is what one sentence's step
costs (an interactive request); at 64 sentences and
more the matrix products dominate, and attending over the whole preallocated length and
reordering whole buffers cost what they save (greedy a little faster, beam 5 slower; see
benchmarks/compiled_step.py and docs/speed.md). Compiling takes tens of seconds for each kind
of search the first time a process runs it, so it is opt-in: `--compile`,
`Translator.load(..., compile=True)`. The tokens are those of the eager
search, up to float rounding (another order of summation); the tests check they are identical.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transduce.decoding.steps import DecoderSteps
from transduce.model.cache import copy_rows, moved_rows
from transduce.model.transformer import Transformer


class Compiled(nn.Module):
    """A model whose search steps run compiled: the searches accept it where they accept a
    Transformer; everything else (encoding, attention pictures) runs the model as it is."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def src_mask(self, src: Tensor) -> Tensor:
        return self.model.src_mask(src)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return self.model.encode(src, src_mask)

    def decode_with_attention(self, *args, **kwargs) -> tuple[Tensor, Tensor]:
        return self.model.decode_with_attention(*args, **kwargs)

    def num_parameters(self) -> int:
        return self.model.num_parameters()


class StaticSteps(DecoderSteps):
    """`DecoderSteps` over static buffers, each step by the compiled `step`."""

    def __init__(self, model: Transformer, src: Tensor) -> None:
        super().__init__(model, src, use_cache=False)
        self.cross_k, self.cross_v = cross_keys_values(model, self.memory)
        self.self_k: Tensor | None = None  # (capacity rows, L, H, length, Dh), rows [0, n) used
        self.self_v: Tensor | None = None  # both made by the first step
        self._spare: tuple[Tensor, Tensor] | None = None  # for reordering into
        self.max_length = model.config.max_positions  # unless the search limits it
        self.position = 0  # of the next step's input token

    def limit(self, max_length: int) -> None:
        self.max_length = max_length

    def _decode(self) -> Tensor:
        n = len(self.inputs)
        if self.self_k is None:  # the first step: as many rows as the search starts with
            config = self.model.config
            heads = self.model.decoder.layers[0].self_attn.n_heads
            shape = (n, config.n_decoder_layers, heads, self.max_length, config.d_model // heads)
            self.self_k, self.self_v = self.memory.new_zeros(shape), self.memory.new_zeros(shape)
        logits = compiled_step()(
            self.model, self.inputs[:, -1], torch.tensor(self.position, device=self.inputs.device),
            self.cross_k, self.cross_v, self.src_mask, self.self_k[:n], self.self_v[:n],
            self.group)
        self.position += 1
        return logits

    def append(self, tokens: Tensor) -> None:
        self.inputs = tokens[:, None]

    def select(self, sources: Tensor) -> None:
        self.memory = self.memory.index_select(0, sources)
        self.src_mask = self.src_mask.index_select(0, sources)
        self.cross_k = self.cross_k.index_select(0, sources)
        self.cross_v = self.cross_v.index_select(0, sources)
        rows = sources[:, None] * self.group + torch.arange(self.group, device=sources.device)
        self.reorder_beams(rows.view(-1))

    def reorder_beams(self, rows: Tensor) -> None:
        n, filled = len(self.inputs), self.position
        self.inputs = self.inputs.index_select(0, rows)
        if self.self_k is None:  # nothing decoded yet
            return
        moved = moved_rows(rows) if len(rows) <= n else None
        if moved is not None:  # few rows change: in place
            for buffer in (self.self_k, self.self_v):
                copy_rows(buffer[:n, :, :, :filled], rows[moved], moved)
            return
        if self._spare is None or len(self._spare[0]) < len(rows):
            self._spare = (self.self_k.new_zeros(len(rows), *self.self_k.shape[1:]),
                           self.self_v.new_zeros(len(rows), *self.self_v.shape[1:]))
        k, v = self._spare
        k[: len(rows), :, :, :filled] = self.self_k[:n, :, :, :filled][rows]
        v[: len(rows), :, :, :filled] = self.self_v[:n, :, :, :filled][rows]
        self._spare = (self.self_k, self.self_v)
        self.self_k, self.self_v = k, v


def cross_keys_values(model: Transformer, memory: Tensor) -> tuple[Tensor, Tensor]:
    """Every decoder layer's cross-attention keys and values of the encoder output (B, S, D),
    in one product: two (B, L, H, S, Dh)."""
    layers = model.decoder.layers
    batch, length, d = memory.shape
    heads = layers[0].cross_attn.n_heads
    kv = torch.cat([layer.cross_attn.in_proj(memory, slice(d, None)) for layer in layers], -1)
    kv = kv.view(batch, length, len(layers), 2, heads, d // heads).permute(3, 0, 2, 4, 1, 5)
    return kv[0].contiguous(), kv[1].contiguous()


def step(model: Transformer, tokens: Tensor, position: Tensor, cross_k: Tensor, cross_v: Tensor,
         src_mask: Tensor, self_k: Tensor, self_v: Tensor, group: int) -> Tensor:
    """The next token's logits (rows, V) for the newest tokens (rows,) at `position` (0-d), with
    the layers' self-attention keys and values so far in self_k, self_v (rows, L, H, length, Dh;
    this step's are written there) and the sources' cross-attention ones in cross_k, cross_v
    (rows / group, L, H, S, Dh): each source serves `group` consecutive rows (its beams)."""
    embedding = model.decoder.embedding
    x = embedding.tokens(tokens[:, None]) * embedding.scale
    x = x + embedding.positions.table.index_select(0, position.view(1))
    rows, _, d = x.shape
    seen = torch.arange(self_k.shape[3], device=x.device) <= position  # (length,)
    for i, layer in enumerate(model.decoder.layers):

        def self_attention(h: Tensor, i: int = i, layer: nn.Module = layer) -> Tensor:
            attn = layer.self_attn
            q, k, v = attn._heads(attn.in_proj(h), 3)  # (rows, H, 1, Dh)
            self_k[:, i].index_copy_(2, position.view(1), k)
            self_v[:, i].index_copy_(2, position.view(1), v)
            out = _attend(q, self_k[:, i], self_v[:, i], seen)
            return attn.out_proj(out.transpose(1, 2).reshape(rows, 1, d))

        def cross_attention(h: Tensor, i: int = i, layer: nn.Module = layer) -> Tensor:
            attn = layer.cross_attn
            (q,) = attn._heads(attn.in_proj(h, slice(0, d)), 1)  # (rows, H, 1, Dh)
            q = q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)  # (sources, H, g, Dh)
            out = _attend(q, cross_k[:, i], cross_v[:, i], src_mask)
            out = out.unflatten(2, (group, 1)).transpose(1, 2).flatten(0, 1)  # (rows, H, 1, Dh)
            return attn.out_proj(out.transpose(1, 2).reshape(rows, 1, d))

        x = layer.self_attn_block(x, self_attention)
        x = layer.cross_attn_block(x, cross_attention)
        x = layer.ffn_block(x, layer.ffn)
    return model.output(model.decoder.norm(x)[:, 0])


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(Dh)) v over the keys `mask` allows (at least one per query)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


_COMPILED = None


def compiled_step():
    """`step` through `torch.compile` (Inductor with its C++ wrapper), made once a process."""
    global _COMPILED
    if _COMPILED is None:
        _COMPILED = torch.compile(step, options={"cpp_wrapper": True})
    return _COMPILED
