"""Starting a run or resuming one: the run directory claimed, the process set up, the data
prepared, and a `Trainer` over them."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import torch

from transduce.config import Config, ModelSection
from transduce.data.prepare import PreparedData, prepare
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError
from transduce.files import check_writable
from transduce.model.config import PRESETS
from transduce.pauses import pause_point
from transduce.runs import checkpoint as ckpt
from transduce.runs.claim import NewRun
from transduce.runs.load import LoadedRun, check_fits, load_run, read_config
from transduce.runs.lock import RunLock
from transduce.training import report
from transduce.training.devices import training_device
from transduce.training.distributed import World
from transduce.training.trainer import Trainer

log = logging.getLogger("transduce.train")


def start_run(config: Config, run_dir: Path, *, data: PreparedData | None = None,
              tokenizers: Tokenizers | None = None) -> Trainer:
    """A Trainer for a new run in `run_dir`, which must be empty or absent: it is refused before
    anything is written, and what the run made is taken away if it fails before its first
    checkpoint. `data` already prepared (or `tokenizers` to prepare it with) may be given."""
    run_dir = Path(run_dir)
    source = None
    if config.train.init_from:  # fine-tuning: that run's model, tokenizer and weights
        source = load_run(Path(config.train.init_from))
        config = replace(config, model=_model_section(config.model, source,
                                                      config.train.init_from))
        tokenizers = source.tokenizers
    world, device = _place(config)
    new_run = NewRun(run_dir) if world.main else None  # refuses here, before anything is written
    try:
        if tokenizers is not None and data is None and world.main:
            tokenizers.save(run_dir)
        data = _prepare(config, run_dir, world, device, data, tokenizers)
        trainer = Trainer(config, run_dir, data, world=world, device=device, new_run=new_run)
        if source is not None:
            trainer.model.load_state_dict(source.model.state_dict())
            log.info("starting from the weights of %s", source.weights)
        return trainer
    except BaseException as error:
        if new_run is None:
            raise
        new_run.discard()
        if isinstance(error, KeyboardInterrupt):  # Ctrl-C or SIGTERM: say what became of it
            raise KeyboardInterrupt(f"before the first update: removed what this run wrote in "
                                    f"{run_dir}") from None
        raise


def resume_run(run_dir: Path, overrides: list[str] = (), *, reset_optimizer: bool = False,
               reset_schedule: bool = False) -> Trainer:
    """A Trainer that continues a run from its newest intact checkpoint, with the batches,
    dropout masks and updates it would have had without the interruption (overrides may e.g.
    raise max_updates)."""
    run_dir = Path(run_dir)
    found = ckpt.newest_intact(run_dir)
    if found is None:
        if ckpt.update_checkpoints(run_dir) or ckpt.latest_checkpoint(run_dir):
            raise UserError(f"{run_dir}: every checkpoint is damaged; nothing to resume")
        raise UserError(f"{run_dir}: no checkpoint to resume from")
    path, weights, training = found
    if path.name != (ckpt.latest_checkpoint(run_dir) or path).name:
        log.warning("resuming from %s, the newest intact checkpoint", path)
    config = read_config(run_dir, overrides)
    tokenizers = Tokenizers.load(run_dir)
    check_fits(config, tokenizers, weights, path)  # before anything is written
    world, device = _place(config)
    lock = None
    if world.main:
        check_writable(run_dir, what="run directory")
        lock = RunLock(run_dir, "transduce train --resume")
    try:
        data = _prepare(config, run_dir, world, device, None, tokenizers)
        trainer = Trainer(config, run_dir, data, world=world, device=device, lock=lock)
        trainer.load(path, weights, training, reset_optimizer=reset_optimizer,
                     reset_schedule=reset_schedule)
        if overrides and world.main:
            config.save(run_dir / "config.yaml")
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return trainer


_REGULARISATION = ("dropout", "attention_dropout", "activation_dropout", "source_word_dropout",
                   "target_word_dropout")  # change no weight: a fine-tuning run may set its own


def _model_section(asked: ModelSection, source: LoadedRun, where: str) -> ModelSection:
    """The model section of a run that starts from `source`: the source's, with the dropouts the
    configuration sets; any other key that differs from the source's is an error naming it."""
    have = source.config.model
    settings = dict(asked.settings)
    if asked.preset != ModelSection.preset:  # a preset named: its values must agree too
        settings = {**PRESETS[asked.preset], **settings}
    resolved = source.model.config
    for key, value in settings.items():
        if key not in _REGULARISATION and getattr(resolved, key) != value:
            raise UserError(f"model.{key}={value!r}, but the model of train.init_from={where} "
                            f"has {key}={getattr(resolved, key)!r}; leave model.{key} out (a "
                            "run started from another has its model)")
    regularisation = {k: v for k, v in settings.items() if k in _REGULARISATION}
    return ModelSection(preset=have.preset, **{**have.settings, **regularisation})


def _place(config: Config) -> tuple[World, torch.device]:
    """This process among the training processes, and the device it trains on."""
    world = World.from_env()
    device = training_device(config.train.device, world)
    if config.train.precision == "fp16" and device.type != "cuda":
        raise UserError("train.precision=fp16 needs a GPU; use auto or bf16 on CPU")
    return world, device


def _prepare(config: Config, run_dir: Path, world: World, device: torch.device,
             data: PreparedData | None, tokenizers: Tokenizers | None) -> PreparedData:
    """Join the other processes, log to the run directory, and prepare the data (the main
    process prepares it, the others read what it wrote)."""
    world.start(device)
    world.barrier()  # every process has checked the directory before it is written
    if world.main:
        report.log_to_file(run_dir)
    else:  # the main process reports for all
        logging.getLogger("transduce").setLevel(logging.WARNING)
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    with world.main_first():
        pause_point("prepare")
        if data is None and not world.main:
            tokenizers = tokenizers or Tokenizers.load(run_dir)
        data = data or prepare(config.data, run_dir, tokenizers=tokenizers,
                               max_positions=config.model.max_positions)
    data.check_not_empty()
    return data
