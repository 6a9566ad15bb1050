"""The `train` section of a configuration."""

from __future__ import annotations

from dataclasses import dataclass

from transduce.errors import UserError
from transduce.fields import setting

SCHEDULES = ("noam", "inverse_sqrt", "cosine", "constant")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
PARALLEL = ("ddp", "fsdp")


@dataclass(frozen=True)
class TrainConfig:
    """How to train: optimiser, schedule, limits, validation, checkpoints."""

    seed: int = setting(1, "initialisation, dropout and batch order")
    init_from: str | None = setting(None,
        "start from this run directory's weights and tokenizer (ours or imported: fine-tuning), "
        "with a fresh optimiser and schedule; the model section is that run's")
    max_updates: int = setting(100_000, "stop after this many optimiser updates (0: no limit)")
    max_time: float = setting(0.0, "stop after this many seconds of training (0: no limit)")
    max_epochs: int = setting(0, "stop after this many passes over the data (0: no limit)")
    lr_schedule: str = setting("inverse_sqrt",
        "'noam' (the paper's), 'inverse_sqrt', 'cosine' (down to 0 at max_updates) or "
        "'constant'")
    lr: float = setting(5e-4, "peak learning rate (inverse_sqrt, cosine, constant)")
    lr_scale: float = setting(1.0,
        "noam: multiplies d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")
    warmup: int = setting(4000, "updates of linear warm-up")
    adam_betas: tuple[float, float] = setting((0.9, 0.98), "Adam's beta1, beta2 (the paper's)")
    adam_eps: float = setting(1e-9, "Adam's epsilon (the paper's)")
    weight_decay: float = setting(0.0, "decoupled (AdamW) when > 0")
    clip_norm: float = setting(0.0, "clip the gradient norm to this (0: no clipping)")
    accumulate: int = setting(1, "update every k batches (a k times larger effective batch)")
    label_smoothing: float = setting(0.1,
        "epsilon_ls of the paper: weight spread over the vocabulary")
    rdrop_alpha: float = setting(0.0,
        "R-Drop: each batch runs twice, the loss adds alpha x the KL between the two predictions "
        "(0: off); data.max_tokens is per pass")
    precision: str = setting("fp32",
        "'fp32', 'bf16' (autocast, CPU or GPU), 'fp16' (GPU, scaled) or 'auto': bf16 "
        "where the device multiplies it natively, else fp32")
    device: str = setting("auto", "'auto' (GPU when present), 'cpu', 'cuda', 'cuda:1', ...")
    threads: int = setting(0, "CPU threads for PyTorch (0: its default)")
    parallel: str = setting("ddp",
        "with several processes: 'ddp' (DistributedDataParallel: the whole model in each) or "
        "'fsdp' (FSDP2's fully_shard: each holds 1/N of the weights, gradients and optimiser "
        "state, for models larger than one device)")
    validate_every: int = setting(1000, "updates between validations (0: only at the end)")
    bleu: bool = setting(True, "compute BLEU on the validation split (else loss only)")
    valid_beam_size: int = setting(1, "search for validation BLEU: 1 = greedy (fast), else beam")
    patience: int = setting(0, "stop after this many validations without a better BLEU (0: never)")
    keep_checkpoints: int = setting(3, "keep the last K update checkpoints (plus the best)")
    save_every: int = setting(0,
        "updates between checkpoints besides those at validations (0: none)")
    log_every: int = setting(100, "updates between log lines")
    max_bad_updates: int = setting(20, "stop after this many consecutive non-finite losses")

    def __post_init__(self) -> None:
        if self.lr_schedule not in SCHEDULES:
            raise UserError(f"train.lr_schedule must be one of {SCHEDULES}, got "
                            f"{self.lr_schedule!r}")
        if self.parallel not in PARALLEL:
            raise UserError(f"train.parallel must be one of {PARALLEL}, got {self.parallel!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"train.precision must be one of {PRECISIONS}, got "
                            f"{self.precision!r}")
        for name in ("max_updates", "max_epochs", "warmup", "threads", "validate_every",
                     "save_every",
                     "patience", "max_time", "clip_norm", "weight_decay", "rdrop_alpha"):
            if getattr(self, name) < 0:
                raise UserError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("accumulate", "keep_checkpoints", "log_every", "max_bad_updates",
                     "valid_beam_size"):
            if getattr(self, name) < 1:
                raise UserError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.lr_scale <= 0:
            raise UserError("train.lr and train.lr_scale must be positive")
        if not 0 <= self.label_smoothing < 1:
            raise UserError(f"train.label_smoothing must be in [0, 1), got "
                            f"{self.label_smoothing}")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            raise UserError(f"train.adam_betas must be two numbers in [0, 1), got "
                            f"{self.adam_betas}")
        if self.lr_schedule == "cosine" and self.max_updates <= self.warmup:
            raise UserError(f"train.lr_schedule=cosine decays to 0 at train.max_updates, which "
                            f"must be larger than train.warmup ({self.warmup}), got "
                            f"{self.max_updates}")
        if self.lr_schedule == "noam" and self.warmup == 0:
            raise UserError("train.warmup must be positive for the noam schedule")
