"""Scaled dot-product attention (section 3.2.1) and multi-head attention (section 3.2.2)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce.kernels.attention import fused_attention, fused_attention_pays
from transduce.kernels.linear import Linear
from transduce.kernels.small_products import matmul
from transduce.model.cache import KVCache, SourceKVCache
from transduce.model.masks import causal_mask
from transduce.model.static_cache import StaticKVCache


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
              causal: bool = False, dropout: float = 0.0) -> Tensor:
    """softmax(Q K^T / sqrt(Dh)) V, on PyTorch's fused kernel where it pays (transduce.kernels).

    q (B, H, T_q, Dh), k and v (B, H, T_k, Dh); mask broadcastable to (B, H, T_q, T_k), True =
    may attend; `causal` adds the causal mask (queries and keys aligned at the end).
    Returns (B, H, T_q, Dh); a query that may attend to nothing gets zeros.
    """
    causal = causal and q.shape[2] > 1  # a single newest query may see every key
    if not fused_attention_pays(q, dropout):
        return attention_with_weights(q, k, v, mask, causal=causal, dropout=dropout)[0]
    if causal and q.shape[2] == k.shape[2] and mask is None:
        return fused_attention(q, k, v, causal=True, dropout=dropout)
    mask = _with_causal(mask, q, k) if causal else mask
    return fused_attention(q, k, v, mask, dropout=dropout)


def attention_with_weights(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                           causal: bool = False, dropout: float = 0.0) -> tuple[Tensor, Tensor]:
    """The same as `attention`, written out, also returning the weights (B, H, T_q, T_k).

    The weights are those before attention dropout; a fully masked row of weights is all zeros.
    """
    mask = _with_causal(mask, q, k) if causal else mask
    scores = matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:  # rows with no key to attend to are NaN after softmax(-inf, ..., -inf)
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)
    return matmul(F.dropout(weights, dropout) if dropout else weights, v), weights


def _ungroup(x: Tensor, groups: int) -> Tensor:
    """(B/g, H, g*T, X) -> (B, H, T, X): undo the grouping of queries by memory row."""
    return x.unflatten(2, (groups, -1)).transpose(1, 2).flatten(0, 1)


def _with_causal(mask: Tensor | None, q: Tensor, k: Tensor) -> Tensor:
    causal = causal_mask(q.shape[2], k.shape[2], device=q.device)
    return causal if mask is None else mask & causal


class MultiHeadAttention(nn.Module):
    """h heads of attention over learned projections; self-attention or cross-attention.

    Self-attention projects Q, K and V from the same input with one packed matrix; cross-
    attention projects Q from the decoder and K, V from the encoder output (`memory`). The packed
    `in_proj` rows are [W_Q; W_K; W_V], the layout of `torch.nn.MultiheadAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, *,
                 init_gain: float = math.sqrt(0.5)) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads = n_heads
        self.dropout = dropout
        self.init_gain = init_gain
        self.in_proj = Linear(d_model, 3 * d_model)
        self.out_proj = Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # By default Xavier over the packed (3D, D) block, as torch.nn.MultiheadAttention and
        # fairseq (written as gain 1/sqrt(2) per matrix): with per-matrix Xavier (gain 1), twice
        # the variance, the post-norm `tiny` encoder on Multi30k collapses within 100 updates,
        # every position's output the same vector (benchmarks/multi30k.md, attempt 9); pre-norm
        # trains with either, and better on Multi30k with gain 1 (attempts 2 and 10).
        for projection in self.in_proj.weight.chunk(3):
            nn.init.xavier_uniform_(projection, gain=self.init_gain)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.in_proj.bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None,
                causal: bool = False,
                cache: KVCache | StaticKVCache | SourceKVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attend from x (B, T, D) to itself, or to `memory` (B, S, D) when given.

        mask: broadcastable to (B, H, T, T_k), True = may attend. causal: queries attend only to
        keys up to their own position. cache: self-attention appends this call's keys and values
        to it and attends to all of them (a static cache: to those its mask allows);
        cross-attention fills it once and then reuses it.
        Returns the output (B, T, D) and, with need_weights, the weights (B, H, T, T_k).
        `memory` may have B / g rows (g dividing B): then each serves g consecutive rows of x, as
        a source's encoder output serves its g beams without being repeated g times.
        """
        # 1) project to queries, keys and values, split into heads: (B, H, T, Dh)
        if memory is None:
            q, k, v = self._heads(self.in_proj(x), 3)
            if cache is not None:
                k, v = cache.append(k, v)
                if cache.mask is not None:  # a static cache's positions not written yet
                    mask = cache.mask if mask is None else mask & cache.mask
        else:
            d = x.shape[-1]
            (q,) = self._heads(self.in_proj(x, slice(0, d)), 1)
            if cache is not None and len(cache):  # made at the first step, and as sources
                k, v = cache.keys, cache.values  # join (transduce.model.steps.DecoderSteps.join)
            else:
                k, v = self.source_keys(memory)
                if cache is not None:
                    k, v = cache.append(k, v)
        # 2) attend, each head on its own. With fewer memory rows than query rows (the beams of
        # a source share its keys and values), a source's rows attend together
        groups = q.shape[0] // k.shape[0]
        if groups > 1:
            q = q.unflatten(0, (-1, groups)).transpose(1, 2).flatten(2, 3)  # (B/g, H, g*T, Dh)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = attention_with_weights(q, k, v, mask, causal=causal, dropout=dropout)
        else:
            out, weights = attention(q, k, v, mask, causal=causal, dropout=dropout), None
        if groups > 1:
            out = _ungroup(out, groups)
            weights = None if weights is None else _ungroup(weights, groups)
        # 3) concatenate the heads and project back
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, -1)  # (B, T, D)
        return self.out_proj(out), weights

    def source_keys(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention's keys and values of the encoder output memory (B, S, D): two
        (B, H, S, Dh)."""
        return self._heads(self.in_proj(memory, slice(memory.shape[-1], None)), 2)

    def _heads(self, packed: Tensor, n: int) -> tuple[Tensor, ...]:
        """(B, T, n*D) -> n tensors (B, H, T, Dh)."""
        batch, length, _ = packed.shape
        packed = packed.view(batch, length, n, self.n_heads, -1)
        return packed.permute(2, 0, 3, 1, 4).unbind(0)
