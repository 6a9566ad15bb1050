"""Decoding speed: transduce vs Hugging Face generate() and CTranslate2 on the same weights.

Part 1, a trained model (default runs/m30k-en-de) on the 1,000 Multi30k test2016 English
sentences, greedy and beam 5: target tokens/s, sentences/s, peak memory, and how many
translations each engine finds identical to its counterpart of ours (the length penalty form of
Hugging Face and CTranslate2, |y|^alpha, on both sides; the same maximum length). Beam search
runs with each side's default stopping rule (ours "early", generate()'s early_stopping=False)
and with the exhaustive one (ours "exact", generate()'s early_stopping="never"); ours also in
bfloat16, int8 (`--dtype int8`) and compiled (`--compile`: its first pass, which compiles,
is not timed; its seconds are shown), and through CTranslate2 (`--engine ctranslate2`:
`transduce-ct2`, in float32, and `transduce-ct2-int8`: our batches and results around its search).
Part 2, random weights at the `tiny` and `base` shapes, every output forced to 16 tokens, batch
64: the numbers of the issue's orientation table. The `opus-mt` shape is a random Hugging Face
`MarianMTModel` at Helsinki-NLP/opus-mt-en-de's real configuration (d_model 512, 6+6 layers,
swish, vocabulary 58,101) imported with `transduce import marian`: `generate()` runs the
original, CTranslate2 our export of the import. Every engine makes 17 decoder steps per
output there: ours 16 tokens and <eos>; Hugging Face's and CTranslate2's 17 tokens, their
length cap, with no <eos>. Target tokens/s count decoder steps (tokens and the <eos> that ends
an output where there is one), so the same work counts the same (until 2026-11-23 a phantom
<eos> was added to theirs: 18 for 17 steps, 6% in their favour).

Every engine runs in its own process (peak memory is per process), 2 threads, batches of 64
sentences sorted by length; `--searches N`: N batches at a time, each on threads/N threads (ours
on threads of their own as `translate --searches N` searches, CTranslate2's its inter_threads;
generate() one at a time). CTranslate2 runs twice: with its default matrix products (MKL on an
Intel CPU) and with oneDNN's (CT2_USE_MKL=0), since which is faster depends on the machine.
`--device cuda` runs every engine on the GPU instead (there the -onednn engines are the plain
ones, int8 is CTranslate2's alone, and the exports each engine needs are the only ones made:
a GPU machine may have no CTranslate2). Peak memory is the process's on the host.

    python benchmarks/decode_speed.py                       # both parts
    python benchmarks/decode_speed.py --part 2 --shapes tiny
    python benchmarks/decode_speed.py --part 1 --searches 2 --engines transduce-compiled ct2-fp32
    python benchmarks/decode_speed.py --part 2 --shapes opus-mt --engines transduce hf ct2-fp32
    python benchmarks/decode_speed.py --device cuda --engines transduce transduce-compiled hf
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))
ENGINES = ("transduce", "transduce-bf16", "transduce-int8", "transduce-compiled", "transduce-exact",
           "transduce-nocache", "transduce-ct2", "transduce-ct2-int8", "hf",
           "hf-never", "ct2-fp32", "ct2-int8", "ct2-fp32-onednn", "ct2-int8-onednn")
# which of ours each engine's translations are compared with
COUNTERPART = {"transduce-bf16": "transduce", "transduce-int8": "transduce",
               "transduce-compiled": "transduce",
               "transduce-exact": "transduce",
               "transduce-nocache": "transduce", "transduce-ct2": "transduce",
               "transduce-ct2-int8": "transduce", "hf": "transduce", "hf-never": "transduce-exact",
               "ct2-fp32": "transduce", "ct2-int8": "transduce", "ct2-fp32-onednn": "transduce",
               "ct2-int8-onednn": "transduce"}
EXHAUSTIVE = ("transduce-exact", "hf-never")  # the same as the others for greedy search
ONE_ENGINE = Path(__file__).with_name("decode_engine.py")  # each engine's run, a process each


def export(model, tokenizers, directory: Path, engines) -> None:
    """Our weights and config, and what `engines` read: the Hugging Face copy (Marian, or
    Pegasus for a pre-norm model; CTranslate2's converter reads it too), CTranslate2 fp32 and
    int8."""
    from dataclasses import asdict

    from transduce.export.ctranslate2 import save_ctranslate2
    from transduce.export.marian import save_huggingface
    from transduce.runs.checkpoint import save_weights
    directory.mkdir(parents=True, exist_ok=True)
    save_weights(model, directory / "model.safetensors")
    (directory / "model.json").write_text(json.dumps(asdict(model.config)))
    ct2 = any("ct2" in engine for engine in engines)
    if ct2 or any(engine.startswith("hf") for engine in engines):
        save_huggingface(model, tokenizers, directory / "hf")
    for quantization in ("fp32", "int8") if ct2 else ():
        save_ctranslate2(model, tokenizers, directory / f"ct2-{quantization}",
                         quantization=None if quantization == "fp32" else quantization,
                         hf_dir=directory / "hf")
    pieces = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
    (directory / "pieces.json").write_text(json.dumps(pieces))


def opus_mt(tmp: Path):
    """A random MarianMTModel at opus-mt-en-de's configuration, saved as the hub has it, and
    our import of it: (model, tokenizers, the original's directory)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.importers.opus_mt import make_opus_mt
    from transduce.importers.marian import import_marian
    from transduce.runs.load import load_run

    original = make_opus_mt(tmp / "opus-mt-original", d_model=512, layers=6, heads=8, d_ff=2048,
                            vocab_size=58101)
    run = load_run(import_marian(original, tmp / "opus-mt-run"))
    return run.model.eval(), run.tokenizers, original


def write_spec(directory: Path, name: str, sources: list, *, beam: int, forced: bool,
               max_len: int, alpha: float, device: str = "cpu", hf_dir: Path | None = None
               ) -> Path:
    """What decode_engine.py translates, and how: `directory`/`name`.json."""
    config = json.loads((directory / "model.json").read_text())
    spec = directory / f"{name}.json"
    spec.write_text(json.dumps({"sources": sources, "beam": beam, "forced": forced,
                                "max_len": max_len, "alpha": alpha,
                                "model_dir": str(directory), "device": device,
                                "hf_dir": str(hf_dir or directory / "hf"),
                                "pad": config["pad_id"], "bos": config["bos_id"],
                                "eos": config["eos_id"]}))
    return spec


def engine_command(engine: str, spec: Path, threads: int, searches: int) -> list[str]:
    """The command running one engine on a spec in a process of its own (decode_engine.py)."""
    return [sys.executable, str(ONE_ENGINE), engine, "--spec", str(spec),
            "--threads", str(threads), "--searches", str(searches)]


def run_engines(directory: Path, sources: list, *, beam: int, forced: bool, max_len: int,
                alpha: float, engines, threads: int, searches: int = 1, device: str = "cpu",
                hf_dir: Path | None = None) -> dict:
    """`sources` end with the model's <eos>; `hf_dir`: the model generate() runs, if not our
    export of it."""
    spec = write_spec(directory, f"spec-{beam}-{forced}", sources, beam=beam, forced=forced,
                      max_len=max_len, alpha=alpha, device=device, hf_dir=hf_dir)
    results = {}
    for engine in engines:
        if beam == 1 and engine in EXHAUSTIVE:
            continue
        done = subprocess.run(engine_command(engine, spec, threads, searches),
                              capture_output=True, text=True)
        if done.returncode:
            print(f"  {engine} failed: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            continue
        results[engine] = r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  {engine}, beam {beam}: {r['tokens'] / r['seconds']:,.0f} target tokens/s",
              file=sys.stderr, flush=True)  # as it comes: a run cut short keeps what it had
    return results


def table(title: str, results_by_search: dict, n: int, compare: bool = True) -> None:
    print(f"\n{title}\n")
    print("| engine | search | target tokens/s | sentences/s | peak memory | same as |")
    print("|---|---|---|---|---|---|")
    for search, results in results_by_search.items():
        for engine, r in results.items():
            ours = results.get(COUNTERPART.get(engine, ""), {}).get("outputs")
            same = (f"{sum(a == b for a, b in zip(ours, r['outputs'], strict=True)) / n:.1%} "
                    f"({COUNTERPART[engine]})" if ours and compare else "-")
            name = engine + (f" (after a {r['warmup']:.0f} s first pass)" if r.get("warmup")
                             else "")
            print(f"| {name} | {search} | {r['tokens'] / r['seconds']:,.0f} | "
                  f"{n / r['seconds']:,.1f} | {r['peak_mib']:,.0f} MiB | {same} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--part", type=int, choices=(1, 2), nargs="+", default=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=["tiny", "base"])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--searches", type=int, default=1,
                        help="batches searched at once, each on threads/N threads: ours on "
                             "threads of their own (`--searches`), CTranslate2's its "
                             "inter_threads (generate() one at a time)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where every engine runs")
    parser.add_argument("--max-len", type=int, default=64, help="part 1: output tokens at most")
    parser.add_argument("--alpha", type=float, default=0.6)
    args = parser.parse_args()

    import torch

    from transduce.decoding.translator import Translator
    from transduce.errors import UserError
    from transduce.model import ModelConfig, Transformer

    try:  # part 2 takes its tokenizers (the vocabulary's pieces) from it too
        translator = Translator.load(args.model, device="cpu")
    except UserError as error:
        parser.error(f"--model: {error} (a trained run directory, for either part: the "
                     "README's recipe makes runs/m30k-en-de)")
    tokenizers = translator.tokenizers
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [tokenizers.src.encode(line) + [3] for line in lines]
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else (
        f"{args.threads} threads, {args.searches} search{'es' * (args.searches > 1)} at once")
    print(f"torch {torch.__version__}, {where}; sources: {args.src} "
          f"({len(sources)} sentences)")
    with tempfile.TemporaryDirectory() as tmp:
        if 1 in args.part:
            export(translator.model, tokenizers, Path(tmp) / "trained", args.engines)
            results = {f"beam {k}" if k > 1 else "greedy": run_engines(
                Path(tmp) / "trained", sources, beam=k, forced=False, max_len=args.max_len,
                alpha=args.alpha, engines=args.engines, threads=args.threads,
                searches=args.searches, device=args.device) for k in (1, 5)}
            table(f"Part 1: trained model {args.model} ({translator.model.num_parameters():,} "
                  f"parameters), max {args.max_len} tokens, length penalty |y|^{args.alpha}",
                  results, len(sources))
        if 2 in args.part:
            for shape in args.shapes:
                torch.manual_seed(0)
                hf_dir = None
                subset = sources if shape == "tiny" else sources[:512]
                if shape == "opus-mt":
                    model, shape_tokenizers, hf_dir = opus_mt(Path(tmp))
                    # the same lengths; ids clear of Marian's specials (</s> 0, <unk> 1)
                    subset = [[t + 4 for t in s[:-1]] + [model.config.eos_id] for s in subset]
                else:
                    # the trained model's vocabularies, whatever their sizes: the exports
                    # write its tokenizers' pieces, which must be as many as the embeddings
                    model = Transformer(ModelConfig.preset(
                        shape, src_vocab_size=tokenizers.src.vocab_size,
                        tgt_vocab_size=tokenizers.tgt.vocab_size,
                        share_embeddings=tokenizers.shared)).eval()
                    shape_tokenizers = tokenizers
                export(model, shape_tokenizers, Path(tmp) / shape, args.engines)
                results = {f"beam {k}" if k > 1 else "greedy": run_engines(
                    Path(tmp) / shape, subset, beam=k, forced=True, max_len=16,
                    alpha=1.0, engines=[e for e in args.engines if e not in EXHAUSTIVE
                                        and (shape == "tiny" or e != "transduce-nocache")],
                    threads=args.threads, searches=args.searches, device=args.device,
                    hf_dir=hf_dir) for k in (1, 5)}
                table(f"Part 2: `{shape}` shape, random weights, every output 16 tokens, "
                      f"{len(subset)} sentences", results, len(subset), compare=False)


if __name__ == "__main__":
    main()
