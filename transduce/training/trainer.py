"""The training loop: the paper's recipe, resumable to the bit, observable while it runs."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transduce.config import Config, load_config
from transduce.data.batching import Batch, TokenBatches, collate
from transduce.data.directions import BothDirections
from transduce.data.prepare import PreparedData, prepare
from transduce.data.sampling import BpeDropout
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError
from transduce.files import check_writable
from transduce.model.transformer import Transformer
from transduce.runtime import native_bf16, resolve_device
from transduce.training import checkpoint as ckpt
from transduce.training.distributed import World
from transduce.training.interrupts import Abandon, Interrupts
from transduce.training.records import NoRecords, Records
from transduce.training.run_dir import NewRun
from transduce.training import schedule
from transduce.training.loss import projected_label_smoothed_cross_entropy, r_drop_loss
from transduce.training.validate import Validation, validate

log = logging.getLogger("transduce.train")


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss keeps being NaN); the message says why."""


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
    window: dict = field(default_factory=lambda: _empty_window())  # since the last log line


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
        self.device = _device(config.train.device, self.world)
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
            self._log_to_file()
        else:  # the main process reports for all
            logging.getLogger("transduce").setLevel(logging.WARNING)
        train = config.train
        if train.threads:
            torch.set_num_threads(train.threads)
        self.precision = _precision(train.precision, self.device)
        torch.manual_seed(train.seed)
        with self.world.main_first():  # the main process prepares the data, the others reuse it
            if data is None and not self.world.main:
                tokenizers = tokenizers or Tokenizers.load(self.run_dir)
            self.data = data or prepare(config.data, self.run_dir, tokenizers=tokenizers,
                                        max_positions=config.model.max_positions)
        _check_not_empty(self.data)
        tok = self.data.tokenizers
        self.model_config = config.model.resolve(tok.src.vocab_size, tok.tgt.vocab_size,
                                                 shared_vocab=tok.shared)
        self.model = Transformer(self.model_config).to(self.device)
        optimizer_type = torch.optim.AdamW if train.weight_decay else torch.optim.Adam
        self.optimizer = optimizer_type(self.model.parameters(), lr=train.lr,
                                        betas=train.adam_betas, eps=train.adam_eps,
                                        weight_decay=train.weight_decay)
        self.scaler = torch.amp.GradScaler(enabled=self.precision == "fp16")
        self.batches = TokenBatches.of(self.data.train, config.data.max_tokens, seed=train.seed)
        self.bpe_dropout = None
        if config.data.bpe_dropout:
            self.bpe_dropout = BpeDropout(self.data.train_corpus, self.data.train, tok,
                                          dropout=config.data.bpe_dropout, seed=train.seed,
                                          max_length=self.data.max_length)
        self.progress = Progress()
        self._references = None
        self._interrupts = Interrupts()
        self._consecutive_bad = 0
        self._resumed = False
        self._epoch: tuple = (None, None, None)  # (epoch, its training pairs, its batches)
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
        path, weights, state = found
        if path.name != (ckpt.latest_checkpoint(run_dir) or path).name:
            log.warning("resuming from %s, the newest intact checkpoint", path)
        config = load_config(run_dir / "config.yaml", overrides)
        trainer = cls(config, run_dir, tokenizers=Tokenizers.load(run_dir), new_run=False)
        trainer._load(path, weights, state, reset_optimizer=reset_optimizer,
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
            self._nothing_to_do(reason)
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
            with self._interrupts, _log_above(bar):
                self.model.train()
                batches = self._batch_stream()
                while True:
                    p.elapsed = elapsed_before + time.perf_counter() - started  # wall clock
                    reason = self._agreed_stop()
                    if reason:
                        break
                    before = self._position()
                    start = time.perf_counter()
                    try:
                        with self._interrupts.abandonable():
                            loss, tokens = self._gradients(
                                [next(batches) for _ in range(cfg.accumulate * self.world.size)])
                    except Abandon:  # stopping: as if the update had never begun
                        self._restore(before)
                        batches = self._batch_stream()
                        continue
                    loss = self._step(loss, tokens)
                    if loss is None:
                        continue
                    self._count(loss, tokens, time.perf_counter() - start)
                    bar.update(1)
                    if p.update % cfg.log_every == 0 or p.update == 1:
                        self._report(bar, records)
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
            log.info("interrupted: checkpoint %s written; continue with `transduce train --resume "
                     "%s`", self._checkpoint_name(), self.run_dir)
        elif reason != "early stopping" and not self.world.from_main(
                bool(p.history) and p.history[-1]["update"] == p.update):  # not just validated
            self._validate_and_save(records)
        records.close()
        self._summary(reason)
        self.world.barrier()  # all done: none exits while another still needs it
        return p

    def _nothing_to_do(self, reason: str) -> None:
        """A resumed run that has already reached its limit: say how to go on."""
        cfg = self.config.train
        key, more = {"max_updates": ("train.max_updates", cfg.max_updates * 2),
                     "max_time": ("train.max_time", f"{cfg.max_time * 2:g}"),
                     "max_epochs": ("train.max_epochs", cfg.max_epochs * 2)
                     }[reason.split("=")[0].removeprefix("reached ")]
        log.info("%s has already %s: nothing to train. To go on, raise the limit, e.g. "
                 "`transduce train --resume %s %s=%s`", self.run_dir, reason, self.run_dir, key,
                 more)

    def _position(self) -> tuple:
        """What an update changes before it changes the weights: data position, random state."""
        p = self.progress
        cuda = torch.cuda.get_rng_state_all() if self.device.type == "cuda" else None
        return p.epoch, p.batch_in_epoch, torch.get_rng_state(), cuda

    def _restore(self, position: tuple) -> None:
        p = self.progress
        p.epoch, p.batch_in_epoch, cpu, cuda = position
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        self.optimizer.zero_grad(set_to_none=True)

    def _agreed_stop(self) -> str | None:
        """Why to stop now, if so: one process's reason (a signal, its clock) stops them all."""
        reasons = self.world.gather(self._should_stop())
        return next((r for r in reasons if r), None)

    def _batch_stream(self):
        """Batches from the current data position onward, across epochs."""
        p = self.progress
        while True:
            pairs, epoch_batches = self._epoch_data(p.epoch)
            while p.batch_in_epoch < len(epoch_batches):
                ids = epoch_batches[p.batch_in_epoch]
                p.batch_in_epoch += 1
                yield collate(pairs, ids)
            p.epoch += 1
            p.batch_in_epoch = 0

    def _epoch_data(self, epoch: int):
        """The training pairs as segmented for `epoch` and that epoch's batches (of indices)."""
        if self._epoch[0] != epoch:
            pairs, batches = self.data.train, self.batches
            if self.bpe_dropout is not None:
                pairs = self.bpe_dropout.epoch(epoch)
            both = self.config.data.bidirectional_epochs
            if epoch < both:
                pairs = BothDirections(pairs)
            elif epoch == both > 0:
                log.info("epoch %d: source -> target alone from here (%d epochs both ways)",
                         epoch + 1, both)
            if pairs is not self.data.train:
                batches = TokenBatches.of(pairs, self.config.data.max_tokens,
                                          seed=self.config.train.seed)
            self._epoch = (epoch, pairs, batches.epoch(epoch))
        return self._epoch[1:]

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
            group["lr"] = self.learning_rate(p.update)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return total / tokens

    def _count(self, loss: float, tokens: int, seconds: float) -> None:
        """Add an update to the window the next log line averages over."""
        w = self.progress.window
        w["loss"] += loss
        w["tokens"] += tokens
        w["time"] += seconds
        w["updates"] += 1

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

    def learning_rate(self, update: int) -> float:
        cfg = self.config.train
        if cfg.lr_schedule == "noam":
            return schedule.noam(update, d_model=self.model_config.d_model, warmup=cfg.warmup,
                                 scale=cfg.lr_scale)
        if cfg.lr_schedule == "inverse_sqrt":
            return schedule.inverse_sqrt(update, peak_lr=cfg.lr, warmup=cfg.warmup)
        if cfg.lr_schedule == "cosine":
            return schedule.cosine(update, peak_lr=cfg.lr, warmup=cfg.warmup,
                                   total=cfg.max_updates)
        return schedule.constant(update, peak_lr=cfg.lr, warmup=cfg.warmup)

    def _should_stop(self) -> str | None:
        cfg, p = self.config.train, self.progress
        if self._interrupts.signal is not None:
            return "interrupted"
        if cfg.max_updates and p.update >= cfg.max_updates:
            return f"reached max_updates={cfg.max_updates}"
        if cfg.max_time and (p.elapsed >= cfg.max_time or self._interrupts.time_up):
            return f"reached max_time={cfg.max_time:g}s"
        if cfg.max_epochs and self._epochs_done() >= cfg.max_epochs:
            return f"reached max_epochs={cfg.max_epochs}"
        return None

    def _epochs_done(self) -> int:
        p = self.progress
        return p.epoch + (p.batch_in_epoch >= len(self._epoch_data(p.epoch)[1]))

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
        if self._references is None:
            keep = set(self.data.valid.pair_ids.tolist())
            lowercase = self.data.tokenizers.lowercase  # then so are the translations
            self._references = [t.lower() if lowercase else t
                                for i, (_, t) in enumerate(self.data.valid_corpus.pairs())
                                if i in keep]
        return self._references

    def _validate_and_save(self, records: Records | NoRecords) -> bool:
        """Validate, checkpoint (marking the best), and say whether to stop early. With several
        processes the main one validates and decides for all."""
        p, cfg = self.progress, self.config.train
        result = self.validate() if self.world.main else None
        best = True
        if result is not None:
            # the best by BLEU, ties (e.g. one-word outputs, where BLEU is 0) by loss
            score = (result.bleu if cfg.bleu else 0.0, -result.loss)
            best_score = (p.best_bleu if cfg.bleu else 0.0,
                          -p.best_loss) if p.best_loss is not None else None
            best = best_score is None or score > best_score
            if best:
                p.best_bleu, p.best_loss = result.bleu, result.loss
            p.bad_validations = 0 if best else p.bad_validations + 1
            record = {"update": p.update, "valid_loss": result.loss,
                      "valid_ppl": result.perplexity, "valid_bleu": result.bleu,
                      "valid_chrf": result.chrf, "valid_exact": result.exact}
            p.history.append(record)
            records.write(record, split="valid")
            scores = (f", BLEU {result.bleu:.2f}, chrF {result.chrf:.1f}, exact "
                      f"{result.exact:.1%}" if result.bleu is not None else "")
            log.info("update %d: valid loss %.3f, ppl %.2f%s%s", p.update, result.loss,
                     result.perplexity, scores, " (best)" if best else "")
        self._save(best=best)
        return self.world.from_main(bool(cfg.patience) and p.bad_validations >= cfg.patience)

    def _checkpoint_name(self) -> str:
        return f"update_{self.progress.update:07d}"

    def _save(self, best: bool) -> None:
        """Write a checkpoint (the main process; every process calls this, for its RNG state)."""
        rng = self.world.gather(_rng_state())
        if self.world.main:
            state = {
                "progress": asdict(self.progress),
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": {**rng[0], "processes": rng[1:]},
                "config": self.config.to_dict(),
                "model_config": asdict(self.model_config),
            }
            ckpt.save_checkpoint(self.run_dir, self._checkpoint_name(), self.model, state,
                                 best=best, keep=self.config.train.keep_checkpoints)
        self.world.barrier()

    def _load(self, path: Path, weights: dict, state: dict, *, reset_optimizer: bool,
              reset_schedule: bool) -> None:
        ckpt.load_weights(self.model, path / ckpt.WEIGHTS, weights)
        self.progress = Progress(**state["progress"])
        if not reset_optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scaler.load_state_dict(state["scaler"])
        rng = [state["rng"], *state["rng"].get("processes", [])]
        if len(rng) != self.world.size:
            log.warning("%s was written by %d training processes, and %d continue it: the run "
                        "goes on, but not as it would have without the interruption", path,
                        len(rng), self.world.size)
        rng = rng[self.world.rank] if self.world.rank < len(rng) else None
        if rng is not None:
            torch.set_rng_state(rng["torch"])
            if rng["cuda"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])
        if reset_schedule:
            self.progress.update = 0
            self.progress.elapsed = 0.0
        log.info("resumed from %s at update %d", path, self.progress.update)

    def _report(self, bar, records: Records | NoRecords) -> None:
        p, window = self.progress, self.progress.window
        loss = window["loss"] / max(window["updates"], 1)
        speed = window["tokens"] / max(window["time"], 1e-9)
        lr = self.optimizer.param_groups[0]["lr"]
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
        log.info("update %d: loss %.3f, lr %.3e, %s target tokens/s, epoch %d, %.0f s", p.update,
                 loss, lr, f"{speed:,.0f}", p.epoch + 1, p.elapsed)
        records.write({"update": p.update, "train_loss": loss, "lr": lr, "tokens_per_s": speed,
                       "elapsed": p.elapsed}, split="train")
        p.window = _empty_window()

    def _summary(self, reason: str) -> None:
        p = self.progress
        best = f", best valid BLEU {p.best_bleu:.2f}" if p.best_bleu is not None else ""
        epochs = p.epoch + p.batch_in_epoch / max(len(self._epoch_data(p.epoch)[1]), 1)
        log.info("stopped (%s) after %d updates, %.2f epochs, %.0f s, %s target tokens/s on "
                 "average%s; checkpoints in %s", reason, p.update, epochs, p.elapsed,
                 f"{p.tokens / max(p.elapsed, 1e-9):,.0f}", best, ckpt.checkpoint_dir(self.run_dir))

    def _log_to_file(self) -> None:
        path = self.run_dir / "train.log"
        root = logging.getLogger("transduce")
        if not any(getattr(h, "baseFilename", None) == str(path) for h in root.handlers):
            handler = logging.FileHandler(path)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            root.addHandler(handler)
            root.setLevel(logging.INFO)


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _device(name: str, world: World) -> torch.device:
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


def _precision(name: str, device: torch.device) -> str:
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


def _log_above(bar):
    """Log lines printed above the progress bar instead of through it (when they go to the
    terminal at all)."""
    console = [h for h in logging.getLogger().handlers
               if type(h) is logging.StreamHandler and getattr(h.stream, "isatty", bool)()]
    return logging_redirect_tqdm() if console and not bar.disable else contextlib.nullcontext()


def _empty_window() -> dict:
    return {"loss": 0.0, "tokens": 0, "time": 0.0, "updates": 0}


def _check_not_empty(data: PreparedData) -> None:
    """Training needs pairs, and validation, when it has a split, needs some too: otherwise a
    clear error now instead of a loop that never finds a batch."""
    for name, what, split in (("train", "training", data.train),
                              ("valid", "validation", data.valid)):
        if split is not None and len(split) == 0:
            raise UserError(f"no {what} pairs: {split.skips.report(name)}; check the corpus, or "
                            "loosen data.max_length / data.max_length_ratio")


__all__ = ["Progress", "Trainer", "TrainingError"]
