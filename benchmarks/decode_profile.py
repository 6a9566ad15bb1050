"""Where a search step's time goes: the torch profiler's self CPU time, grouped by kind of work.

A trained run's `Translator` translates the first N Multi30k test2016 English sentences once to
warm up, then once under `torch.profiler.profile()`; the operators' self CPU times are summed
into groups (linear layers, attention, row gathers, ...), each printed as a share of the whole.

    python benchmarks/decode_profile.py --model runs/m30k-serve                 # beam 5, fp32
    python benchmarks/decode_profile.py --model runs/m30k-serve --dtype int8
    # an earlier commit, from its checkout:  PYTHONPATH=. python /path/to/decode_profile.py ...
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from torch.profiler import profile

from transduce.decoding.translator import Translator

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))
GROUPS = {
    "linear layers (MKL/oneDNN/fbgemm products)": (
        "aten::addmm", "aten::mm", "aten::linear", "mkldnn::_linear_pointwise",
        "quantized::linear_with_input_q_dq_qweight_dq_output_fp32"),
    "attention products and softmax": (
        "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax",
        "aten::where"),
    "row gathers and moves (cache, beams)": (
        "aten::index_select", "aten::index_copy_", "aten::gather", "aten::index"),
    "copies and concatenations": ("aten::copy_", "aten::cat"),
    "log-softmax": ("aten::_log_softmax",),
    "top-k": ("aten::topk",),
    "LayerNorm": ("aten::native_layer_norm",),
    "divisions, abs, amax, addcmul (int8's row scaling; attention's 1/sqrt(Dh))": (
        "aten::abs", "aten::amax", "aten::addcmul", "aten::clamp_", "aten::div"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=1024, help="source tokens a batch")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu", dtype=args.dtype)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.sentences]
    options = dict(beam_size=args.beam, max_tokens=args.max_tokens)
    translator.translate(lines, **options)
    with profile() as profiled:
        translator.translate(lines, **options)
    events = profiled.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    grouped = 0
    print(f"{args.model}, {args.dtype}, beam {args.beam}, {len(lines)} sentences\n")
    print("| share of the time | |\n|---|---|")
    for name, operators in GROUPS.items():
        time = sum(e.self_cpu_time_total for e in events if e.key in operators)
        grouped += time
        print(f"| {name} | {time / total:.0%} |")
    print(f"| everything else: views, small ops, Python between them | "
          f"{(total - grouped) / total:.0%} |")
    print(f"| total (profiled) | {total / 1e6:.2f} s |")


if __name__ == "__main__":
    main()
