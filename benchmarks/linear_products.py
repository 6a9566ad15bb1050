"""One float32 inference product at a search step's shapes, on each library the kernel paths
use (transduce/kernels/linear.py): MKL's (`F.linear`), oneDNN's linear kernel given the weight
as it is, and oneDNN's given the weight packed once into its blocked layout (the `onednn`
path's large layers). Microseconds a call, hot (the same call repeated, median of 5 timings),
and the largest difference between MKL's result and packed oneDNN's.

    python benchmarks/linear_products.py                 # 1 thread, then 2
    python benchmarks/linear_products.py --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

# (rows, in, out): a `tiny` model's layers, its output layer at the row counts a batch of 64
# meets (greedy: fewer as sentences end; beam 5: 320, then fewer), and `base`'s large layers
SHAPES = [(24, 128, 128), (24, 128, 384), (64, 128, 1024), (24, 128, 8000), (64, 128, 8000),
          (160, 128, 8000), (320, 128, 8000), (16, 512, 512), (64, 512, 2048), (64, 2048, 512)]


def microseconds(product, calls: int) -> float:
    for _ in range(5):
        product()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            product()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def row(rows: int, n_in: int, n_out: int) -> str:
    """A table row: the product of (rows, n_in) by a (n_out, n_in) weight on each library."""
    x, weight, bias = torch.randn(rows, n_in), torch.randn(n_out, n_in), torch.randn(n_out)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    onednn = torch.ops.mkldnn._linear_pointwise
    calls = max(20, int(2e8 / (rows * n_in * n_out)))
    with torch.no_grad():
        mkl = microseconds(lambda: F.linear(x, weight, bias), calls)
        dnn = microseconds(lambda: onednn(x, weight, bias, "none", [], ""), calls)
        dnn_packed = microseconds(lambda: onednn(x, packed, bias, "none", [], ""), calls)
        difference = (F.linear(x, weight, bias) - onednn(x, packed, bias, "none", [], "")).abs()
    return (f"| {rows} | {n_in:,} -> {n_out:,} | {mkl:,.0f} | {dnn:,.0f} | {dnn_packed:,.0f} | "
            f"{float(difference.max()):.1e} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"\ntorch {torch.__version__}, {threads} thread(s); microseconds a call\n")
        print("| rows | layer (in -> out) | MKL | oneDNN | oneDNN packed | largest difference |")
        print("|---|---|---|---|---|---|")
        for shape in SHAPES:
            print(row(*shape))


if __name__ == "__main__":
    main()
