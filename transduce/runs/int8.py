"""Quantized checkpoints: a checkpoint's int8 copy, made once and read back fast.

    RUN/checkpoints/NAME/model.safetensors        the float weights
    RUN/checkpoints/NAME/model.int8.safetensors   their linear layers in int8 (made by
                                                  `--dtype int8` on first use)

The int8 file records the size and modification time of the weights it was made from; when they
no longer match (a checkpoint averaged again, say) it is made anew. Where the directory cannot be
written (a read-only image), the model is quantized in memory each time instead.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transduce.errors import UserError
from transduce.files import replace_atomically
from transduce.kernels.int8 import quantize_linear_layers
from transduce.runs import checkpoint as ckpt

log = logging.getLogger(__name__)

SUFFIX = ".int8.safetensors"


def int8_path(weights: Path) -> Path:
    """Where the int8 copy of the weights file `weights` lives: beside it."""
    weights = Path(weights)
    return weights.with_name(weights.name.removesuffix(".safetensors") + SUFFIX)


def load_int8(model: torch.nn.Module, weights: Path) -> torch.nn.Module:
    """`model` (freshly built, float) with the weights of the file `weights` and its linear
    layers in int8: read from the int8 copy when it is of these weights, else quantized now and
    the copy saved for the next time."""
    weights, copy = Path(weights), int8_path(weights)
    source = _fingerprint(weights)
    if copy.is_file() and _made_from(copy) == source:
        quantize_linear_layers(model, empty=True)
        ckpt.load_weights(model, copy)
        return model
    ckpt.load_weights(model, weights)
    quantize_linear_layers(model)
    try:
        _save(model, copy, source)
        log.info("saved the int8 weights to %s", copy)
    except OSError as error:
        log.warning("could not save the int8 weights beside %s (%s); quantized in memory",
                    weights, error.strerror or error)
    return model


def _fingerprint(weights: Path) -> str:
    try:
        stat = weights.stat()
    except FileNotFoundError:
        raise UserError(f"{weights}: no such weights file") from None
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _made_from(copy: Path) -> str | None:
    try:
        with safe_open(str(copy), "pt") as f:
            return (f.metadata() or {}).get("made_from")
    except Exception:  # a damaged copy is made again
        return None


def _save(model: torch.nn.Module, path: Path, source: str) -> None:
    """Write the int8 model's tensors to `path` whole or not at all."""
    replace_atomically(path, lambda tmp: save_file(ckpt.model_state(model), str(tmp),
                                                   metadata={"made_from": source}))
