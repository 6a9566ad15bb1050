"""One engine of benchmarks/decode_speed.py, in a process of its own (peak memory is per
process): translates the token-id lists of a spec that decode_speed.py writes and prints one
JSON line (seconds, target tokens, peak memory, outputs, the seconds of an untimed first pass).

    python benchmarks/decode_engine.py ENGINE --spec SPEC.json --threads 2 --searches 1
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def _peak_mib() -> float:
    """This process's peak resident memory. Not getrusage's ru_maxrss: Linux carries it over
    from the parent through fork and exec, so every child reported at least the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _batches(items: list, size: int):
    order = sorted(range(len(items)), key=lambda i: -len(items[i]))
    for start in range(0, len(order), size):
        yield order[start : start + size]


class _Pieces:
    """The part of a tokenizer that a CTranslate2Translator reads: the pieces of the ids."""

    def __init__(self, pieces: list[str]) -> None:
        self.all, self.vocab_size = pieces, len(pieces)

    def pieces(self, ids) -> list[str]:
        return [self.all[i] for i in ids]


def _for_batches(sources: list, searches: int, search) -> None:
    """search(batch) for every batch of 64 sorted sentences, `searches` at once on threads of
    their own with a share of the threads each (transduce.decoding.parallel), as `Translator`
    searches them with `searches=N`."""
    batches = list(_batches(sources, 64))
    if searches == 1:
        for batch in batches:
            search(batch)
        return
    from transduce.decoding.parallel import at_once
    for _ in at_once(lambda batch, tell: search(batch), batches, searches):
        pass


def child(args) -> None:
    """Translate the token-id lists of args.inputs with one engine; print a JSON result."""
    import torch
    torch.set_num_threads(args.threads)
    spec = json.loads(Path(args.spec).read_text())
    sources = spec["sources"]  # token ids, <eos> included
    k, forced = spec["beam"], spec["forced"]
    max_len, alpha = spec["max_len"], spec["alpha"]
    min_len = max_len if forced else 1
    outputs: list = [None] * len(sources)
    warmup = None  # seconds of an untimed first pass (compiling), where there is one
    model_dir = Path(spec["model_dir"])
    device = spec["device"]
    pad, bos, eos = spec["pad"], spec["bos"], spec["eos"]
    start = time.perf_counter()
    if args.engine.startswith("transduce-ct2"):  # ours, through CTranslate2 (--engine)
        from transduce import runtime
        runtime.tune()
        from transduce.decoding.config import DecodeConfig
        from transduce.decoding.parallel import threads_each
        from transduce.engines.ctranslate2 import (  # its backend first
            CTranslate2Translator,
            leave_cpu_to_ctranslate2,
        )
        from transduce.model import ModelConfig, Transformer
        from transduce.runs.checkpoint import load_weights
        intra = threads_each(args.searches)  # as CTranslate2Translator.load shares them
        leave_cpu_to_ctranslate2()
        import ctranslate2  # after the engine's module, which picks CTranslate2's backend
        model = Transformer(ModelConfig(**json.loads((model_dir / "model.json").read_text())))
        load_weights(model, model_dir / "model.safetensors")
        pieces = _Pieces(json.loads((model_dir / "pieces.json").read_text()))
        translator = CTranslate2Translator(
            model, argparse.Namespace(src=pieces, tgt=pieces),
            engine=ctranslate2.Translator(
                str(model_dir / "ct2-fp32"), device=device,
                intra_threads=intra, inter_threads=args.searches,
                compute_type="int8" if args.engine.endswith("int8") else "float32"))
        decode = DecodeConfig(beam_size=k, length_penalty=alpha, length_normalization="power",
                              stopping="finished", max_len_a=0, max_len_b=max_len,
                              min_len=min_len)  # CTranslate2's own stopping rule

        def search(batch) -> None:
            found = translator.search_batch([sources[i] for i in batch], decode)
            for i, hyps in zip(batch, found, strict=True):
                outputs[i] = list(hyps[0].tokens)

        if device != "cpu":  # a GPU's start-up (cuBLAS's) on a first batch, not timed
            search(next(_batches(sources, 64)))
        start = time.perf_counter()
        _for_batches(sources, args.searches, search)
    elif args.engine.startswith("transduce"):
        from transduce import runtime
        runtime.tune()  # as the transduce command does, before the first tensor
        from transduce.decoding.beam import beam_search
        from transduce.decoding.config import DecodeConfig
        from transduce.decoding.greedy import greedy_search
        from transduce.model import ModelConfig, Transformer
        from transduce.runs.checkpoint import load_weights
        from transduce.runs.int8 import load_int8
        model = Transformer(ModelConfig(**json.loads((model_dir / "model.json").read_text())))
        if args.engine == "transduce-int8":  # from the int8 copy, as `--dtype int8` loads it
            load_int8(model, model_dir / "model.safetensors")
        else:
            load_weights(model, model_dir / "model.safetensors")
        model.eval().to(device)
        if args.engine == "transduce-bf16":
            model = model.to(torch.bfloat16)
        use_cache = args.engine != "transduce-nocache"
        stopping = "exact" if args.engine == "transduce-exact" else "early"
        if args.engine == "transduce-compiled":  # on a GPU, CUDA graphs
            from transduce.decoding.graphed import compile_for
            model = compile_for(model, torch.device(device))

        def search(batch) -> None:
            width = max(len(sources[i]) for i in batch)
            src = torch.tensor([sources[i] + [pad] * (width - len(sources[i]))
                                for i in batch], device=device)
            decode = DecodeConfig(beam_size=k, length_penalty=alpha,
                                  length_normalization="power", stopping=stopping,
                                  max_len_a=0, max_len_b=max_len, min_len=min_len)
            if k == 1:
                result = greedy_search(model, src, decode, use_cache=use_cache)
            else:
                result = [list(h[0].tokens) for h in beam_search(
                    model, src, decode, use_cache=use_cache)]
            for i, out in zip(batch, result, strict=True):
                outputs[i] = out

        def translate_all() -> None:
            _for_batches(sources, args.searches, search)

        if args.engine == "transduce-compiled":  # compiling: a pass of its own, not timed
            start = time.perf_counter()
            translate_all()
            warmup = time.perf_counter() - start
        elif device != "cpu":  # a GPU's start-up (cuBLAS's) on a first batch, not timed
            search(next(_batches(sources, 64)))
        start = time.perf_counter()
        translate_all()
    elif args.engine.startswith("hf"):
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained(spec["hf_dir"]).eval().to(device)
        if device != "cpu":  # a GPU's start-up (cuBLAS's), not timed
            with torch.no_grad():
                model.generate(input_ids=torch.tensor([sources[0]], device=device),
                               max_new_tokens=2, decoder_start_token_id=bos,
                               eos_token_id=eos, pad_token_id=pad)
        start = time.perf_counter()
        for batch in _batches(sources, 64):
            width = max(len(sources[i]) for i in batch)
            src = torch.tensor([sources[i] + [pad] * (width - len(sources[i])) for i in batch],
                               device=device)
            with torch.no_grad():
                generated = model.generate(
                    input_ids=src, attention_mask=(src != pad).long(), num_beams=k,
                    do_sample=False, max_new_tokens=max_len + 1, min_new_tokens=min_len + 1
                    if forced else 1, length_penalty=alpha,
                    early_stopping="never" if args.engine == "hf-never" else False,
                    suppress_tokens=sorted({pad, bos}), decoder_start_token_id=bos,
                    eos_token_id=eos, pad_token_id=pad)
            for i, row in zip(batch, generated.tolist(), strict=True):
                outputs[i] = [t for t in row[1:] if t not in (pad, eos)]
    else:
        if args.engine.endswith("-onednn"):
            # CTranslate2's matrix products on oneDNN instead of MKL: on a 2-core Xeon MKL's
            # took 3.7x longer with 2 threads than with 1 (greedy), oneDNN's scale
            os.environ["CT2_USE_MKL"] = "0"
        import ctranslate2
        quantization = args.engine.split("-")[1]
        translator = ctranslate2.Translator(str(model_dir / f"ct2-{quantization}"),
                                            device=device,
                                            intra_threads=max(1, args.threads // args.searches),
                                            inter_threads=args.searches)
        pieces = json.loads((model_dir / "pieces.json").read_text())
        index = {p: i for i, p in enumerate(pieces)}
        if device != "cpu":  # a GPU's start-up (cuBLAS's) on a first batch, not timed
            translator.translate_batch([[pieces[t] for t in sources[i]]
                                        for i in next(_batches(sources, 64))], beam_size=k)
        start = time.perf_counter()
        # every batch handed over at once (asynchronous): CTranslate2 searches `inter_threads`
        # of them at a time, one a replica of the model
        pending = [(batch, translator.translate_batch(
            [[pieces[t] for t in sources[i]] for i in batch], beam_size=k,
            max_decoding_length=max_len + 1, min_decoding_length=min_len + 1
            if forced else 1, length_penalty=alpha, max_batch_size=64, asynchronous=True))
            for batch in _batches(sources, 64)]
        for batch, results in pending:
            for i, r in zip(batch, results, strict=True):
                outputs[i] = [index[p] for p in r.result().hypotheses[0]]
    seconds = time.perf_counter() - start
    peak = _peak_mib()
    # target tokens are decoder steps: each output's tokens and the <eos> ending it. Outputs are
    # without <eos>, and one of max_len + 1 tokens (Hugging Face and CTranslate2 forced to their
    # cap: 17 tokens where ours make 16 and <eos>, in as many steps) had none
    tokens = sum(min(len(o) + 1, max_len + 1) for o in outputs)
    print(json.dumps({"seconds": seconds, "tokens": tokens, "peak_mib": peak,
                      "outputs": outputs, "warmup": warmup}))


def main() -> None:
    from decode_speed import ENGINES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=ENGINES)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--searches", type=int, default=1)
    child(parser.parse_args())


if __name__ == "__main__":
    main()
