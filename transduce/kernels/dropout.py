"""Dropout with a fast CPU path.

On CPU, PyTorch draws the dropout mask one Bernoulli sample at a time, a large share of a
training step of the `tiny` model. Here one 64-bit random draw gives four 15-bit uniform
numbers, each compared with p: the same Bernoulli(1 - p) keep mask up to a quantisation of p to
1/32768, several times faster (docs/speed.md). Other devices, and the reference paths
(TRANSDUCE_KERNELS=reference), use PyTorch's `F.dropout`.
The mask comes from PyTorch's default generator, so `torch.manual_seed` makes it reproducible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce import kernels

_LEVELS = 1 << 15  # uniform 15-bit numbers: an int16 with its sign bit cleared


def keep_mask(shape: torch.Size, p: float, device: torch.device | None = None) -> Tensor:
    """A boolean tensor of `shape`, each element True with probability 1 - p, independently."""
    n = shape.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    uniform = bits.view(torch.int16)[:n] & (_LEVELS - 1)  # random_() leaves bit 63 zero: masked
    return uniform.ge(round(p * _LEVELS)).view(shape)


class _MaskedScale(torch.autograd.Function):
    """x * keep / (1 - p), saving the one-byte mask (not a float one) for the backward pass."""

    @staticmethod
    def forward(ctx, x: Tensor, keep: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x.mul(keep).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (keep,) = ctx.saved_tensors
        return grad.mul(keep).mul_(ctx.scale), None, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element with probability p and scale the rest by 1 / (1 - p), when training."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not kernels.fast():
        return F.dropout(x, p, training=True)
    return _MaskedScale.apply(x, keep_mask(x.shape, p, x.device), 1.0 / (1.0 - p))


class Dropout(nn.Module):
    """`nn.Dropout` with the fast CPU path of `dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
