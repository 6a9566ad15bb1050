"""Where a beam search's time goes, by part of the search loop: the wall time spent in each of
the functions below (wrapped to time their calls), as a share of a pass over the sources in
batches of a server's size (32 sentences, 160 beam rows at beam 5), after a first pass that
compiles. Compiled by default (what `serve` runs); `--eager` for the model's own steps.

The parts: the decoder step (`_decode`: the compiled graph, or the eager step), the log-softmax
around it (`log_probs` less `_decode`), ranking the extensions (`extend`: the top-k of each
beam's tokens, then of the sentence's), choosing the beams that go on (`Extensions.going_on`)
and the finished ones (`Extensions.ends`, `sentences_done`), moving the cache's rows
(`DecoderSteps.reorder_beams`, also when sentences leave), finished sentences leaving
(`DecoderSteps.select`, the reorder_beams it calls included; `compacting_order`), and making a
batch's steps (the encoder and the cross-attention caches).

    python benchmarks/beam_parts.py --model runs/m30k-serve          # one thread
    python benchmarks/beam_parts.py --model runs/m30k-serve --eager --threads 2
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from loop_parts import Parts

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32, help="sentences a batch")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--passes", type=int, default=3, help="timed passes")
    parser.add_argument("--eager", action="store_true", help="the model's own (eager) steps")
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import dataclasses

    import torch

    import transduce.decoding.beam as beam
    from transduce.decoding.compiled import Compiled, CompiledSteps
    from transduce.decoding.translator import Translator
    from transduce.model.steps import DecoderSteps

    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu", compile=False)
    model = translator.model if args.eager else Compiled(translator.model)
    config = model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.sentences]
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    decode = dataclasses.replace(translator.decode, beam_size=args.beam)

    parts = Parts()
    step = "the eager step (_decode)" if args.eager else "the compiled graph (_decode)"
    parts.timed(DecoderSteps if args.eager else CompiledSteps, "_decode", step)
    softmax = "the log-softmax (log_probs less _decode)"
    parts.timed(DecoderSteps, "log_probs", softmax)  # the step subtracted after each pass
    parts.timed(type(model), "steps", "a batch's steps: encoder, caches (steps)")
    parts.timed(beam, "extend", "ranking the extensions (extend)")
    parts.timed(beam.Extensions, "going_on", "the beams going on (going_on)")
    parts.timed(beam.Extensions, "ends", "finished hypotheses (ends)")
    parts.timed(beam, "sentences_done", "finished sentences (sentences_done)")
    parts.timed(DecoderSteps, "reorder_beams", "cache rows moved (reorder_beams)")
    parts.timed(DecoderSteps, "select", "sentences leave (select, with its reorder_beams)")
    parts.timed(beam, "compacting_order", "which sentences stay (compacting_order)")

    def one_pass() -> int:
        tokens = 0
        for start in range(0, len(sources), args.batch):
            batch = sources[start : start + args.batch]
            width = max(map(len, batch))
            src = torch.tensor([s + [config.pad_id] * (width - len(s)) for s in batch])
            tokens += sum(len(best[0].tokens) + 1 for best in beam.beam_search(model, src, decode))
        return tokens

    one_pass()  # compiles
    print(f"{args.model}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{'eager' if args.eager else 'compiled'}, beam {args.beam}, {len(sources)} "
          f"sentences in batches of {args.batch}")
    for n in range(args.passes):
        parts.clear()
        start = time.perf_counter()
        tokens = one_pass()
        took = time.perf_counter() - start
        parts.seconds[softmax] -= parts.seconds[step]
        print(f"\npass {n + 1}: {took:.3f} s, {tokens / took:,.0f} target tokens/s, "
              f"{len(sources) / took:.1f} sentences/s\n")
        print(parts.table(took))


if __name__ == "__main__":
    main()
