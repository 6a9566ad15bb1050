"""Reading a run back: its configuration, its tokenizers and the model of one of its checkpoints.

What `Translator.load`, resuming, exporting and serving start from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from transduce.config import Config, load_config
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError
from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer
from transduce.runs import checkpoint as ckpt
from transduce.runs.int8 import load_int8

log = logging.getLogger(__name__)


def read_config(run_dir: Path, overrides: list[str] = ()) -> Config:
    """A run's configuration (config.yaml), with `section.key=value` overrides."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir}: not a model directory (no config.yaml)")
    return load_config(run_dir / "config.yaml", list(overrides))


def model_config(config: Config, tokenizers: Tokenizers) -> ModelConfig:
    """The model a run's configuration describes over its tokenizers' vocabularies."""
    return config.model.resolve(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size,
                                shared_vocab=tokenizers.shared, specials=tokenizers.specials)


@dataclass
class LoadedRun:
    model: Transformer  # in eval mode, on the CPU, float32 (linear layers int8 if asked)
    config: Config
    tokenizers: Tokenizers
    weights: Path  # the file its weights came from


def load_run(run_dir: Path, checkpoint: str | Path | None = None, *,
             int8: bool = False) -> LoadedRun:
    """The model of a run directory with its configuration and tokenizers. Its weights: the
    file `checkpoint` names, else the averaged checkpoint if any, else the best, else the
    latest. Says which one (a log line), and warns when the average is older than the latest.
    With `int8`, the model's linear layers are int8, from the checkpoint's int8 copy
    (`transduce.runs.int8`)."""
    run_dir = Path(run_dir)
    config = read_config(run_dir)
    tokenizers = Tokenizers.load(run_dir)
    model = Transformer(model_config(config, tokenizers))
    weights = Path(checkpoint) if checkpoint else ckpt.model_checkpoint(run_dir)
    if int8:
        load_int8(model, weights)
    else:
        ckpt.load_weights(model, weights)
    log.info("%s: %s", run_dir, ckpt.describe(run_dir, weights))
    if warning := ckpt.stale_average(run_dir, weights):
        log.warning("%s", warning)
    return LoadedRun(model.eval(), config, tokenizers, weights)


def check_fits(config: Config, tokenizers: Tokenizers, weights: dict, path: Path) -> None:
    """A `UserError` unless the model `config` describes holds `weights` (a resumed run whose
    overrides change the model's shape), found on the meta device: no memory, no time."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in
                  Transformer(model_config(config, tokenizers)).state_dict().items()}
    wrong = sorted(k for k, v in weights.items() if shapes.get(k) != tuple(v.shape))
    if wrong:
        raise UserError(f"{path}: its weights do not fit the model the configuration now "
                        f"describes ({len(wrong)} tensors differ, e.g. {wrong[0]}); a resumed "
                        "run keeps its model's shape")
