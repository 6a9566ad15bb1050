"""Training-step speed: transduce vs an equivalent torch.nn.Transformer, side by side.

One step = forward + label-smoothed loss + backward + Adam update, on batches of about
--max-tokens target tokens drawn with realistic length variation and grouped by length (as a
bucketing batcher would). Reports real (non-padding) target tokens per second.

    python benchmarks/train_step.py                      # tiny and base, fp32 and bf16
    python benchmarks/train_step.py --presets tiny --steps 20
    python benchmarks/train_step.py --presets tiny --precisions fp32   # bf16 is emulated on AVX2
    python benchmarks/train_step.py --device cuda --presets base --precisions bf16 --profile
    python benchmarks/train_step.py --presets tiny --pre-norm --dropout 0.3 --attention-dropout 0.1
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from transduce import ModelConfig, Transformer, runtime
from transduce.model.embeddings import sinusoidal_encoding
from transduce.training.loss import projected_label_smoothed_cross_entropy

runtime.tune()  # for both columns, before their first tensor (transduce/runtime.py)

PAD = 1
VOCAB = {"tiny": 8000, "base": 37000, "iwslt": 10000, "big": 37000}


class TorchReference(nn.Module):
    """The same model built from torch.nn.Transformer, as a user of plain PyTorch would."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.register_buffer("positions", sinusoidal_encoding(c.max_positions, c.d_model))
        self.dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(c.d_model, c.n_heads, c.n_encoder_layers,
                                          c.n_decoder_layers, c.d_ff, c.dropout,
                                          batch_first=True, norm_first=c.norm_first)
        if not c.norm_first:  # the paper's post-norm: no final LayerNorm (pre-norm keeps it)
            self.transformer.encoder.norm = self.transformer.decoder.norm = None
        for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
            # nn.Transformer's dropout after ReLU and on attention weights: not in the paper,
            # so only what the config asks for (0 unless --activation/--attention-dropout)
            layer.dropout = nn.Dropout(c.activation_dropout)
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = c.attention_dropout
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.output.weight = self.embedding.weight
        self.scale = math.sqrt(c.d_model)

    def embed(self, ids):
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, src, tgt):
        src_pad = src == PAD
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        hidden = self.transformer(self.embed(src), self.embed(tgt), src_key_padding_mask=src_pad,
                                  memory_key_padding_mask=src_pad, tgt_mask=causal,
                                  tgt_is_causal=True)
        return self.output(hidden)


def make_batches(vocab: int, max_tokens: int, n_batches: int, seed: int = 0):
    """Length-bucketed batches: lengths log-normal (median ~20 subwords, long tail to 100)."""
    g = torch.Generator().manual_seed(seed)
    n = n_batches * max_tokens // 12
    tgt_len = torch.exp(torch.randn(n, generator=g) * 0.5 + math.log(20)).clamp(3, 100).long()
    src_len = (tgt_len * torch.exp(torch.randn(n, generator=g) * 0.15)).clamp(2, 110).long()
    order = torch.argsort(tgt_len)
    batches, start = [], 0
    while start < n:
        end = start + 1
        while end < n and (end - start + 1) * tgt_len[order[end]] <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    picks = torch.randperm(len(batches), generator=g)[:n_batches]
    result = []
    for i in picks.tolist():
        idx = batches[i]
        s, t = src_len[idx], tgt_len[idx] + 1  # +1: <bos> on input, <eos> on output
        src = torch.full((len(idx), int(s.max())), PAD)
        tgt = torch.full((len(idx), int(t.max()) + 1), PAD)
        for row in range(len(idx)):
            src[row, : s[row]] = torch.randint(4, vocab, (int(s[row]),), generator=g)
            tgt[row, : t[row] + 1] = torch.randint(4, vocab, (int(t[row]) + 1,), generator=g)
        result.append((src, tgt[:, :-1], tgt[:, 1:]))
    return result


def train_step(model, optimizer, batch, bf16: bool) -> None:
    src, tgt_in, tgt_out = batch
    with torch.autocast(src.device.type, dtype=torch.bfloat16, enabled=bf16):
        if isinstance(model, Transformer):  # as the Trainer runs it: output layer and loss in
            loss = projected_label_smoothed_cross_entropy(  # one pass, chunk by chunk
                model.features(src, tgt_in), model.output.weight, tgt_out, epsilon=0.1,
                ignore_index=PAD, reduction="mean")
        else:  # plain PyTorch: the logits, then F.cross_entropy
            loss = F.cross_entropy(model(src, tgt_in).float().flatten(0, 1), tgt_out.flatten(),
                                   ignore_index=PAD, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(preset: str, bf16: bool, steps: int, rounds: int, max_tokens: int,
            device: torch.device, profile: bool = False, **config_changes) -> dict[str, float]:
    """Target tokens/s of each model: the median over `rounds` passes over the same batches.

    The passes alternate between the models (which goes first alternates too), so that both
    see the same machine load; within a pass one model runs alone, as it would in training.
    """
    vocab = VOCAB[preset]
    config = ModelConfig.preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab,
                                **config_changes)
    batches = [tuple(t.to(device) for t in b)
               for b in make_batches(vocab, max_tokens, n_batches=steps)]
    tokens = sum(int((b[2] != PAD).sum()) for b in batches)
    runners = {}
    for name, build in (("transduce", Transformer), ("torch.nn.Transformer", TorchReference)):
        torch.manual_seed(0)
        model = build(config).to(device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        train_step(model, optimizer, batches[0], bf16)  # warm-up: allocator, kernels
        runners[name] = (model, optimizer)
    speeds: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(rounds):
        for name in (list(runners) if r % 2 == 0 else list(reversed(runners))):
            model, optimizer = runners[name]
            synchronize(device)
            start = time.perf_counter()
            for batch in batches:
                train_step(model, optimizer, batch, bf16)
            synchronize(device)
            speeds[name].append(tokens / (time.perf_counter() - start))
    if profile:  # where transduce's step spends its time, the operations that take the most
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        model, optimizer = runners["transduce"]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                               if device.type == "cuda" else [])
        with profiler(activities=activities) as prof:
            for batch in batches:
                train_step(model, optimizer, batch, bf16)
            synchronize(device)
        for key in ("self_cpu_time_total",
                    *(["self_cuda_time_total"] if device.type == "cuda" else [])):
            print(prof.key_averages().table(sort_by=key, row_limit=15), flush=True)
    return {name: statistics.median(values) for name, values in speeds.items()}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "base"], choices=sorted(VOCAB))
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"], help="bf16: under autocast")
    parser.add_argument("--steps", type=int, default=6, help="batches per timed pass")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes per model")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operations transduce's steps spend most time in")
    parser.add_argument("--pre-norm", action="store_true", help="LayerNorm before each sublayer")
    for name in ("dropout", "attention-dropout", "activation-dropout"):
        parser.add_argument(f"--{name}", type=float, help="instead of the preset's")
    args = parser.parse_args()
    changes = {"norm_first": True} if args.pre_norm else {}
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        if getattr(args, key) is not None:
            changes[key] = getattr(args, key)
    torch.set_num_threads(args.threads)
    where = (torch.cuda.get_device_name(args.device) if args.device.startswith("cuda")
             else f"{args.threads} threads")
    print(f"torch {torch.__version__}, {where}, ~{args.max_tokens} target "
          f"tokens/batch, median of {args.rounds} passes over {args.steps} batches; "
          "target tokens/s (higher is better)"
          f"{''.join(f', {k}={v}' for k, v in changes.items())}\n")
    print("| preset | vocab | precision | transduce | torch.nn.Transformer | ratio |")
    print("|---|---|---|---|---|---|")
    for preset in args.presets:
        for bf16 in [p == "bf16" for p in args.precisions]:
            r = measure(preset, bf16, args.steps, args.rounds, args.max_tokens,
                        torch.device(args.device), args.profile, **changes)
            ours, ref = r["transduce"], r["torch.nn.Transformer"]
            print(f"| {preset} | {VOCAB[preset]} | {'bf16 autocast' if bf16 else 'fp32'} | "
                  f"{ours:,.0f} | {ref:,.0f} | {ours / ref:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
