"""`transduce quickstart`: the whole system on the embedded number-words task, in minutes.

Trains the `tiny` model on English -> German number words (no download), then translates held-out
numbers it never saw, reports exact-match accuracy and BLEU on them, and draws the
cross-attention of one example.
"""

from __future__ import annotations

import logging
import time
from importlib import resources
from pathlib import Path

import sacrebleu

from transduce.config import Config, load_config
from transduce.data.prepare import corpus
from transduce.decoding.translator import Translator
from transduce.errors import UserError
from transduce.runs.claim import holds_run
from transduce.training.start import resume_run, start_run
from transduce.training.trainer import Trainer
from transduce.visualize.attention import save_attention_maps

log = logging.getLogger("transduce.quickstart")


def quickstart_config_path() -> Path:
    return Path(str(resources.files("transduce") / "configs" / "quickstart.yaml"))


def _trainer(config: Config, run_dir: Path, overrides: list[str]) -> Trainer:
    """A new run, or, when `run_dir` holds the quickstart run of these settings already, that run
    continued (to its end: a finished one is only evaluated again)."""
    if not holds_run(run_dir):
        return start_run(config, run_dir)
    held = load_config(run_dir / "config.yaml") if (run_dir / "config.yaml").is_file() else None
    if held == config:
        log.info("%s holds this quickstart run already: going on from its latest checkpoint",
                 run_dir)
        return resume_run(run_dir)
    differences = _differences(held.to_dict(), config.to_dict()) if held else ["its config.yaml"]
    again = " ".join(["transduce quickstart", *overrides, "--run-dir NEW_DIR"])
    raise UserError(f"{run_dir} holds a run with other settings ({'; '.join(differences[:3])}); "
                    f"run `{again}`, or remove {run_dir}")


def _differences(held: dict, wanted: dict) -> list[str]:
    return [f"{section}.{key}: {held[section].get(key)!r} there, {value!r} here"
            for section in wanted for key, value in wanted[section].items()
            if held.get(section, {}).get(key) != value]


def quickstart(run_dir: Path, overrides: list[str] = (), *, examples: int = 8) -> dict:
    """Train, evaluate on the held-out test numbers, draw attention; returns the figures."""
    run_dir = Path(run_dir)
    config = load_config(quickstart_config_path(), list(overrides))
    start = time.perf_counter()
    trainer = _trainer(config, run_dir, overrides)
    trainer.train()
    train_seconds = time.perf_counter() - start
    if trainer.interrupted:  # Ctrl-C or SIGTERM: stop, not evaluate a half-trained model
        kept = (f"run `transduce quickstart --run-dir {run_dir}` again to go on from update "
                f"{trainer.progress.update}" if holds_run(run_dir) else "nothing was kept")
        raise KeyboardInterrupt(f"quickstart stopped while training; {kept}")

    translator = Translator.load(run_dir)
    pairs = list(corpus(config.data, "test").pairs())
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    hypotheses = translator.translate(sources, beam_size=config.decode.beam_size)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(pairs)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])

    print(f"\nheld-out numbers the model never saw ({len(pairs):,}):\n")
    width = max((len(s) for s in sources[:examples]), default=0)
    for s, h, r in list(zip(sources, hypotheses, references, strict=True))[:examples]:
        mark = "ok " if h == r else "XX "
        print(f"  {mark}{s:<{width}}  ->  {h}" + ("" if h == r else f"   (reference: {r})"))
    example = translator.translate_detailed([sources[0]], attention=True)
    save_attention_maps(example, run_dir / "attention")
    picture = run_dir / "attention" / "attention_0001.png"
    print(f"\nexact match {exact:.1%}, BLEU {bleu.score:.2f}, chrF {chrf.score:.1f} "
          f"(most references are one German word, so BLEU's 4-grams say little; exact match is "
          f"the measure)")
    print(f"trained in {train_seconds:.0f} s; cross-attention of the first example: {picture}")
    return {"exact": exact, "bleu": bleu.score, "chrf": chrf.score, "seconds": train_seconds,
            "attention_png": picture}
