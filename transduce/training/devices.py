"""Where and in what precision a run trains: train.device and train.precision resolved."""

from __future__ import annotations

import contextlib
import logging

import torch

from transduce.errors import UserError
from transduce.runtime import native_bf16, resolve_device
from transduce.training.distributed import World

log = logging.getLogger("transduce.train")


def training_device(name: str, world: World) -> torch.device:
    """train.device as a torch.device; with several processes on a machine each has its own
    GPU (the one of its local rank)."""
    device = resolve_device(name, setting="train.device")
    if device.type == "cuda" and world.size > 1:
        if device.index is not None:
            raise UserError(f"train.device={name}: with several training processes each takes "
                            "the GPU of its local rank; use cuda or auto")
        if world.local_rank >= torch.cuda.device_count():
            raise UserError(f"training process {world.local_rank} of this machine has no GPU of "
                            f"its own: {torch.cuda.device_count()} GPUs; use fewer processes")
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    return device


def precision(name: str, device: torch.device) -> str:
    """train.precision as it will run: "auto" resolved, bf16 without hardware support warned."""
    if name == "auto":
        name = "bf16" if native_bf16(device) else "fp32"
        log.info("precision: %s (train.precision=auto on %s%s)", name, device.type,
                 "" if name == "bf16" else ", which has no native bf16")
    elif name == "bf16" and not native_bf16(device):
        log.warning("train.precision=bf16: this %s has no native bf16 (AVX512-BF16, AMX or a "
                    "bf16 GPU), so bf16 is emulated and training runs slower than in fp32 (18x "
                    "for `tiny` on an AVX2 CPU); train.precision=auto picks the faster",
                    device.type)
    return name


def autocast(precision: str, device: torch.device):
    """The context a training step runs its forward pass in: autocast to bf16 or fp16, or none."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)
