"""Learning-rate schedules: functions of the update number (1-based) to a learning rate."""

from __future__ import annotations

import functools
import math


def noam(step: int, *, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's schedule (section 5.3): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    Linear warm-up to a peak at step = warmup, then decay with the inverse square root.
    """
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt(step: int, *, peak_lr: float, warmup: int, warmup_init_lr: float = 0.0) -> float:
    """fairseq's inverse_sqrt: linear warm-up from warmup_init_lr to peak_lr over `warmup`
    updates, then peak_lr * sqrt(warmup / step)."""
    step = max(step, 1)
    if step < warmup:
        return warmup_init_lr + (peak_lr - warmup_init_lr) * step / warmup
    return peak_lr * math.sqrt(warmup / step)


def constant(step: int, *, peak_lr: float, warmup: int = 0) -> float:
    """peak_lr after an optional linear warm-up (fine-tuning)."""
    return peak_lr * min(1.0, max(step, 1) / warmup) if warmup else peak_lr


def cosine(step: int, *, peak_lr: float, warmup: int, total: int) -> float:
    """Linear warm-up to peak_lr, then half a cosine down to 0 at update `total` (and 0 after):
    a run planned for `total` updates ends on a learning rate near zero."""
    step = max(step, 1)
    if step < warmup:
        return peak_lr * step / warmup
    progress = min(1.0, (step - warmup) / max(total - warmup, 1))
    return peak_lr * 0.5 * (1 + math.cos(math.pi * progress))


def from_config(train, *, d_model: int):
    """The schedule `train` (a TrainConfig) names, as a function of the update number."""
    if train.lr_schedule == "noam":
        return functools.partial(noam, d_model=d_model, warmup=train.warmup, scale=train.lr_scale)
    if train.lr_schedule == "inverse_sqrt":
        return functools.partial(inverse_sqrt, peak_lr=train.lr, warmup=train.warmup)
    if train.lr_schedule == "cosine":
        return functools.partial(cosine, peak_lr=train.lr, warmup=train.warmup,
                                 total=train.max_updates)
    return functools.partial(constant, peak_lr=train.lr, warmup=train.warmup)
