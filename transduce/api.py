"""The Python API: the same jobs as the command line."""

from __future__ import annotations

from pathlib import Path


def train(config=None, run_dir: str | Path = "runs/run", overrides: list[str] = ()):
    """Train a model into `run_dir`, as `transduce train`.

    config: a YAML file path, a dict of sections ({"model": {...}, "train": {...}}), a
    `transduce.config.Config`, or None for the defaults; overrides: "section.key=value" strings.
    Returns the final `Progress` (updates, epochs, best BLEU, validation history).
    """
    from transduce import runtime
    from transduce.config import Config, load_config
    from transduce.training.start import start_run

    runtime.tune()

    if isinstance(config, Config):
        resolved = load_config(base=config.to_dict(), overrides=list(overrides))
    elif isinstance(config, dict):
        resolved = load_config(base=config, overrides=list(overrides))
    else:
        resolved = load_config(Path(config) if config else None, list(overrides))
    return start_run(resolved, Path(run_dir)).train()


def resume(run_dir: str | Path, overrides: list[str] = (), *, reset_optimizer: bool = False,
           reset_schedule: bool = False):
    """Continue a run exactly where its latest checkpoint left it, as `transduce train --resume`."""
    from transduce import runtime
    from transduce.training.start import resume_run

    runtime.tune()

    return resume_run(Path(run_dir), list(overrides), reset_optimizer=reset_optimizer,
                      reset_schedule=reset_schedule).train()
