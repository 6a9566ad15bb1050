"""What a run tells while it trains: log lines (on the terminal, above the progress bar, and in
train.log), the progress bar, and the records (metrics.jsonl, TensorBoard)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from transduce.config import ModelSection
from transduce.training.records import NoRecords, Records
from transduce.training.state import Progress, empty_window
from transduce.training.validate import signatures

log = logging.getLogger("transduce.train")


def log_to_file(run_dir: Path) -> None:
    """Copy transduce's log lines into RUN/train.log."""
    path = Path(run_dir) / "train.log"
    root = logging.getLogger("transduce")
    if not any(getattr(h, "baseFilename", None) == str(path) for h in root.handlers):
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)


def log_above(bar):
    """Log lines printed above the progress bar instead of through it (when they go to the
    terminal at all)."""
    console = [h for h in logging.getLogger().handlers
               if type(h) is logging.StreamHandler and getattr(h.stream, "isatty", bool)()]
    return logging_redirect_tqdm() if console and not bar.disable else contextlib.nullcontext()


def start(model, config, model_config, processes: int, device) -> None:
    """The first lines of a new run: the model's size and shape, and the processes."""
    c = model_config
    shape = ("d_model", "d_ff", "n_heads", "n_encoder_layers", "n_decoder_layers")
    preset = ModelSection(config.model.preset)
    custom = any(config.model.get(k) != preset.get(k) for k in shape)
    kind = "its own shape" if custom else f"{config.model.preset} preset"  # e.g. an import
    log.info("model: %s parameters (%s: D=%d, d_ff=%d, H=%d, %d+%d layers, "
             "vocabulary %d/%d)", f"{model.num_parameters():,}", kind, c.d_model,
             c.d_ff, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.src_vocab_size,
             c.tgt_vocab_size)
    if processes > 1:
        log.info("data parallel: %d processes on %s, %d batches of %d tokens each per update "
                 "(%s)", processes, device.type, processes * config.train.accumulate,
                 config.data.max_tokens, {"ddp": "DistributedDataParallel",
                                          "fsdp": "FSDP, weights sharded"}[config.train.parallel])


def gpu_memory(device: torch.device) -> dict[str, float]:
    """On a GPU, the most memory this process's tensors have held so far and what PyTorch's
    allocator has reserved for them, GiB (what `nvidia-smi` shows is about the second, plus
    CUDA's own); nothing on a CPU."""
    if device.type != "cuda":
        return {}
    return {"gpu_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "gpu_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30}


def _memory(memory: dict[str, float]) -> str:
    return (f", GPU memory {memory['gpu_memory_gib']:.1f} GiB (reserved "
            f"{memory['gpu_reserved_gib']:.1f})" if memory else "")


def metrics() -> None:
    """Which sacreBLEU metrics validation scores with, so that others can reproduce them (after
    a validation: a signature needs a scored corpus)."""
    log.info("validation scores: %s", signatures())


def report(progress: Progress, lr: float, bar, records: Records | NoRecords,
           device: torch.device) -> None:
    """One log line and one metrics row: the updates since the last one, averaged."""
    p, window = progress, progress.window
    loss = window["loss"] / max(window["updates"], 1)
    speed = window["tokens"] / max(window["time"], 1e-9)
    memory = gpu_memory(device)
    bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}", refresh=False)
    log.info("update %d: loss %.3f, lr %.3e, %s target tokens/s, epoch %d, %.0f s%s", p.update,
             loss, lr, f"{speed:,.0f}", p.epoch + 1, p.elapsed, _memory(memory))
    records.write({"update": p.update, "train_loss": loss, "lr": lr, "tokens_per_s": speed,
                   "elapsed": p.elapsed, **memory}, split="train")
    p.window = empty_window()


def summary(progress: Progress, reason: str, epochs: float, checkpoints: Path,
            device: torch.device) -> None:
    p = progress
    best = f", best valid BLEU {p.best_bleu:.2f}" if p.best_bleu is not None else ""
    log.info("stopped (%s) after %d updates, %.2f epochs, %.0f s, %s target tokens/s on "
             "average%s%s; checkpoints in %s", reason, p.update, epochs, p.elapsed,
             f"{p.tokens / max(p.elapsed, 1e-9):,.0f}", _memory(gpu_memory(device)), best,
             checkpoints)


def nothing_to_do(run_dir: Path, reason: str, train) -> None:
    """A resumed run that has already reached its limit: say how to go on."""
    key, more = {"max_updates": ("train.max_updates", train.max_updates * 2),
                 "max_time": ("train.max_time", f"{train.max_time * 2:g}"),
                 "max_epochs": ("train.max_epochs", train.max_epochs * 2)
                 }[reason.split("=")[0].removeprefix("reached ")]
    log.info("%s has already %s: nothing to train. To go on, raise the limit, e.g. "
             "`transduce train --resume %s %s=%s`", run_dir, reason, run_dir, key, more)


def validation(progress: Progress, result, best: bool | None, *, name: str = "") -> None:
    """One line of a validation's result: the whole (the mean of the pairs', when there are
    several: "(mean of 3 pairs)"), or, with `name`, one pair's."""
    scores = (f", BLEU {result.bleu:.2f}, chrF {result.chrf:.1f}, TER {result.ter:.1f}, exact "
              f"{result.exact:.1%}" if result.bleu is not None else "")
    what = f"valid {name}" if name else "valid"
    pairs = result.pairs
    mean = f" (mean of {len(pairs)} pairs)" if pairs else ""
    log.info("update %d: %s loss %.3f, ppl %.2f%s%s%s", progress.update, what, result.loss,
             result.perplexity, scores, mean, " (best)" if best else "")
