"""The `transduce` command line."""

from __future__ import annotations

import argparse
import sys

from transduce import __version__
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except ValueError as error:  # a user's bad value: one line, no traceback
        print(f"transduce: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
