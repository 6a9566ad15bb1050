"""The `transduce` command line."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import typing
from pathlib import Path

from transduce import (
    __version__,
    average_command,
    evaluate_command,
    models_command,
    runtime,
    score_command,
    serve_command,
    translate_command,
)
from transduce.average_command import add_average_options
from transduce.config import load_config
from transduce.data.config import DATASETS, TOKENIZERS, DataConfig
from transduce.errors import TrainingError, UserError
from transduce.evaluate_command import add_evaluate_options
from transduce.files import check_output_file, check_writable
from transduce.model import PRESETS, ModelConfig, Transformer
from transduce.options import add_config_options
from transduce.runs.claim import holds_run
from transduce.search_options import at_least
from transduce.translate_command import add_translate_options


def _params(args: argparse.Namespace) -> None:
    tgt_vocab = args.tgt_vocab or args.vocab
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=tgt_vocab,
                                share_embeddings=args.vocab == tgt_vocab)
    model = Transformer(config)
    print(f"{args.preset}: {model.num_parameters():,} parameters "
          f"(D={config.d_model}, d_ff={config.d_ff}, H={config.n_heads}, "
          f"layers={config.n_encoder_layers}+{config.n_decoder_layers}, "
          f"vocab={config.src_vocab_size}/{config.tgt_vocab_size})")


def _prepare(args: argparse.Namespace) -> None:
    import shutil

    from transduce.data.batching import TokenBatches
    from transduce.data.prepare import check_files, prepare

    fields = {f.name for f in dataclasses.fields(DataConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    if values["dataset"] is None and not (args.train_src or args.train_tsv or args.corpora):
        values["dataset"] = DataConfig.dataset  # the embedded default
    config = DataConfig(**values)
    out = Path(args.out)
    if holds_run(out) or (out / "config.yaml").is_file():
        raise UserError(f"--out {out} is a run directory of transduce train; preparing into it "
                        "would replace the tokenizer its model was trained with: pick another")
    check_files(config, flag=lambda key: f"--{key.replace('_', '-')}")
    existed = set(out.iterdir()) if out.is_dir() else None
    check_writable(out, what="--out")
    start = time.perf_counter()
    try:
        data = prepare(config, out)
        data.check_not_empty()
    except BaseException:  # an error or Ctrl-C: take away what this command made
        if existed is None:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for made in set(out.iterdir()) - existed:
                shutil.rmtree(made) if made.is_dir() else made.unlink()
        raise
    tok = data.tokenizers
    vocab = (f"{tok.src.vocab_size:,} shared" if tok.shared
             else f"{tok.src.vocab_size:,} source / {tok.tgt.vocab_size:,} target")
    print(f"tokenizer: {config.tokenizer}, vocabulary {vocab} -> {args.out}")
    for name, split in (("train", data.train), ("valid", data.valid)):
        if split is not None:
            tokens = int(split.src_lengths.sum() + split.tgt_lengths.sum())
            print(f"{name}: {len(split):,} pairs, {tokens:,} subword tokens")
    padding = TokenBatches.of(data.train, config.max_tokens).padding_fraction()
    print(f"train batches of max {config.max_tokens} tokens: padding {padding:.1%}")
    print(f"done in {time.perf_counter() - start:.1f} s")


def _train(args: argparse.Namespace) -> int:
    from transduce.training.start import resume_run, start_run

    if args.nproc < 1:
        raise UserError(f"--nproc must be at least 1, got {args.nproc}")
    if not args.resume:
        for given, name in ((args.reset_optimizer, "--reset-optimizer"),
                            (args.reset_schedule, "--reset-schedule")):
            if given:
                raise UserError(f"{name} goes with --resume RUN_DIR")
    elif args.run_dir:
        raise UserError("--resume RUN_DIR continues that run where it is; it takes no --run-dir")
    if args.init_from:
        if args.resume:
            raise UserError("--init-from starts a new run; --resume continues one: not both")
        args.overrides.append(f"train.init_from={args.init_from}")
    if args.nproc > 1:
        return _launch(args.nproc, args.argv)
    if args.resume:
        if args.config:  # `train --resume DIR key=value`: the first override lands in config
            args.overrides.insert(0, args.config)
        trainer = resume_run(Path(args.resume), args.overrides,
                             reset_optimizer=args.reset_optimizer,
                             reset_schedule=args.reset_schedule)
    else:
        if args.config and "=" in args.config and not Path(args.config).is_file():
            args.overrides.insert(0, args.config)  # no file: the defaults plus overrides
            args.config = None
        path = _config_path(args.config) if args.config else None
        config = load_config(path, args.overrides)
        name = path.stem if path else "run"
        trainer = start_run(config, Path(args.run_dir or Path("runs") / name))
    trainer.train()
    return 130 if trainer.interrupted else 0


def _config_path(name: str) -> Path:
    """A configuration file, or one shipped with transduce named without its directory (e.g.
    `multi30k_en_de` or `multi30k_en_de.yaml`: installed from a wheel, there is no configs/)."""
    from importlib import resources

    path = Path(name)
    if path.is_file() or path.parent != Path("."):
        return path
    shipped = Path(str(resources.files("transduce") / "configs"))
    for candidate in (shipped / name, shipped / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    return path  # load_config says it does not exist


def _launch(nproc: int, argv: list[str]) -> int:
    """`transduce train --nproc N ...`: the same command as N data-parallel processes."""
    from transduce.training.distributed import launch

    if "WORLD_SIZE" in os.environ:
        raise UserError("--nproc starts the training processes itself; under torchrun leave "
                        "it out")
    return launch(nproc, _without_nproc(argv))


def _without_nproc(argv: list[str]) -> list[str]:
    """The command without its --nproc N (also as --nproc=N, or abbreviated as argparse allows:
    no other option of `train` starts with --n)."""
    rest, skip = [], False
    for arg in argv:
        name = arg.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) > 2 and "--nproc".startswith(name):
            skip = "=" not in arg
        else:
            rest.append(arg)
    return rest


def _plot(args: argparse.Namespace) -> None:
    if args.run_dir == "positional":
        from transduce.visualize.positional import plot_positional

        out = check_output_file(Path(args.output or "positional.png"), what="-o")
        print(plot_positional(out, d_model=args.d_model))
        return
    from transduce.visualize.curves import plot_training

    out = check_output_file(Path(args.output or Path(args.run_dir) / "curves.png"), what="-o")
    print(plot_training(Path(args.run_dir), out))


def _quickstart(args: argparse.Namespace) -> None:
    from transduce.quickstart import quickstart

    quickstart(Path(args.run_dir), args.overrides)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line that says where to find help."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="transduce", description=__doc__)
    parser.add_argument("--version", action="version", version=f"transduce {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    params = commands.add_parser("params", help="count the parameters of a model preset")
    params.add_argument("preset", choices=sorted(PRESETS), help="the model preset")
    params.add_argument("--vocab", type=at_least(1), default=37000,
                        help="source (and shared) vocabulary size (default: 37000, WMT14 en-de)")
    params.add_argument("--tgt-vocab", type=at_least(1), default=None,
                        help="target vocabulary size when not shared (default: --vocab)")
    params.set_defaults(run=_params)

    prepare = commands.add_parser(
        "prepare", help="learn the tokenizer and binarize the training and validation data",
        description="Learn the tokenizer and binarize the training and validation splits into "
                    "--out (each option is the data.* configuration key of the same name).")
    prepare.add_argument("--out", required=True,
                         help="directory for the tokenizer and the binarized data (not a run "
                              "directory)")
    add_config_options(prepare, DataConfig, aliases={"dir": ["--data-dir"]},
                        defaults={"dataset": None},
                        skip=("bpe_dropout", "bidirectional_epochs"),  # training-time only
                        choices={"tokenizer": TOKENIZERS, "dataset": (*DATASETS, None)})
    prepare.set_defaults(run=_prepare)

    train = commands.add_parser(
        "train", help="train a model (or continue a run with --resume)",
        description="Train from a YAML configuration; key=value arguments override it "
                    "(e.g. train.max_updates=1000 model.dropout=0.2).")
    train.add_argument("config", nargs="?",
                       help="configuration file (YAML), or the name of one shipped with "
                            "transduce (e.g. multi30k_en_de); none: the defaults")
    train.add_argument("overrides", nargs="*", metavar="section.key=value",
                       help="settings over the configuration's, e.g. train.max_updates=1000")
    train.add_argument("--run-dir", help="where config, logs and checkpoints go "
                                         "(default: runs/CONFIG-NAME)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue this run exactly")
    train.add_argument("--init-from", metavar="RUN_DIR",
                       help="start from this run's weights and tokenizer, ours or imported "
                            "(train.init_from): fine-tuning")
    train.add_argument("--reset-optimizer", action="store_true",
                       help="with --resume: fresh Adam moments (fine-tuning)")
    train.add_argument("--reset-schedule", action="store_true",
                       help="with --resume: restart the learning-rate schedule and limits")
    train.add_argument("--nproc", type=int, default=1, metavar="N",
                       help="train in N data-parallel processes (one per GPU, or per CPU core "
                            "group: on a CPU each gets cores/N threads); every update takes N "
                            "times data.max_tokens")
    train.set_defaults(run=_train)

    average = commands.add_parser(
        "average", help="average the last N checkpoints of a run (the paper's final step)")
    add_average_options(average)
    average.set_defaults(run=average_command.average)

    plot = commands.add_parser(
        "plot", help="draw a run's training curves, or the positional encoding, as a PNG",
        description="transduce plot RUN_DIR: training curves; transduce plot positional: the "
                    "sinusoidal encoding matrix and PE(p).PE(p+k) against k.")
    plot.add_argument("run_dir", metavar="RUN_DIR|positional",
                      help="a run directory (its metrics.jsonl), or the word positional")
    plot.add_argument("-o", "--output",
                      help="the PNG file to write; its directory is created if missing "
                           "(default: RUN_DIR/curves.png, or positional.png)")
    plot.add_argument("--d-model", type=at_least(2), default=128,
                      help="with positional: the width of the encoding drawn (default: 128)")
    plot.set_defaults(run=_plot)

    quick = commands.add_parser(
        "quickstart", help="train on English->German number words and show the results",
        description="Train the tiny model on the embedded number-words corpus (no download), "
                    "translate held-out numbers, report exact match and BLEU, draw attention. "
                    "key=value arguments override configs/quickstart.yaml.")
    quick.add_argument("overrides", nargs="*", metavar="section.key=value",
                       help="settings over configs/quickstart.yaml, e.g. train.max_updates=500")
    quick.add_argument("--run-dir", default="runs/quickstart",
                       help="where the run goes; run again, it goes on from there (default: "
                            "runs/quickstart)")
    quick.set_defaults(run=_quickstart)

    translate = commands.add_parser(
        "translate", help="translate lines from a file or stdin",
        description="One output line per input line (an empty line gives an empty line); with "
                    "--nbest N, N lines per input in Moses format: id ||| text ||| score.")
    add_translate_options(translate)
    translate.set_defaults(run=translate_command.translate)

    evaluate = commands.add_parser(
        "evaluate", help="translate a test set and score it: sacreBLEU BLEU, chrF and TER",
        description="Translate --src, score against --ref with sacreBLEU (BLEU, chrF and TER, "
                    "with their signatures), and report the speed.")
    add_evaluate_options(evaluate)
    evaluate.set_defaults(run=evaluate_command.evaluate)

    scoring = commands.add_parser(
        "score", help="how probable a model finds given translations (to filter a corpus or "
                      "rank candidates)",
        description="One line per pair of --src and --tgt, tab-separated: the score as the "
                    "search ranks it (log-probability over the length penalty), the "
                    "log-probability of the translation given its source (<eos> included), "
                    "its mean per token, and its tokens.")
    score_command.add_score_options(scoring)
    scoring.set_defaults(run=score_command.score)

    serve = commands.add_parser(
        "serve", help="serve models over HTTP: LibreTranslate's API, ours, and a page",
        description="A translation server: LibreTranslate's API (/translate, /languages, "
                    "/detect, ...), transduce's own (/v1/translate with n-best and attention), "
                    "Prometheus metrics (/metrics) and a page at / that draws the attention. "
                    "Requests that arrive together are translated as one batch.")
    serve_command.add_serve_options(serve)
    serve.set_defaults(run=serve_command.serve)

    imports = commands.add_parser(
        "import", help="make a run directory of another toolkit's model (OPUS-MT)",
        description="Make a run directory of another toolkit's model.")
    models_command.add_import_options(imports)
    imports.set_defaults(run=models_command.import_model)

    export = commands.add_parser(
        "export", help="a run's model for Hugging Face, CTranslate2 or Argos Translate",
        description="Write a run's model for Hugging Face transformers, CTranslate2 or Argos "
                    "Translate (LibreTranslate).")
    models_command.add_export_options(export)
    export.set_defaults(run=models_command.export)
    return parser


def main(argv: list[str] | None = None) -> int:
    runtime.tune()  # before the first tensor: see transduce/runtime.py
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    args.argv = argv
    # argparse cannot take more positionals after an option: overrides placed after
    # --run-dir arrive here
    takes_overrides = args.command in ("train", "quickstart")
    if extra and (not takes_overrides or any("=" not in e or e.startswith("-") for e in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides.extend(extra)
    logging.basicConfig(level=logging.INFO, format="%(message)s" if args.command != "serve" else
                        serve_command.TIMED_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S")  # serve: times
    logging.captureWarnings(True)  # library warnings (sacreBLEU's, PyTorch's) as log lines
    code = _run(args)
    if args.command == "train":  # one process of several: it exits here
        from transduce.training.distributed import exit_if_joined

        exit_if_joined(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; the user's mistakes and the machine's as one line."""
    try:
        with _sigterm_as_ctrl_c(args.command != "serve"):  # serve: uvicorn's own
            return args.run(args) or 0
    except UserError as error:  # a bad file, setting or option: one line, no traceback
        print(f"transduce: error: {error}", file=sys.stderr)
        return 2
    except TrainingError as error:
        print(f"transduce: training stopped: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the disk, not the program: full, read-only, gone
        where = f"{error.filename}: " if error.filename else ""
        print(f"transduce: error: {where}{error.strerror or error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as error:  # what it kept or removed, when it says
        print(f"\ntransduce: interrupted{f': {error}' if str(error) else ''}", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _sigterm_as_ctrl_c(wanted: bool):
    """SIGTERM (`timeout`, `kill`, SLURM, systemd) stops a command as Ctrl-C does, keeping what
    Ctrl-C keeps, instead of killing it where it stands; training takes both signals itself
    while it trains (transduce.training.interrupts)."""
    if not wanted or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum, frame) -> typing.NoReturn:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
