"""Attention on PyTorch's fused scaled-dot-product kernel, where it is faster than the product
written out (`transduce.model.attention.attention_with_weights`), which serves everywhere else."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from transduce import kernels

FEW_QUERIES = 16  # at most this many per head: a search step's (its k beams' for beam search)


def fused_attention_pays(q: Tensor, dropout: float) -> bool:
    """Whether to attend with `fused_attention`. Not for a decoding step's few queries with no
    gradient due (one, or one per beam of a source attending to its encoder output together):
    there the fused kernel's set-up costs more than the work, and two plain matrix products win
    (a single query, and beam 5's five queries per source; docs/speed.md)."""
    if not kernels.fast():
        return False
    return not (q.shape[2] <= FEW_QUERIES and not (q.requires_grad and torch.is_grad_enabled())
                and not dropout)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                    causal: bool = False, dropout: float = 0.0) -> Tensor:
    """softmax(Q K^T / sqrt(Dh)) V: q (B, H, T_q, Dh), k and v (B, H, T_k, Dh), mask True = may
    attend; `causal` only without a mask and with as many queries as keys. PyTorch's CPU kernel
    runs its backward pass slower in bf16/fp16 than in fp32 (docs/speed.md), so training under
    autocast attends in fp32 there."""
    if (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16)
            and q.requires_grad and torch.is_grad_enabled()):
        with torch.autocast("cpu", enabled=False):
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                 dropout_p=dropout, is_causal=causal)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                          is_causal=causal)
