"""The training loop: the paper's recipe, resumable to the bit, observable while it runs."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm import tqdm

from transduce.config import Config, load_config
from transduce.data.batching import Batch, TokenBatches, collate
from transduce.data.directions import BothDirections
from transduce.data.prepare import PreparedData, prepare
from transduce.data.sampling import BpeDropout
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError
from transduce.model.transformer import Transformer
from transduce.runtime import native_bf16
from transduce.training import checkpoint as ckpt
from transduce.training.distributed import World
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


class Trainer:
    """Trains a model into a run directory.

    `Trainer(config, run_dir).train()` starts a run; `Trainer.resume(run_dir).train()` continues
    one from its latest checkpoint with the same batches, dropout masks and updates it would have
    had without the interruption. Started by `torchrun` (or `transduce train --nproc N`), each
    process trains on its share of every update's batches (transduce.training.distributed).
    """

    def __init__(self, config: Config, run_dir: Path, *, data: PreparedData | None = None,
                 tokenizers: Tokenizers | None = None) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.world = World.from_env()
        if self.world.main:
            self._log_to_file()
        else:  # the main process reports for all
            logging.getLogger("transduce").setLevel(logging.WARNING)
        train = config.train
        if train.threads:
            torch.set_num_threads(train.threads)
        self.device = _device(train.device, self.world)
        self.world.start(self.device)
        self.precision = _precision(train.precision, self.device)
        torch.manual_seed(train.seed)
        with self.world.main_first():  # the main process prepares the data, the others reuse it
            if data is None and not self.world.main:
                tokenizers = tokenizers or Tokenizers.load(self.run_dir)
            self.data = data or prepare(config.data, self.run_dir, tokenizers=tokenizers,
                                        max_positions=config.model.max_positions)
        tok = self.data.tokenizers
        self.model_config = config.model.resolve(tok.src.vocab_size, tok.tgt.vocab_size,
                                                 shared_vocab=tok.shared)
        self.model = Transformer(self.model_config).to(self.device)
        optimizer_type = torch.optim.AdamW if train.weight_decay else torch.optim.Adam
        self.optimizer = optimizer_type(self.model.parameters(), lr=train.lr,
                                        betas=train.adam_betas, eps=train.adam_eps,
                                        weight_decay=train.weight_decay)
        self.scaler = torch.amp.GradScaler(enabled=self.precision == "fp16")
        if self.precision == "fp16" and self.device.type != "cuda":
            raise UserError("train.precision=fp16 needs a GPU; use auto or bf16 on CPU")
        self.batches = TokenBatches.of(self.data.train, config.data.max_tokens, seed=train.seed)
        self.bpe_dropout = None
        if config.data.bpe_dropout:
            self.bpe_dropout = BpeDropout(self.data.train_corpus, self.data.train, tok,
                                          dropout=config.data.bpe_dropout, seed=train.seed,
                                          max_length=self.data.max_length)
        self.progress = Progress()
        self._references = None
        self._stop_signal: int | None = None
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
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is None:
            raise UserError(f"{run_dir}: no checkpoint to resume from")
        config = load_config(run_dir / "config.yaml", overrides)
        trainer = cls(config, run_dir, tokenizers=Tokenizers.load(run_dir))
        trainer._load(latest, reset_optimizer=reset_optimizer, reset_schedule=reset_schedule)
        trainer._resumed = True
        if overrides:
            config.save(run_dir / "config.yaml")
        return trainer

    # -- the loop -----------------------------------------------------------------------------

    def train(self) -> Progress:
        cfg = self.config.train
        p = self.progress
        if not self._resumed:
            if ckpt.latest_checkpoint(self.run_dir) is not None:
                raise UserError(f"{self.run_dir} already holds a run; continue it with "
                                f"`transduce train --resume {self.run_dir}` or pick another "
                                "--run-dir")
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
        writer = _tensorboard(self.run_dir / "tensorboard") if self.world.main else _NoWriter()
        bar = tqdm(total=cfg.max_updates or None, initial=p.update, unit="upd",
                   dynamic_ncols=True, disable=None if self.world.main else True)
        window = {"loss": 0.0, "tokens": 0, "time": 0.0, "updates": 0}
        reason = "done"
        previous = {}
        if threading.current_thread() is threading.main_thread():
            previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            for s in previous:
                signal.signal(s, self._on_signal)
        started, elapsed_before = time.perf_counter(), p.elapsed
        try:
            self.model.train()
            batches = self._batch_stream()
            while True:
                p.elapsed = elapsed_before + time.perf_counter() - started  # wall clock
                reason = self._agreed_stop()
                if reason:
                    break
                start = time.perf_counter()
                loss, tokens = self._update([next(batches)
                                             for _ in range(cfg.accumulate * self.world.size)])
                took = time.perf_counter() - start
                if loss is None:
                    continue
                window["loss"] += loss
                window["tokens"] += tokens
                window["time"] += took
                window["updates"] += 1
                bar.update(1)
                if p.update % cfg.log_every == 0 or p.update == 1:
                    self._report(window, bar, writer)
                if cfg.validate_every and p.update % cfg.validate_every == 0:
                    if self._validate_and_save(writer):
                        reason = "early stopping"
                        break
                elif cfg.save_every and p.update % cfg.save_every == 0:
                    self._save(best=False)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            bar.close()
        p.elapsed = elapsed_before + time.perf_counter() - started
        if reason == "interrupted":
            self._save(best=False)
            log.info("interrupted: checkpoint %s written; continue with `transduce train --resume "
                     "%s`", self._checkpoint_name(), self.run_dir)
        elif reason != "early stopping" and not self.world.from_main(
                bool(p.history) and p.history[-1]["update"] == p.update):  # not just validated
            self._validate_and_save(writer)
        writer.close()
        self._summary(reason)
        self.world.barrier()  # all done: none exits while another still needs it
        return p

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

    def _update(self, batches: list[Batch]) -> tuple[float | None, int]:
        """One optimiser update from k batches; the loss is normalised by their target tokens
        together, so k batches equal one batch k times larger. With several processes each
        backpropagates its share of the batches, and the gradients are summed."""
        cfg, p = self.config.train, self.progress
        tokens = sum(b.n_tgt_tokens for b in batches)
        world = self.world
        total, _ = self.accumulate_gradients(batches[world.rank::world.size], tokens=tokens)
        total = world.sum_gradients(self.model.parameters(), total)
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
        return total / tokens, tokens

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

    def _skip(self, loss: float, norm) -> tuple[None, int]:
        p = self.progress
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.is_enabled():  # fp16 overflow: the scaler lowers its scale and retries
            self.scaler.update()
            return None, 0
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
        return None, 0

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
        if self._stop_signal is not None:
            return "interrupted"
        if cfg.max_updates and p.update >= cfg.max_updates:
            return f"reached max_updates={cfg.max_updates}"
        if cfg.max_time and p.elapsed >= cfg.max_time:
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
        return self._stop_signal is not None

    def _on_signal(self, signum, frame) -> None:
        if self._stop_signal is not None:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._stop_signal = signum
        log.warning("stopping after this update (signal %d); press Ctrl-C again to abort", signum)

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

    def _validate_and_save(self, writer) -> bool:
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
            self._metrics(record, writer, prefix="valid")
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

    def _load(self, path: Path, *, reset_optimizer: bool, reset_schedule: bool) -> None:
        ckpt.load_weights(self.model, path / ckpt.WEIGHTS)
        state = torch.load(path / ckpt.STATE, weights_only=False)
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

    def _report(self, window: dict, bar, writer) -> None:
        p = self.progress
        loss = window["loss"] / max(window["updates"], 1)
        speed = window["tokens"] / max(window["time"], 1e-9)
        lr = self.optimizer.param_groups[0]["lr"]
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
        log.info("update %d: loss %.3f, lr %.3e, %s target tokens/s, epoch %d, %.0f s", p.update,
                 loss, lr, f"{speed:,.0f}", p.epoch + 1, p.elapsed)
        self._metrics({"update": p.update, "train_loss": loss, "lr": lr, "tokens_per_s": speed,
                       "elapsed": p.elapsed}, writer, prefix="train")
        window.update(loss=0.0, tokens=0, time=0.0, updates=0)

    def _metrics(self, record: dict, writer, prefix: str) -> None:
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"split": prefix, **record}) + "\n")
        for key, value in record.items():
            if key != "update" and value is not None:
                writer.add_scalar(f"{prefix}/{key}", value, record["update"])

    def _summary(self, reason: str) -> None:
        p = self.progress
        best = f", best valid BLEU {p.best_bleu:.2f}" if p.best_bleu is not None else ""
        log.info("stopped (%s) after %d updates, %d epochs, %.0f s, %s target tokens/s on "
                 "average%s; checkpoints in %s", reason, p.update, p.epoch, p.elapsed,
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


def _device(name: str, world: World = World()) -> torch.device:
    """train.device as a torch.device; with several processes on a machine each has its own
    GPU (the one of its local rank)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"train.device={name}: no GPU is available; use cpu or auto")
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


class _NoWriter:
    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def _tensorboard(directory: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: metrics.jsonl and train.log still have it all
        return _NoWriter()
    return SummaryWriter(str(directory))


__all__ = ["Progress", "Trainer", "TrainingError"]
