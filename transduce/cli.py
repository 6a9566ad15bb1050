"""The `transduce` command line."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
import typing
from pathlib import Path

from transduce import __version__
from transduce.config import load_config
from transduce.data.config import DataConfig
from transduce.errors import UserError
from transduce.model import PRESETS, ModelConfig, Transformer
from transduce.training.config import DTYPES, STOPPING
from transduce.training.trainer import TrainingError

if typing.TYPE_CHECKING:
    from transduce.decoding.translator import Translator


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
    from transduce.data.batching import TokenBatches
    from transduce.data.prepare import prepare

    fields = {f.name for f in dataclasses.fields(DataConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    if values["dataset"] is None and not (args.train_src or args.train_tsv):
        values["dataset"] = DataConfig.dataset  # the embedded default
    config = DataConfig(**values)
    start = time.perf_counter()
    data = prepare(config, Path(args.out))
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
    from transduce.training.trainer import Trainer

    if args.nproc < 1:
        raise UserError(f"--nproc must be at least 1, got {args.nproc}")
    if args.nproc > 1:
        return _launch(args.nproc, args.argv)
    if args.resume:
        if args.config:  # `train --resume DIR key=value`: the first override lands in config
            args.overrides.insert(0, args.config)
        trainer = Trainer.resume(Path(args.resume), args.overrides,
                                 reset_optimizer=args.reset_optimizer,
                                 reset_schedule=args.reset_schedule)
    else:
        if args.config and "=" in args.config and not Path(args.config).is_file():
            args.overrides.insert(0, args.config)  # no file: the defaults plus overrides
            args.config = None
        config = load_config(Path(args.config) if args.config else None, args.overrides)
        name = Path(args.config).stem if args.config else "run"
        trainer = Trainer(config, Path(args.run_dir or Path("runs") / name))
    trainer.train()
    return 130 if trainer.interrupted else 0


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


def _average(args: argparse.Namespace) -> None:
    from transduce.training.checkpoint import (average_checkpoints, checkpoint_dir,
                                               update_checkpoints)

    paths = update_checkpoints(Path(args.run_dir))[-args.last:]
    if len(paths) < args.last:
        print(f"transduce: note: only {len(paths)} checkpoints kept in {args.run_dir}",
              file=sys.stderr)
    out = average_checkpoints(paths, checkpoint_dir(Path(args.run_dir)) / "averaged")
    print(f"averaged {', '.join(p.name for p in paths)} -> {out}")


def _plot(args: argparse.Namespace) -> None:
    if args.run_dir == "positional":
        from transduce.visualize.positional import plot_positional

        print(plot_positional(Path(args.output or "positional.png"), d_model=args.d_model))
        return
    from transduce.visualize.curves import plot_training

    print(plot_training(Path(args.run_dir), Path(args.output) if args.output else None))


def _quickstart(args: argparse.Namespace) -> None:
    from transduce.quickstart import quickstart

    quickstart(Path(args.run_dir), args.overrides)


def _read_input(path: str | None) -> list[str]:
    """Lines of a file or stdin; invalid UTF-8 is an error naming the line."""
    from transduce.data.corpus import read_lines

    if path:
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            return []
        return list(read_lines(Path(path)))
    lines = []
    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise UserError(f"<stdin>:{n}: invalid UTF-8 at byte {error.start} of the line"
                            ) from None
    return lines


def _search_options(args: argparse.Namespace) -> dict:
    return {k: v for k, v in dict(
        beam_size=args.beam, length_penalty=args.lenpen, max_len_a=args.max_len_a,
        max_len_b=args.max_len_b, min_len=args.min_len, max_tokens=args.max_tokens,
        stopping=args.stopping).items()
        if v is not None}


def _load_translator(args: argparse.Namespace) -> Translator:
    from transduce.decoding.translator import Translator
    from transduce.training.checkpoint import named_checkpoint

    dirs = [Path(m) for m in args.model]
    if args.checkpoint and len(dirs) > 1 and Path(args.checkpoint).exists():
        raise UserError(f"--checkpoint {args.checkpoint}: with several models, name a checkpoint "
                        "each run has (averaged, best, latest, update_0007000, ...), not a path")
    checkpoints = [named_checkpoint(d, args.checkpoint) for d in dirs] if args.checkpoint else None
    return Translator.load(dirs, device=args.device, dtype=args.dtype, checkpoint=checkpoints)


def _translate(args: argparse.Namespace) -> None:
    translator = _load_translator(args)
    options = _search_options(args)
    if args.sample:
        options.update(sampling=True, temperature=args.temperature, top_k=args.top_k,
                       top_p=args.top_p, seed=args.seed)
    if args.interactive:
        print("type a sentence and press Enter (Ctrl-D to quit)", file=sys.stderr)
        for line in sys.stdin:
            print(translator.translate([line.rstrip("\n")], **options)[0], flush=True)
        return
    lines = _read_input(args.input)
    results = translator.translate_detailed(lines, nbest=args.nbest,
                                            attention=bool(args.attention),
                                            progress=bool(args.input) and sys.stderr.isatty(),
                                            **options)
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        for n, result in enumerate(results):
            if args.nbest > 1:  # Moses n-best format: id ||| translation ||| score
                for text, score in result.nbest:
                    out.write(f"{n} ||| {text} ||| {score:.4f}\n")
            else:
                out.write(result.text + "\n")
    finally:
        if args.output:
            out.close()
    if args.attention:
        from transduce.visualize.attention import save_attention_maps

        written = save_attention_maps(results, Path(args.attention), layer=args.layer,
                                      heads=args.heads)
        print(f"{written} attention maps -> {args.attention}", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> None:
    import sacrebleu

    sources, references = _read_input(args.src), _read_input(args.ref)
    if len(sources) != len(references):
        raise UserError(f"line counts differ: {args.src} has {len(sources)} lines, {args.ref} "
                        f"has {len(references)}")
    translator = _load_translator(args)
    start = time.perf_counter()
    hypotheses = translator.translate(sources, progress=sys.stderr.isatty(),
                                      **_search_options(args))
    seconds = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    bleu = sacrebleu.BLEU(lowercase=args.lowercase)
    chrf = sacrebleu.CHRF(lowercase=args.lowercase)
    print(f"{bleu.corpus_score(hypotheses, [references])}  {bleu.get_signature()}")
    print(f"{chrf.corpus_score(hypotheses, [references])}  {chrf.get_signature()}")
    print(f"{len(sources)} sentences in {seconds:.1f} s ({len(sources) / seconds:.1f} "
          f"sentences/s)")


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, nargs="+", metavar="DIR",
                        help="a run directory of transduce train; several: their ensemble (one "
                             "tokenizer), each next token's probability the mean of theirs")
    parser.add_argument("--checkpoint", metavar="NAME",
                        help="which of its checkpoints (of each model's): averaged, best, latest, "
                             "update_0007000, ... or a checkpoint's path (default: averaged, "
                             "else best)")
    parser.add_argument("--beam", type=int, help="beam size (1: greedy; default: decode.beam_size)")
    parser.add_argument("--lenpen", type=float, help="length penalty alpha (GNMT)")
    parser.add_argument("--max-len-a", type=float, help="max output = a * source length + b")
    parser.add_argument("--max-len-b", type=int)
    parser.add_argument("--min-len", type=int)
    parser.add_argument("--stopping", choices=STOPPING,
                        help="beam search ends a sentence when no live beam beats its n-best "
                             "finished ones at its current length (early) or at any length (exact)")
    parser.add_argument("--max-tokens", type=int, help="source tokens per batch")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="decode in 16 bits: faster for larger models on CPUs with bf16 "
                             "support and on GPUs, not for tiny ones; a few translations may "
                             "differ (default: float32)")


def _add_config_options(parser: argparse.ArgumentParser, config_type, *,
                        aliases: dict | None = None, defaults: dict | None = None,
                        skip: tuple[str, ...] = ()) -> None:
    """One --option per field of a config dataclass (but those in skip), named after it, typed
    like it."""
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
        if field.name in skip:
            continue
        flags = [f"--{field.name.replace('_', '-')}", *(aliases or {}).get(field.name, ())]
        default = (defaults or {}).get(field.name, field.default)
        kind = hints[field.name]
        if kind is bool:
            parser.add_argument(*flags, dest=field.name, action=argparse.BooleanOptionalAction,
                                default=default)
            continue
        base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
        convert = _or_null(base) if type(None) in typing.get_args(kind) else base
        parser.add_argument(*flags, dest=field.name, type=convert, default=default,
                            metavar=base.__name__.upper(), help=f"(default: {default})")


def _or_null(convert):
    """An optional setting: 'null' (as in YAML) or 'none' unsets it."""
    def parse(text: str):
        return None if text.lower() in ("null", "none") else convert(text)
    parse.__name__ = convert.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transduce", description=__doc__)
    parser.add_argument("--version", action="version", version=f"transduce {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    params = commands.add_parser("params", help="count the parameters of a model preset")
    params.add_argument("preset", choices=sorted(PRESETS))
    params.add_argument("--vocab", type=int, default=37000,
                        help="source (and shared) vocabulary size (default: 37000, WMT14 en-de)")
    params.add_argument("--tgt-vocab", type=int, default=None,
                        help="target vocabulary size when not shared")
    params.set_defaults(run=_params)

    prepare = commands.add_parser(
        "prepare", help="learn the tokenizer and binarize the training and validation data",
        description="Learn the tokenizer and binarize the training and validation splits into "
                    "--out (each option is the data.* configuration key of the same name).")
    prepare.add_argument("--out", required=True, help="directory for tokenizer and data")
    _add_config_options(prepare, DataConfig, aliases={"dir": ["--data-dir"]},
                        defaults={"dataset": None},
                        skip=("bpe_dropout", "bidirectional_epochs"))  # training-time only
    prepare.set_defaults(run=_prepare)

    train = commands.add_parser(
        "train", help="train a model (or continue a run with --resume)",
        description="Train from a YAML configuration; key=value arguments override it "
                    "(e.g. train.max_updates=1000 model.dropout=0.2).")
    train.add_argument("config", nargs="?", help="configuration file (YAML)")
    train.add_argument("overrides", nargs="*", metavar="section.key=value")
    train.add_argument("--run-dir", help="where config, logs and checkpoints go "
                                         "(default: runs/CONFIG-NAME)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue this run exactly")
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
    average.add_argument("run_dir")
    average.add_argument("--last", type=int, default=5, help="how many (default: 5)")
    average.set_defaults(run=_average)

    plot = commands.add_parser(
        "plot", help="draw a run's training curves, or the positional encoding, as a PNG",
        description="transduce plot RUN_DIR: training curves; transduce plot positional: the "
                    "sinusoidal encoding matrix and PE(p).PE(p+k) against k.")
    plot.add_argument("run_dir", metavar="RUN_DIR|positional")
    plot.add_argument("-o", "--output",
                      help="PNG file (default: RUN_DIR/curves.png, or positional.png)")
    plot.add_argument("--d-model", type=int, default=128, help="for positional (default: 128)")
    plot.set_defaults(run=_plot)

    quick = commands.add_parser(
        "quickstart", help="train on English->German number words and show the results",
        description="Train the tiny model on the embedded number-words corpus (no download), "
                    "translate held-out numbers, report exact match and BLEU, draw attention. "
                    "key=value arguments override configs/quickstart.yaml.")
    quick.add_argument("overrides", nargs="*", metavar="section.key=value")
    quick.add_argument("--run-dir", default="runs/quickstart")
    quick.set_defaults(run=_quickstart)

    translate = commands.add_parser(
        "translate", help="translate lines from a file or stdin",
        description="One output line per input line (an empty line gives an empty line); with "
                    "--nbest N, N lines per input in Moses format: id ||| text ||| score.")
    _add_search_options(translate)
    translate.add_argument("-i", "--input", help="input file (default: stdin)")
    translate.add_argument("-o", "--output", help="output file (default: stdout)")
    translate.add_argument("--nbest", type=int, default=1)
    translate.add_argument("--interactive", action="store_true", help="translate as you type")
    translate.add_argument("--sample", action="store_true", help="sample instead of searching")
    translate.add_argument("--temperature", type=float, default=1.0)
    translate.add_argument("--top-k", type=int, default=0)
    translate.add_argument("--top-p", type=float, default=1.0)
    translate.add_argument("--seed", type=int, default=None)
    translate.add_argument("--attention", metavar="DIR",
                           help="write one cross-attention heatmap (PNG) per sentence here")
    translate.add_argument("--layer", type=int, default=-1,
                           help="decoder layer of the heatmaps (default: the last)")
    translate.add_argument("--heads", action="store_true",
                           help="a grid of every head instead of their average")
    translate.set_defaults(run=_translate)

    evaluate = commands.add_parser(
        "evaluate", help="translate a test set and score it: sacreBLEU BLEU and chrF")
    _add_search_options(evaluate)
    evaluate.add_argument("--src", required=True, help="source sentences, one per line")
    evaluate.add_argument("--ref", required=True, help="reference translations")
    evaluate.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    evaluate.add_argument("-o", "--output", help="also write the translations here")
    evaluate.set_defaults(run=_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
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
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return args.run(args) or 0
    except ValueError as error:  # a user's bad value (UserError too): one line, no traceback
        print(f"transduce: error: {error}", file=sys.stderr)
        return 2
    except TrainingError as error:
        print(f"transduce: training stopped: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
