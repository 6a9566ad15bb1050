"""The training loop: the paper's recipe, resumable to the bit, observable while it runs.

`transduce.training.start` makes a Trainer: `start_run(config, run_dir)` for a new run,
`resume_run(run_dir)` to continue one; `train()` then runs the loop.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

from transduce.config import Config
from transduce.data.batching import Batch
from transduce.data.prepare import PreparedData, references
from transduce.errors import TrainingError
from transduce.model.transformer import Transformer
from transduce.pauses import pause_point
from transduce.runs import checkpoint as ckpt
from transduce.runs.claim import NewRun
from transduce.runs.load import model_config
from transduce.runs.lock import RunLock
from transduce.training import report, schedule, state
from transduce.training.devices import autocast, precision
from transduce.training.distributed import World
from transduce.training.epochs import Epochs
from transduce.training.interrupts import Abandon, Interrupts
from transduce.training.objective import Objective
from transduce.training.parallel import parallelize
from transduce.training.records import NoRecords, Records
from transduce.training.state import Progress
from transduce.training.validate import Validation, validate

log = logging.getLogger("transduce.train")


class Trainer:
    """Trains a model into a run directory on data prepared for it.

    With several processes (started by `torchrun` or `transduce train --nproc N`) each trains on
    its share of every update's batches (transduce.training.distributed). `new_run`: the claim on
    a new run's directory, given up (what was written taken away) if the run fails before its
    first checkpoint. `lock`: the run directory's lock (a new run's is its claim's), released
    when `train()` returns.
    """

    def __init__(self, config: Config, run_dir: Path, data: PreparedData, *,
                 world: World | None = None, device: torch.device | None = None,
                 new_run: NewRun | None = None, lock: RunLock | None = None) -> None:
        self.config, self.run_dir, self.data = config, Path(run_dir), data
        self.world = world or World.from_env()
        self.device = device or torch.device("cpu")
        self._new_run = new_run
        self._lock = new_run.lock if new_run is not None else lock  # released when done
        train = config.train
        self.precision = precision(train.precision, self.device)
        torch.manual_seed(train.seed)
        tok = data.tokenizers
        self.model_config = model_config(config, tok)
        self.model = Transformer(self.model_config).to(self.device)
        self.parallel = parallelize(
            Objective(self.model, label_smoothing=train.label_smoothing,
                      rdrop_alpha=train.rdrop_alpha),
            self.world.size, train.parallel, self.device)  # with FSDP: the model sharded
        optimizer_type = torch.optim.AdamW if train.weight_decay else torch.optim.Adam
        self.optimizer = optimizer_type(self.model.parameters(), lr=train.lr,
                                        betas=train.adam_betas, eps=train.adam_eps,
                                        weight_decay=train.weight_decay)
        self.scaler = torch.amp.GradScaler(enabled=self.precision == "fp16")
        self.epochs = Epochs(data, config.data, seed=train.seed)
        self.schedule = schedule.from_config(train, d_model=self.model_config.d_model)
        self.progress = Progress()
        self._interrupts = Interrupts()
        self._consecutive_bad = 0
        self._resumed = False
        self._metrics_told = False  # the sacreBLEU signatures logged
        if self.world.rank:  # the same initial weights as the main process, other dropout masks
            torch.manual_seed(train.seed + 1_000_003 * self.world.rank)

    def load(self, path: Path, weights: dict, training: dict, *, reset_optimizer: bool = False,
             reset_schedule: bool = False) -> None:
        """Continue from the checkpoint at `path` (its weights and training state, read)."""
        self.parallel.load_weights(path / ckpt.WEIGHTS, weights)
        self.progress = state.load_state_dict(
            training, lambda saved: self.parallel.load_optimizer_state(self.optimizer, saved),
            self.scaler, rank=self.world.rank,
            processes=self.world.size, reset_optimizer=reset_optimizer,
            reset_schedule=reset_schedule, path=path)
        self._resumed = True
        log.info("resumed from %s at update %d", path, self.progress.update)

    # -- the loop -----------------------------------------------------------------------------

    def train(self) -> Progress:
        """Train until a limit, early stopping or a signal; the progress made."""
        try:
            return self._loop()
        except BaseException:
            if self._new_run is not None:  # a new run that failed before its first checkpoint
                self._new_run.discard()
            raise
        finally:
            if self._lock is not None:
                self._lock.release()

    def _loop(self) -> Progress:
        cfg, p = self.config.train, self.progress
        if not self._resumed:
            if self.world.main:
                self.config.save(self.run_dir / "config.yaml")
            report.start(self.model, self.config, self.model_config, self.world.size,
                         self.device)
        elif (reason := self._stop_reason()) is not None:
            report.nothing_to_do(self.run_dir, reason, cfg)
            return p
        records = (Records(self.run_dir, resume_at=p.update if self._resumed else None)
                   if self.world.main else NoRecords())
        bar = tqdm(total=cfg.max_updates or None, initial=p.update, unit="upd",
                   dynamic_ncols=True, disable=None if self.world.main else True)
        started, elapsed_before = time.perf_counter(), p.elapsed
        self._interrupts = Interrupts(cfg.max_time - elapsed_before if cfg.max_time else None,
                                      may_abandon=self.world.size == 1)
        try:
            with self._interrupts, report.log_above(bar):
                self.model.train()
                batches = self.epochs.stream(p)
                while True:
                    # 1) stop now? (one process's reason, a signal or its clock, stops them all)
                    p.elapsed = elapsed_before + time.perf_counter() - started  # wall clock
                    if reason := self.stop_reason():
                        break
                    # 2) forward and backward over the update's batches; a signal abandons it
                    before, start = state.position(p, self.device), time.perf_counter()
                    try:
                        with self._interrupts.abandonable():
                            pause_point("update", self._signalled)
                            loss, tokens = self.gradients(
                                [next(batches) for _ in range(cfg.accumulate * self.world.size)])
                    except Abandon:  # stopping: as if the update had never begun
                        state.restore(p, before)
                        self.optimizer.zero_grad(set_to_none=True)
                        batches = self.epochs.stream(p)
                        continue
                    # 3) the optimiser step, at this update's learning rate (skipped if not finite)
                    if (loss := self.step(loss, tokens)) is None:
                        continue
                    # 4) report, validate (perhaps stopping early) and checkpoint, as configured
                    p.count(loss, tokens, time.perf_counter() - start)
                    bar.update(1)
                    if p.update % cfg.log_every == 0 or p.update == 1:
                        report.report(p, self.optimizer.param_groups[0]["lr"], bar, records,
                                      self.device)
                    if cfg.validate_every and p.update % cfg.validate_every == 0:
                        if self._validate_and_save(records, phase="validate"):
                            reason = "early stopping"
                            break
                    elif cfg.save_every and p.update % cfg.save_every == 0:
                        self._save(best=False)
                bar.close()
                # 5) the last checkpoint: validated, unless that was just done; a signal here
                # (a long final validation) gives the validation up, never the checkpoint
                p.elapsed = elapsed_before + time.perf_counter() - started
                if reason != "interrupted" and reason != "early stopping" and not (
                        self.world.from_main(bool(p.history)
                                             and p.history[-1]["update"] == p.update)):
                    self._validate_and_save(records, phase="final validation")
                if any(self.world.gather(self._signalled())):  # one's signal stops them all
                    reason = "interrupted"
                    if not self._stop_interrupted():
                        records.close()
                        return p
        finally:
            bar.close()
        records.close()
        report.summary(p, reason, self.epochs.done(p), ckpt.checkpoint_dir(self.run_dir),
                       self.device)
        self.world.barrier()  # all done: none exits while another still needs it
        return p

    def stop_reason(self) -> str | None:
        """Why to stop now, if so, agreed by all processes: one's reason stops them all."""
        reasons = self.world.gather(self._stop_reason())
        return next((r for r in reasons if r), None)

    def gradients(self, batches: list[Batch]) -> tuple[float, int]:
        """The gradients of one update from k batches, the loss normalised by their target
        tokens together, so k batches equal one batch k times larger. With several processes
        each backpropagates its share of the batches, and the gradients are summed. Returns the
        summed loss and the target tokens."""
        tokens = sum(b.n_tgt_tokens for b in batches)
        world = self.world
        total, _ = self.accumulate_gradients(batches[world.rank::world.size], tokens=tokens)
        return self.parallel.sum(total), tokens

    def step(self, total: float, tokens: int) -> float | None:
        """The optimiser step on the gradients; the loss per token, or None when skipped."""
        cfg, p = self.config.train, self.progress
        self.scaler.unscale_(self.optimizer)
        norm = self.parallel.clip_grad_norm(cfg.clip_norm or float("inf"))
        if not (math.isfinite(total) and torch.isfinite(norm)):
            return self._skip(total, norm)
        p.update += 1
        p.tokens += tokens
        self._consecutive_bad = 0  # only consecutive non-finite updates stop the run
        for group in self.optimizer.param_groups:
            group["lr"] = self.schedule(p.update)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return total / tokens

    def accumulate_gradients(self, batches: list[Batch], *,
                             tokens: int | None = None) -> tuple[float, int]:
        """Backpropagate the loss of `batches`, normalised by their target tokens together (or by
        `tokens`, those of the whole update); returns the summed loss and the tokens."""
        tokens = sum(b.n_tgt_tokens for b in batches) if tokens is None else tokens
        total = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            with self.parallel.sync(last=i == len(batches) - 1):  # the processes' sum: once
                with autocast(self.precision, self.device):
                    loss = self.parallel.objective(batch.src, batch.tgt_in, batch.tgt_out)
                self.scaler.scale(loss / tokens).backward()
            total += loss.item()
        return total, tokens

    def _skip(self, loss: float, norm) -> None:
        p = self.progress
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.is_enabled():  # fp16 overflow: the scaler lowers its scale and retries
            self.scaler.update()
            return None
        p.skipped_updates += 1
        self._consecutive_bad += 1
        log.warning("update %d skipped: loss %s, gradient norm %s", p.update + 1, loss,
                    float(norm))
        if self._consecutive_bad >= self.config.train.max_bad_updates:
            last = ckpt.latest_checkpoint(self.run_dir)
            raise TrainingError(
                f"the loss was not finite {self._consecutive_bad} updates in a row (after update "
                f"{p.update}); stopping. Last good checkpoint: {last or 'none yet'}. Try a lower "
                "train.lr, a longer train.warmup or train.clip_norm")
        return None

    def _stop_reason(self) -> str | None:
        cfg, p = self.config.train, self.progress
        if self._interrupts.signal is not None:
            return "interrupted"
        if cfg.max_updates and p.update >= cfg.max_updates:
            return f"reached max_updates={cfg.max_updates}"
        if cfg.max_time and (p.elapsed >= cfg.max_time or self._interrupts.time_up):
            return f"reached max_time={cfg.max_time:g}s"
        if cfg.max_epochs and self.epochs.done(p) >= cfg.max_epochs:
            return f"reached max_epochs={cfg.max_epochs}"
        return None

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C or SIGTERM ended the last `train()` (with a checkpoint)."""
        return self._interrupts.signal is not None

    # -- validation, checkpoints, reporting -------------------------------------------------------

    def validate(self, model: torch.nn.Module | None = None) -> Validation | None:
        """Validate `model` (the one trained, or its whole copy: `Parallel.whole_model`)."""
        if self.data.valid is None:
            return None
        bleu, lowercase = self.config.train.bleu, self.data.tokenizers.lowercase
        if len(self.data.valid_sets) > 1:  # a multilingual run: each pair, and their mean
            return Validation.mean({
                s.name: self._validate(model, s.data, references(s.data, s.corpus, lowercase)
                                       if bleu else None) for s in self.data.valid_sets})
        return self._validate(model, self.data.valid, self.references() if bleu else None)

    def _validate(self, model, data, references) -> Validation:
        cfg = self.config
        return validate(model or self.model, data, references, self.data.tokenizers,
                        max_tokens=cfg.data.max_tokens, label_smoothing=cfg.train.label_smoothing,
                        decode=replace(cfg.decode, beam_size=cfg.train.valid_beam_size),
                        device=self.device,
                        autocast=lambda: autocast(self.precision, self.device))

    def references(self) -> list[str]:
        return self.data.valid_references

    def _validate_and_save(self, records: Records | NoRecords, *, phase: str) -> bool:
        """Validate, checkpoint (marking the best), and say whether to stop early. With several
        processes the main one validates and decides for all. A signal during the validation
        (minutes, on a large set) gives it up: the checkpoint is written unvalidated."""
        p, cfg = self.progress, self.config.train
        result, abandoned = None, False
        model = self.parallel.whole_model()  # with FSDP every process takes part
        if self.world.main:
            try:
                with self._interrupts.abandonable():
                    pause_point(phase, self._signalled)
                    result = self.validate(model)
            except Abandon:
                abandoned = True
                log.info("stopping: the validation of update %d given up", p.update)
                self.model.train()
        best = not abandoned  # without validation data every checkpoint is the best
        if result is not None:
            best, record = p.validated(result, by_bleu=cfg.bleu)
            records.write(record, split="valid")
            report.validation(p, result, best)
            if result.bleu is not None and not self._metrics_told:
                report.metrics()  # once a run: how to reproduce the scores
                self._metrics_told = True
            for name, one in (result.pairs or {}).items():
                records.write(state.validation_record(p.update, one), split=f"valid {name}")
                report.validation(p, one, None, name=name)
        self._save(best=best, whole=(model,))
        return self.world.from_main(bool(cfg.patience) and p.bad_validations >= cfg.patience)

    def _stop_interrupted(self) -> bool:
        """Ctrl-C or SIGTERM: a checkpoint of every update done (one is written already if the
        last update's was), or, for a new run stopped before its first update, nothing left of
        it; one line says which. Returns whether the run stays."""
        p = self.progress
        if p.update == 0 and not self._resumed:  # every process agrees
            if self._new_run is not None:  # the main process's claim
                self._new_run.discard()
                log.info("interrupted before the first update: removed what this run wrote in "
                         "%s", self.run_dir)
            return False
        if self.world.from_main(ckpt.latest_checkpoint(self.run_dir) != ckpt.checkpoint_dir(
                self.run_dir) / f"update_{p.update:07d}"):
            self._save(best=False)
        log.info("interrupted: checkpoint update_%07d written; continue with `transduce train "
                 "--resume %s`", p.update, self.run_dir)
        return True

    def _signalled(self) -> bool:
        return self._interrupts.signal is not None

    def _save(self, best: bool, whole: tuple[torch.nn.Module | None] | None = None) -> None:
        """Write a checkpoint (the main process; every process calls this, for its RNG state)."""
        rngs = self.world.gather(state.rng_state())
        pause_point("save", self._signalled)
        # the whole model, unless gathered already (with FSDP every process takes part)
        (model,) = whole if whole is not None else (self.parallel.whole_model(),)
        optimizer = self.parallel.optimizer_state(self.optimizer)
        if self.world.main:
            training = state.state_dict(self.progress, optimizer, self.scaler, rngs,
                                        self.config, self.model_config)
            ckpt.save_checkpoint(self.run_dir, f"update_{self.progress.update:07d}", model,
                                 training, best=best, keep=self.config.train.keep_checkpoints)
        self.world.barrier()


__all__ = ["Progress", "Trainer", "TrainingError"]
