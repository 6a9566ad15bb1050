"""Batched matrix products too small for PyTorch's CPU kernel to vectorise.

PyTorch's CPU `bmm` multiplies matrices of fewer than 400 multiply-adds each (m * k * n) in a
scalar loop of its own (`bmm_out_or_baddbmm_` in aten/src/ATen/native/LinearAlgebra.cpp), and
above that on BLAS. A decoding step's attention falls below it for its first dozen positions: one
query a row and heads of 32, so the weights times the values over 12 positions are 384
multiply-adds. There the scalar loop took 2-5x as long as the same product written as a
broadcast multiplication and a sum over k, which PyTorch runs vectorised (the scores 0.9-1.4x),
and 8% of an eager beam search of Multi30k (docs/speed.md). `matmul` picks that form there, on
the fast paths in float32 on a CPU; the reference path, other dtypes (whose products the sum
would round), larger products and compiled graphs (which Inductor writes its own way) keep
`a @ b`. The result is the same up to float rounding (another order of summation).
"""

from __future__ import annotations

import torch
from torch import Tensor

from transduce import kernels

SCALAR_BELOW = 400  # PyTorch's bound: products of fewer multiply-adds a matrix run its scalar loop


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """`a @ b` for a (..., m, k) and b (..., k, n)."""
    # sizes compared last: in a graph being traced the comparison would be a guard, and a
    # graph compiled again when a window's length crossed the bound
    if (not torch.compiler.is_compiling() and a.device.type == "cpu"
            and a.dtype == torch.float32 and kernels.fast()
            and a.shape[-2] * a.shape[-1] * b.shape[-1] < SCALAR_BELOW):
        return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
    return a @ b
