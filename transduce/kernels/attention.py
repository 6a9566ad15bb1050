"""Attention on PyTorch's fused scaled-dot-product kernel, where it is faster than the product
written out (`transduce.model.attention.attention_with_weights`), which serves everywhere else.

On a GPU the kernel is FlashAttention's or the memory-efficient one, never cuDNN's, which
PyTorch prefers on Hopper GPUs: cuDNN builds a plan for each new shape of its inputs, tens to
hundreds of milliseconds each (pytorch/pytorch#161434, meta-pytorch/torchtune#1652), and
batches of sentences come in hundreds of shapes (their number and length), as do the steps of
a search. Seen on an H100 and an H200 with cuDNN's kernel: the Trainer's update of the base
model took 1-2 s, faster the more shapes it had met, while the step repeated over 12 batches
ran at 82,000 target tokens/s (benchmarks/train_step.py); that this change is the cure is yet
to be measured on a GPU (docs/speed.md)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from transduce import kernels

GPU_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
FEW_QUERIES = 16  # at most this many per head: a search step's (its k beams' for beam search)


def fused_attention_pays(q: Tensor, dropout: float) -> bool:
    """Whether to attend with `fused_attention`. Not for a decoding step's few queries with no
    gradient due (one, or one per beam of a source attending to its encoder output together):
    there the fused kernel's set-up costs more than the work, and two plain matrix products win
    (a single query, and beam 5's five queries per source; docs/speed.md). Except in a
    compiled step (transduce.decoding.compiled) for a source's beams together: Inductor's own
    products copy the grouped queries and the keys' window every step, which made compiled
    beam search a third slower than eager; the fused kernel reads them as they are."""
    if not kernels.fast():
        return False
    few = (q.shape[2] <= FEW_QUERIES and not (q.requires_grad and torch.is_grad_enabled())
           and not dropout)
    if few and torch.compiler.is_compiling():
        return q.shape[2] > 1
    return not few


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
    if q.device.type == "cuda":
        with sdpa_kernel(GPU_BACKENDS):  # not cuDNN's: a plan per shape (above)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                  is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                          is_causal=causal)
