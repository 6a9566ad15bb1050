"""What a run needs, besides its weights, to continue exactly: its progress, its optimiser's
state and every process's random state; and the position an update can be taken back to."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

log = logging.getLogger("transduce.train")


def empty_window() -> dict:
    return {"loss": 0.0, "tokens": 0, "time": 0.0, "updates": 0}


@dataclass
class Progress:
    """Everything besides weights and optimiser that a resumed run needs to continue exactly."""

    update: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already consumed
    elapsed: float = 0.0  # seconds of training, across resumes
    best_bleu: float | None = None
    best_loss: float | None = None
    bad_validations: int = 0  # validations in a row without improvement
    skipped_updates: int = 0  # non-finite losses skipped, in all
    tokens: int = 0  # target tokens trained on
    history: list = field(default_factory=list)  # validation results
    window: dict = field(default_factory=empty_window)  # since the last log line

    def validated(self, result, *, by_bleu: bool) -> tuple[bool, dict]:
        """Record a validation result; returns whether it is the best so far (by BLEU, ties,
        e.g. one-word outputs where BLEU is 0, by loss; by loss alone without BLEU) and its
        record."""
        score = (result.bleu if by_bleu else 0.0, -result.loss)
        best_score = ((self.best_bleu if by_bleu else 0.0, -self.best_loss)
                      if self.best_loss is not None else None)
        best = best_score is None or score > best_score
        if best:
            self.best_bleu, self.best_loss = result.bleu, result.loss
        self.bad_validations = 0 if best else self.bad_validations + 1
        record = validation_record(self.update, result)
        self.history.append(record)
        return best, record

    def count(self, loss: float, tokens: int, seconds: float) -> None:
        """Add an update to the window the next log line averages over."""
        w = self.window
        w["loss"] += loss
        w["tokens"] += tokens
        w["time"] += seconds
        w["updates"] += 1


def validation_record(update: int, result) -> dict:
    """The row of metrics.jsonl (and TensorBoard's scalars) of a validation's result."""
    return {"update": update, "valid_loss": result.loss, "valid_ppl": result.perplexity,
            "valid_bleu": result.bleu, "valid_chrf": result.chrf, "valid_ter": result.ter,
            "valid_exact": result.exact}


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def state_dict(progress: Progress, optimizer: dict, scaler, rngs: list[dict], config,
               model_config) -> dict:
    """The training state of a checkpoint; `optimizer`: the optimiser's whole state (as one
    process's `state_dict()`); `rngs`: every process's random state."""
    return {"progress": asdict(progress), "optimizer": optimizer,
            "scaler": scaler.state_dict(), "rng": {**rngs[0], "processes": rngs[1:]},
            "config": config.to_dict(), "model_config": asdict(model_config)}


def load_state_dict(state: dict, load_optimizer, scaler, *, rank: int, processes: int,
                    reset_optimizer: bool, reset_schedule: bool, path: Path) -> Progress:
    """Put a checkpoint's training state back (this process's random state among them); returns
    its progress. `load_optimizer(saved)` puts the optimiser's saved state back."""
    progress = Progress(**state["progress"])
    if not reset_optimizer:
        load_optimizer(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
    rngs = [state["rng"], *state["rng"].get("processes", [])]
    if len(rngs) != processes:
        log.warning("%s was written by %d training processes, and %d continue it: the run goes "
                    "on, but not as it would have without the interruption", path, len(rngs),
                    processes)
    if rank < len(rngs):
        torch.set_rng_state(rngs[rank]["torch"])
        if rngs[rank]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rngs[rank]["cuda"])
    if reset_schedule:
        progress.update = 0
        progress.elapsed = 0.0
    return progress


def position(progress: Progress, device: torch.device) -> tuple:
    """What an update changes before it changes the weights: data position, random state."""
    cuda = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
    return progress.epoch, progress.batch_in_epoch, torch.get_rng_state(), cuda


def restore(progress: Progress, saved: tuple) -> None:
    """Go back to a `position`: as if the updates since had never begun."""
    progress.epoch, progress.batch_in_epoch, cpu, cuda = saved
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
