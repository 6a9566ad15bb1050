"""Encoder and decoder layers: sub-layers in residual + dropout + LayerNorm (section 3.1)."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from transduce.kernels.dropout import Dropout
from transduce.kernels.linear import Linear
from transduce.model.attention import MultiHeadAttention
from transduce.model.cache import LayerCache
from transduce.model.config import ModelConfig


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike (section 3.3)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu",
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.w1 = Linear(d_model, d_ff)
        self.w2 = Linear(d_ff, d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}[activation]
        self.dropout = Dropout(dropout)
        for linear in (self.w1, self.w2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))


class Residual(nn.Module):
    """Post-norm LayerNorm(x + Dropout(f(x))) as in the paper, or pre-norm x + Dropout(f(LN(x)))."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


def _residual(config: ModelConfig) -> Residual:
    return Residual(config.d_model, config.dropout, config.norm_first, config.layer_norm_eps)


def _attention(config: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout,
                              init_gain=config.qkv_init_gain)


def _feed_forward(config: ModelConfig) -> FeedForward:
    return FeedForward(config.d_model, config.d_ff, config.activation, config.activation_dropout)


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(config)
        self.ffn = _feed_forward(config)
        self.attn_block = _residual(config)
        self.ffn_block = _residual(config)

    def forward(self, x: Tensor, src_mask: Tensor | None) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D)."""
        x = self.attn_block(x, lambda h: self.self_attn(h, mask=src_mask)[0])
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """Causal self-attention, attention over the encoder output, then the feed-forward network."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention(config)
        self.cross_attn = _attention(config)
        self.ffn = _feed_forward(config)
        self.self_attn_block = _residual(config)
        self.cross_attn_block = _residual(config)
        self.ffn_block = _residual(config)

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None, *,
                cache: LayerCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D), memory (B, S, D), src_mask (B, 1, 1, S) -> (B, T, D) and, with
        need_weights, the cross-attention weights (B, H, T, S). memory and src_mask may have
        B / g rows, one per g consecutive rows of x (a source and its g beams)."""
        self_cache = cache.self_attention if cache is not None else None
        cross_cache = cache.cross_attention if cache is not None else None
        weights = None

        def cross_attend(h: Tensor) -> Tensor:
            nonlocal weights
            out, weights = self.cross_attn(h, memory, mask=src_mask, cache=cross_cache,
                                           need_weights=need_weights)
            return out

        x = self.self_attn_block(x, lambda h: self.self_attn(h, causal=True, cache=self_cache)[0])
        x = self.cross_attn_block(x, cross_attend)
        return self.ffn_block(x, self.ffn), weights
