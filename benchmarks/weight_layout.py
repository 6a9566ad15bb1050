"""A linear layer's product with its weight as PyTorch stores it, (out, in), against the same
weight stored transposed, (in, out) contiguous, on one thread: `F.linear(x, W)` (the BLAS's
transposed-operand product, what a model and a compiled graph call) against `x @ W_t` (its plain
product), at a search's row counts, for every layer shape of a preset. Microseconds a call
(the median of five timings of `--calls` calls: `linear_products.microseconds`) and their
ratio; the largest difference of the two results.

    python benchmarks/weight_layout.py                 # the `tiny` shapes, vocabulary 8,000
    python benchmarks/weight_layout.py --preset base --vocab 37000
"""

from __future__ import annotations

import argparse
import functools

from linear_products import microseconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="a model preset (its d_model, d_ff)")
    parser.add_argument("--vocab", type=int, default=8000, help="the output layer's rows")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 5, 16, 80, 320])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    from transduce.model.config import ModelConfig

    torch.set_num_threads(1)
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab,
                                tgt_vocab_size=args.vocab)
    d, ff = config.d_model, config.d_ff
    shapes = {"query, key and value (3d x d)": (3 * d, d), "attention output (d x d)": (d, d),
              "feed-forward in (d_ff x d)": (ff, d), "feed-forward out (d x d_ff)": (d, ff),
              f"output layer ({args.vocab} x d)": (args.vocab, d)}
    print(f"torch {torch.__version__}, one thread; preset {args.preset} (d_model {d}, d_ff "
          f"{ff}); us a call, F.linear(x, W) / x @ W_t\n")
    print("| layer | " + " | ".join(f"{r} rows" for r in args.rows) + " | largest difference |")
    print("|---|" + "---|" * (len(args.rows) + 1))
    for name, (out_features, in_features) in shapes.items():
        weight = torch.randn(out_features, in_features) / in_features ** 0.5
        transposed = weight.t().contiguous()
        cells, largest = [], 0.0
        for rows in args.rows:
            x = torch.randn(rows, in_features)
            linear = microseconds(functools.partial(F.linear, x, weight), args.calls)
            plain = microseconds(functools.partial(torch.mm, x, transposed), args.calls)
            largest = max(largest, float((F.linear(x, weight) - x @ transposed).abs().max()))
            cells.append(f"{linear:.0f} / {plain:.0f} ({linear / plain:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + f" | {largest:.1e} |", flush=True)


if __name__ == "__main__":
    main()
