"""What CUDA graphs would gain a search step on a GPU (issue 48), before they are built: the
model's one-step decode over its static cache (`transduce.decoding.compiled.CompiledSteps`, run
eagerly) timed as PyTorch launches it, kernel by kernel, against the same step captured once in
a `torch.cuda.CUDAGraph` and replayed. Random weights at each shape, sources of 24 tokens, the
step at position 20 attending to a window of 32; the replayed step's logits are checked against
the launched one's. A GPU's figure only (on a CPU there is nothing to capture).

    python benchmarks/cuda_graph_step.py                       # tiny and base; 1, 64, 320 rows
    python benchmarks/cuda_graph_step.py --shapes base --rows 64 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from transduce.decoding.compiled import CompiledSteps, _decode_next
from transduce.model import ModelConfig, Transformer
from transduce.model.static_cache import StaticStorage

SOURCE, POSITION, WINDOW = 24, 20, 32


def step_of(model: Transformer, rows: int):
    """A function running one decoder step of `rows` rows at POSITION, each call the same (the
    position put back first): the step as a search runs it, minus the search's choosing."""
    src = torch.randint(4, model.config.src_vocab_size, (rows, SOURCE), device="cuda")
    steps = CompiledSteps(model, src, StaticStorage())
    steps.limit(128)
    steps._start()
    steps.cache.read(steps._window(WINDOW))
    position = steps.cache.position

    def step() -> torch.Tensor:
        position.fill_(POSITION)
        return _decode_next(model, steps.inputs, steps.memory, steps.src_mask, steps.cache)
    return step


def per_call(fn, repeats: int = 200) -> float:
    """Milliseconds a call, the median of 5 runs of `repeats` calls (the GPU drained)."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / repeats * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["tiny", "base"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 64, 320])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cuda_graph_step.py: no CUDA GPU here")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.dtype}; ms per "
          f"decoder step (position {POSITION}, window {WINDOW}, sources of {SOURCE} tokens)")
    print("\n| shape | rows | launched | replayed | ratio | largest difference |")
    print("|---|---|---|---|---|---|")
    dtype = getattr(torch, args.dtype)
    for shape in args.shapes:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset(shape, src_vocab_size=32000,
                                               tgt_vocab_size=32000)).eval()
        model = model.to("cuda", dtype)
        for rows in args.rows:
            with torch.inference_mode():
                step = step_of(model, rows)
                launched = step().clone()
                side = torch.cuda.Stream()  # captures warm up on a side stream first
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(graph):
                        captured = step()
                except Exception as error:  # noqa: BLE001 (a figure's table: say why, go on)
                    print(f"| {shape} | {rows} | {per_call(step):.3f} | cannot capture: "
                          f"{type(error).__name__}: {str(error).splitlines()[0][:100]} | | |")
                    continue
                graph.replay()
                difference = (captured.float() - launched.float()).abs().max().item()
                eager, replayed = per_call(step), per_call(graph.replay)
            print(f"| {shape} | {rows} | {eager:.3f} | {replayed:.3f} | "
                  f"{eager / replayed:.2f}x | {difference:.2e} |")


if __name__ == "__main__":
    main()
