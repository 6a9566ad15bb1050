"""A compiled decoder step: does `torch.compile` make a search step faster on this CPU?

The step of gpt-fast, on our model's own modules: the self-attention caches of all layers
preallocated to the search's length, (layers, rows, heads, length, Dh), each step's keys and
values written at its position (a tensor, so that shapes and code stay the same from step to
step), attention over every position with the later ones masked; the cross-attention keys and
values of all layers computed at once from the encoder output before the first step. Greedy
search with every output forced to 16 tokens (17 steps), random weights, batches of 64 (and 320
rows, beam 5's), three ways:

- transduce: our search (`greedy_search`, its growing cache and per-layer modules);
- static, eager: the step above run by PyTorch op by op;
- static, compiled: the same step through `torch.compile` (Inductor, C++ kernels for the
  element-wise work, weights frozen as constants, oneDNN/MKL for the products).

Prints milliseconds per step (median of 5 searches), the compile time, and whether the compiled
step's tokens are identical to the eager one's and to ours.

    python benchmarks/compiled_step.py                    # tiny and base
    python benchmarks/compiled_step.py --shapes tiny --rows 64
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
import torch.nn.functional as F

from transduce import runtime
from transduce.decoding.greedy import greedy_search
from transduce.model import ModelConfig, Transformer


class StaticSteps:
    """The decoder of `model` one step at a time over (rows, length) static buffers."""

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor,
                 length: int) -> None:
        self.model, self.mask, self.length = model, src_mask, length
        layers = model.decoder.layers
        rows, source_length, d = memory.shape
        self.heads = layers[0].self_attn.n_heads
        dh = d // self.heads
        # cross-attention keys and values of every layer in one product: (L, 2, rows, H, S, Dh)
        w = torch.stack([layer.cross_attn.in_proj.weight[d:] for layer in layers])
        b = torch.stack([layer.cross_attn.in_proj.bias[d:] for layer in layers])
        kv = (torch.einsum("bsd,lod->lbso", memory, w) + b[:, None, None])
        kv = kv.view(len(layers), rows, source_length, 2, self.heads, dh)
        kv = kv.permute(0, 3, 1, 4, 2, 5)
        self.cross_k, self.cross_v = kv[:, 0].contiguous(), kv[:, 1].contiguous()
        self.self_k = memory.new_zeros(len(layers), rows, self.heads, length, dh)
        self.self_v = torch.zeros_like(self.self_k)

    def step(self, tokens: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """tokens (rows,), position: a 0-d tensor -> logits (rows, V)."""
        return step(self.model, tokens, position, self.cross_k, self.cross_v, self.mask,
                    self.self_k, self.self_v)


def step(model, tokens, position, cross_k, cross_v, src_mask, self_k, self_v):
    """One decoder step (see the module's docstring); self_k and self_v are written."""
    embedding = model.decoder.embedding
    x = embedding.tokens(tokens[:, None]) * embedding.scale
    x = x + embedding.positions.table.index_select(0, position.view(1))
    rows, _, d = x.shape
    seen = torch.arange(self_k.shape[3], device=x.device) <= position  # (length,)
    for i, layer in enumerate(model.decoder.layers):

        def self_attention(h, i=i, layer=layer):
            attn = layer.self_attn
            q, k, v = attn._heads(attn.in_proj(h), 3)
            self_k[i].index_copy_(2, position.view(1), k)
            self_v[i].index_copy_(2, position.view(1), v)
            out = F.scaled_dot_product_attention(q, self_k[i], self_v[i],
                                                 attn_mask=seen[None, None, None, :])
            return attn.out_proj(out.transpose(1, 2).reshape(rows, 1, d))

        def cross_attention(h, i=i, layer=layer):
            attn = layer.cross_attn
            (q,) = attn._heads(attn.in_proj(h, slice(0, d)), 1)
            out = F.scaled_dot_product_attention(q, cross_k[i], cross_v[i], attn_mask=src_mask)
            return attn.out_proj(out.transpose(1, 2).reshape(rows, 1, d))

        x = layer.self_attn_block(x, self_attention)
        x = layer.cross_attn_block(x, cross_attention)
        x = layer.ffn_block(x, layer.ffn)
    return model.output(model.decoder.norm(x)[:, 0])


def static_greedy(model, src, steps: int, step_fn) -> torch.Tensor:
    src_mask = model.src_mask(src)
    state = StaticSteps(model, model.encode(src, src_mask), src_mask, steps)
    tokens = torch.full((len(src),), model.config.bos_id)
    out = []
    for t in range(steps):
        logits = step_fn(model, tokens, torch.tensor(t), state.cross_k, state.cross_v,
                         state.mask, state.self_k, state.self_v)
        if t < steps - 1:  # forced to steps - 1 tokens, then <eos>, as `min_len` does
            logits[:, model.config.eos_id] = float("-inf")
        logits[:, [model.config.pad_id, model.config.bos_id]] = float("-inf")
        tokens = logits.argmax(-1)
        out.append(tokens)
    return torch.stack(out, 1)[:, :-1]


def timed(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["tiny", "base"])
    parser.add_argument("--rows", nargs="+", type=int, default=[64, 320])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    runtime.tune()
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor

    inductor.freezing = True  # weights as constants: Inductor's CPU inference setting
    steps = 17
    print(f"torch {torch.__version__}, {args.threads} threads; ms per decoder step, "
          f"median of 5 greedy searches of {steps} steps")
    print("\n| shape | rows | transduce | static, eager | static, compiled | compile s | "
          "same tokens |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset(shape, src_vocab_size=8000,
                                               tgt_vocab_size=8000)).eval()
        for rows in args.rows:
            src = torch.randint(4, 8000, (rows, 20))
            src[rows // 2:, 15:] = model.config.pad_id
            torch._dynamo.reset()
            compiled = torch.compile(step, dynamic=False)
            with torch.no_grad():
                ours = torch.tensor(greedy_search(model, src, max_len_a=0, max_len_b=steps - 1,
                                                  min_len=steps - 1))
                eager = static_greedy(model, src, steps, step)
                start = time.perf_counter()
                tokens = static_greedy(model, src, steps, compiled)
                compile_seconds = time.perf_counter() - start
                same = torch.equal(tokens, eager) and torch.equal(tokens, ours)
                times = [timed(functools.partial(greedy_search, model, src, max_len_a=0,
                                                 max_len_b=steps - 1, min_len=steps - 1)),
                         timed(functools.partial(static_greedy, model, src, steps, step)),
                         timed(functools.partial(static_greedy, model, src, steps, compiled))]
            print(f"| {shape} | {rows} | " + " | ".join(f"{t / steps * 1e3:.2f}" for t in times)
                  + f" | {compile_seconds:.0f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
