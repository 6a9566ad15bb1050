"""The training loop: the paper's recipe, resumable to the bit, observable while it runs."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

from transduce.config import Config
from transduce.data.batching import Batch
from transduce.data.prepare import PreparedData, prepare
from transduce.data.tokenizer import Tokenizers
from transduce.errors import TrainingError, UserError
from transduce.files import check_writable
from transduce.model.transformer import Transformer
from transduce.runs import checkpoint as ckpt
from transduce.runs.claim import NewRun
from transduce.runs.load import check_fits, read_config
from transduce.training import report, schedule, state
from transduce.training.devices import precision, training_device
from transduce.training.distributed import World
from transduce.training.epochs import Epochs
from transduce.training.interrupts import Abandon, Interrupts
from transduce.training.loss import projected_label_smoothed_cross_entropy, r_drop_loss
from transduce.training.records import NoRecords, Records
from transduce.training.state import Progress
from transduce.training.validate import Validation, validate

log = logging.getLogger("transduce.train")


class Trainer:
    """Trains a model into a run directory.

    `Trainer(config, run_dir).train()` starts a run; `Trainer.resume(run_dir).train()` continues
    one from its latest checkpoint with the same batches, dropout masks and updates it would have
    had without the interruption. Started by `torchrun` (or `transduce train --nproc N`), each
    process trains on its share of every update's batches (transduce.training.distributed).
    """

    def __init__(self, config: Config, run_dir: Path, *, data: PreparedData | None = None,
                 tokenizers: Tokenizers | None = None, new_run: bool = True) -> None:
        """new_run: False when `run_dir` holds this run already (`Trainer.resume`); a new run
        refuses, before writing anything, a directory that is not empty, and takes away what
        it made if it fails before its first checkpoint."""
        self.config = config
        self.run_dir = Path(run_dir)
        self.world = World.from_env()
        self.device = training_device(config.train.device, self.world)
        if config.train.precision == "fp16" and self.device.type != "cuda":
            raise UserError("train.precision=fp16 needs a GPU; use auto or bf16 on CPU")
        self._new_run = None
        if new_run and self.world.main:
            self._new_run = NewRun(self.run_dir)  # refuses here, before anything is written
        elif self.world.main:
            check_writable(self.run_dir, what="run directory")
        try:
            self._setup(data, tokenizers)
        except BaseException:
            self._discard()
            raise

    def _setup(self, data: PreparedData | None, tokenizers: Tokenizers | None) -> None:
        config = self.config
        self.world.start(self.device)
        self.world.barrier()  # every process has checked the directory before it is written
        if self.world.main:
            report.log_to_file(self.run_dir)
        else:  # the main process reports for all
            logging.getLogger("transduce").setLevel(logging.WARNING)
        train = config.train
        if train.threads:
            torch.set_num_threads(train.threads)
        self.precision = precision(train.precision, self.device)
        torch.manual_seed(train.seed)
        with self.world.main_first():  # the main process prepares the data, the others reuse it
            if data is None and not self.world.main:
                tokenizers = tokenizers or Tokenizers.load(self.run_dir)
            self.data = data or prepare(config.data, self.run_dir, tokenizers=tokenizers,
                                        max_positions=config.model.max_positions)
        self.data.check_not_empty()
        tok = self.data.tokenizers
        self.model_config = config.model.resolve(tok.src.vocab_size, tok.tgt.vocab_size,
                                                 shared_vocab=tok.shared)
        self.model = Transformer(self.model_config).to(self.device)
        optimizer_type = torch.optim.AdamW if train.weight_decay else torch.optim.Adam
        self.optimizer = optimizer_type(self.model.parameters(), lr=train.lr,
                                        betas=train.adam_betas, eps=train.adam_eps,
                                        weight_decay=train.weight_decay)
        self.scaler = torch.amp.GradScaler(enabled=self.precision == "fp16")
        self.epochs = Epochs(self.data, config.data, seed=train.seed)
        self.schedule = schedule.from_config(train, d_model=self.model_config.d_model)
        self.progress = Progress()
        self._interrupts = Interrupts()
        self._consecutive_bad = 0
        self._resumed = False
        if self.world.rank:  # the same initial weights as the main process, other dropout masks
            torch.manual_seed(train.seed + 1_000_003 * self.world.rank)

    @classmethod
    def resume(cls, run_dir: Path, overrides: list[str] = (), *, reset_optimizer: bool = False,
               reset_schedule: bool = False) -> Trainer:
        """Continue a run from its latest checkpoint (overrides may e.g. raise max_updates)."""
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
        trainer = cls(config, run_dir, tokenizers=tokenizers, new_run=False)
        trainer._load(path, weights, training, reset_optimizer=reset_optimizer,
                      reset_schedule=reset_schedule)
        trainer._resumed = True
        if overrides:
            config.save(run_dir / "config.yaml")
        return trainer

    # -- the loop -----------------------------------------------------------------------------

    def train(self) -> Progress:
        try:
            return self._train()
        except BaseException:
            self._discard()  # a new run that failed before its first checkpoint leaves nothing
            raise

    def _discard(self) -> None:
        if self._new_run is not None:
            self._new_run.discard()

    def _train(self) -> Progress:
        cfg = self.config.train
        p = self.progress
        if not self._resumed:
            if self.world.main:
                self.config.save(self.run_dir / "config.yaml")
            c = self.model_config
            log.info("model: %s parameters (%s preset: D=%d, d_ff=%d, H=%d, %d+%d layers, "
                     "vocabulary %d/%d)", f"{self.model.num_parameters():,}",
                     self.config.model.preset, c.d_model, c.d_ff, c.n_heads, c.n_encoder_layers,
                     c.n_decoder_layers, c.src_vocab_size, c.tgt_vocab_size)
            if self.world.size > 1:
                log.info("data parallel: %d processes on %s, %d batches of %d tokens each per "
                         "update", self.world.size, self.device.type,
                         self.world.size * cfg.accumulate, self.config.data.max_tokens)
        elif (reason := self._should_stop()) is not None:
            report.nothing_to_do(self.run_dir, reason, cfg)
            return p
        records = (Records(self.run_dir, resume_at=p.update if self._resumed else None)
                   if self.world.main else NoRecords())
        bar = tqdm(total=cfg.max_updates or None, initial=p.update, unit="upd",
                   dynamic_ncols=True, disable=None if self.world.main else True)
        reason = "done"
        started, elapsed_before = time.perf_counter(), p.elapsed
        time_left = cfg.max_time - elapsed_before if cfg.max_time else None
        self._interrupts = Interrupts(time_left, may_abandon=self.world.size == 1)
        try:
            with self._interrupts, report.log_above(bar):
                self.model.train()
                batches = self.epochs.stream(self.progress)
                while True:
                    p.elapsed = elapsed_before + time.perf_counter() - started  # wall clock
                    reason = self._agreed_stop()
                    if reason:
                        break
                    before = state.position(p, self.device)
                    start = time.perf_counter()
                    try:
                        with self._interrupts.abandonable():
                            loss, tokens = self._gradients(
                                [next(batches) for _ in range(cfg.accumulate * self.world.size)])
                    except Abandon:  # stopping: as if the update had never begun
                        state.restore(p, before)
                        self.optimizer.zero_grad(set_to_none=True)
                        batches = self.epochs.stream(self.progress)
                        continue
                    loss = self._step(loss, tokens)
                    if loss is None:
                        continue
                    p.count(loss, tokens, time.perf_counter() - start)
                    bar.update(1)
                    if p.update % cfg.log_every == 0 or p.update == 1:
                        report.report(p, self.optimizer.param_groups[0]["lr"], bar, records)
                    if cfg.validate_every and p.update % cfg.validate_every == 0:
                        if self._validate_and_save(records):
                            reason = "early stopping"
                            break
                    elif cfg.save_every and p.update % cfg.save_every == 0:
                        self._save(best=False)
        finally:
            bar.close()
        p.elapsed = elapsed_before + time.perf_counter() - started
        if reason == "interrupted":
            self._save(best=False)
            log.info("interrupted: checkpoint update_%07d written; continue with `transduce train "
                     "--resume %s`", p.update, self.run_dir)
        elif reason != "early stopping" and not self.world.from_main(
                bool(p.history) and p.history[-1]["update"] == p.update):  # not just validated
            self._validate_and_save(records)
        records.close()
        report.summary(p, reason, self.epochs.done(p), ckpt.checkpoint_dir(self.run_dir))
        self.world.barrier()  # all done: none exits while another still needs it
        return p

    def _agreed_stop(self) -> str | None:
        """Why to stop now, if so: one process's reason (a signal, its clock) stops them all."""
        reasons = self.world.gather(self._should_stop())
        return next((r for r in reasons if r), None)

    def _gradients(self, batches: list[Batch]) -> tuple[float, int]:
        """The gradients of one update from k batches, the loss normalised by their target
        tokens together, so k batches equal one batch k times larger. With several processes
        each backpropagates its share of the batches, and the gradients are summed. Returns the
        summed loss and the target tokens."""
        tokens = sum(b.n_tgt_tokens for b in batches)
        world = self.world
        total, _ = self.accumulate_gradients(batches[world.rank::world.size], tokens=tokens)
        return world.sum_gradients(self.model.parameters(), total), tokens

    def _step(self, total: float, tokens: int) -> float | None:
        """The optimiser step on the gradients; the loss per token, or None when skipped."""
        cfg, p = self.config.train, self.progress
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                              cfg.clip_norm or float("inf"))
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
        cfg = self.config.train
        total = 0.0
        for batch in batches:
            batch = batch.to(self.device)
            with self._autocast():
                if cfg.rdrop_alpha > 0:  # R-Drop: the batch twice; the loss per pass (halved)
                    hidden = self.model.features(batch.src.repeat(2, 1), batch.tgt_in.repeat(2, 1))
                    loss = r_drop_loss(hidden, self.model.output.weight, batch.tgt_out.repeat(2, 1),
                                       epsilon=cfg.label_smoothing, alpha=cfg.rdrop_alpha,
                                       ignore_index=self.model_config.pad_id) / 2
                else:
                    hidden = self.model.features(batch.src, batch.tgt_in)
                    loss = projected_label_smoothed_cross_entropy(
                        hidden, self.model.output.weight, batch.tgt_out,
                        epsilon=cfg.label_smoothing, ignore_index=self.model_config.pad_id)
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

    def _should_stop(self) -> str | None:
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

    def _autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    # -- validation, checkpoints, reporting -------------------------------------------------------

    def validate(self) -> Validation | None:
        if self.data.valid is None:
            return None
        cfg = self.config
        references = self.references() if cfg.train.bleu else None
        return validate(self.model, self.data.valid, references, self.data.tokenizers,
                        max_tokens=cfg.data.max_tokens, label_smoothing=cfg.train.label_smoothing,
                        decode=replace(cfg.decode, beam_size=cfg.train.valid_beam_size),
                        device=self.device, autocast=self._autocast)

    def references(self) -> list[str]:
        return self.data.valid_references

    def _validate_and_save(self, records: Records | NoRecords) -> bool:
        """Validate, checkpoint (marking the best), and say whether to stop early. With several
        processes the main one validates and decides for all."""
        p, cfg = self.progress, self.config.train
        result = self.validate() if self.world.main else None
        best = True
        if result is not None:
            best, record = p.validated(result, by_bleu=cfg.bleu)
            records.write(record, split="valid")
            report.validation(p, result, best)
        self._save(best=best)
        return self.world.from_main(bool(cfg.patience) and p.bad_validations >= cfg.patience)

    def _save(self, best: bool) -> None:
        """Write a checkpoint (the main process; every process calls this, for its RNG state)."""
        rngs = self.world.gather(state.rng_state())
        if self.world.main:
            training = state.state_dict(self.progress, self.optimizer, self.scaler, rngs,
                                        self.config, self.model_config)
            ckpt.save_checkpoint(self.run_dir, f"update_{self.progress.update:07d}", self.model,
                                 training, best=best, keep=self.config.train.keep_checkpoints)
        self.world.barrier()

    def _load(self, path: Path, weights: dict, training: dict, *, reset_optimizer: bool,
              reset_schedule: bool) -> None:
        ckpt.load_weights(self.model, path / ckpt.WEIGHTS, weights)
        self.progress = state.load_state_dict(
            training, self.optimizer, self.scaler, rank=self.world.rank,
            processes=self.world.size, reset_optimizer=reset_optimizer,
            reset_schedule=reset_schedule, path=path)
        log.info("resumed from %s at update %d", path, self.progress.update)



__all__ = ["Progress", "Trainer", "TrainingError"]
