"""Label-smoothed cross-entropy (section 5.4), perplexity's loss and R-Drop's.

Each is written here as its definition; by default (see `transduce.kernels`) a fused kernel
computes it, `transduce/kernels/loss.py`, with the same value and gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from transduce import kernels
from transduce.kernels import loss as fused


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, *, epsilon: float = 0.1,
                                 ignore_index: int = 1,
                                 reduction: str = "sum") -> Tensor:
    """Label-smoothed cross-entropy of logits (..., V) against target ids (...), ignoring
    positions whose target is `ignore_index` (padding): per position
    (1 - eps) * (-log p[y]) + eps * mean_v(-log p[v]).

    reduction: "sum" over real positions, or "mean" per real target token.
    """
    _check_reduction(reduction)
    logits = logits.reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    real = target != ignore_index
    if not kernels.fast():
        logits = _at_least_float32(logits)
        if reduction == "mean" and not real.any():
            return logits.sum() * 0.0
        return F.cross_entropy(logits, target, ignore_index=ignore_index,
                               reduction=reduction, label_smoothing=epsilon)
    weight = real.to(torch.float32)
    if reduction == "mean":
        weight = weight / real.sum().clamp(min=1)
    safe_target = target.masked_fill(~real, 0)  # any valid index; its weight is zero
    return fused.label_smoothed_cross_entropy(logits, safe_target, weight, epsilon)


def _at_least_float32(x: Tensor) -> Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _check_reduction(reduction: str) -> None:
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")


def nll_loss(logits: Tensor, target: Tensor, *, ignore_index: int = 1) -> Tensor:
    """Summed negative log-likelihood of the targets (no smoothing), for perplexity."""
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
        ignore_index=ignore_index, reduction="sum")


def projected_label_smoothed_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor, *,
                                           epsilon: float = 0.1, ignore_index: int = 1,
                                           reduction: str = "sum",
                                           bias: Tensor | None = None) -> Tensor:
    """`label_smoothed_cross_entropy(hidden @ weight.T + bias, target, ...)`: hidden (..., D)
    are the decoder's last states, weight (V, D) and bias (V,) (if any) the output projection.
    The fused kernel never holds the logits whole, and padding positions cost it nothing."""
    _check_reduction(reduction)
    hidden = hidden.reshape(-1, hidden.shape[-1])
    target = target.reshape(-1)
    if not kernels.fast():
        return label_smoothed_cross_entropy(F.linear(hidden, weight, bias), target,
                                            epsilon=epsilon, ignore_index=ignore_index,
                                            reduction=reduction)
    real = (target != ignore_index).nonzero().squeeze(1)
    row_weight = hidden.new_ones(len(real), dtype=torch.float32)
    if reduction == "mean":
        row_weight /= max(len(real), 1)
    return fused.projected_label_smoothed_cross_entropy(
        hidden.index_select(0, real), weight, target.index_select(0, real), row_weight, epsilon,
        bias=bias)


def r_drop_loss(hidden: Tensor, weight: Tensor, target: Tensor, *, epsilon: float = 0.1,
                alpha: float = 5.0, ignore_index: int = 1,
                bias: Tensor | None = None) -> Tensor:
    """R-Drop (Liang et al., 2021): the batch ran through the model twice, each pass with its own
    dropout, stacked along the first dimension of `hidden` (2B, T, D) and `target` (2B, T).

    Returns, summed over the real positions of both passes, the label-smoothed cross-entropy of
    each plus alpha times half the symmetric KL divergence between the two predictions,
    KL(p1 || p2) + KL(p2 || p1) = sum_v (p1 - p2)(log p1 - log p2), as fairseq's
    `label_smoothed_cross_entropy_with_rdrop` does; gradients reach both passes.
    """
    first, second = target.chunk(2)
    if first.shape != second.shape or not torch.equal(first, second):
        raise ValueError("r_drop_loss needs the same targets twice, stacked: (2B, T)")
    real = (first.reshape(-1) != ignore_index).nonzero().squeeze(1)
    hidden = hidden.reshape(2, -1, hidden.shape[-1]).index_select(1, real)  # (2, N, D)
    target = first.reshape(-1).index_select(0, real)
    if kernels.fast():
        return fused.projected_r_drop(hidden, weight, target, epsilon=epsilon, alpha=alpha,
                                      bias=bias)
    log_p = F.log_softmax(_at_least_float32(F.linear(hidden, weight, bias)), dim=-1)  # (2, N, V)
    smoothed = -((1 - epsilon) * log_p.gather(2, target.expand(2, -1)[..., None]).sum()
                 + epsilon / log_p.shape[-1] * log_p.sum())
    p = log_p.exp()
    return smoothed + alpha / 2 * ((p[0] - p[1]) * (log_p[0] - log_p[1])).sum()
