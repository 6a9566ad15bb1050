"""The `transduce` command line."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
import typing
from pathlib import Path

from transduce import __version__
from transduce.data.config import DataConfig
from transduce.model import PRESETS, ModelConfig, Transformer


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


def _add_config_options(parser: argparse.ArgumentParser, config_type, *,
                        aliases: dict | None = None, defaults: dict | None = None) -> None:
    """One --option per field of a config dataclass, named after it, typed like it."""
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
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
                        defaults={"dataset": None})
    prepare.set_defaults(run=_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        args.run(args)
    except ValueError as error:  # a user's bad value: one line, no traceback
        print(f"transduce: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
