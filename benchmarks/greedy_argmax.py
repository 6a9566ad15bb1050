"""Compiled greedy search with each step's argmax in two stages (transduce.decoding.ranking, what
the compiled greedy block takes) against torch's own argmax inside the same graph, paired in one
process on one thread.

The trained run's model is loaded twice (as `Translator.load` gives it); one copy searches with
the product's compiled greedy block, the other with the same block compiled from the same code
but `logits.argmax(dim=1)`. Both search the test2016 sentences (sorted by length, `--batch` a
batch; the first `--sentences` only for batches of one), a pass each after a first pass each
(which compiles), and each round's ratio of their seconds (torch's / two stages: above 1, the
two stages are the faster), the median, and how many outputs are the same tokens.

    python benchmarks/greedy_argmax.py --model runs/m30k-en-de --batch 16 64
    python benchmarks/greedy_argmax.py --model runs/m30k-en-de --batch 1 --sentences 300
"""

from __future__ import annotations

import argparse
import functools
import types
import weakref
from pathlib import Path

from decode_engine import _batches
from decode_speed import SHARED
from engines_in_turn import _ours, in_turn, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=None, help="the first N only")
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=64, help="output tokens at most")
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import torch

    from transduce import kernels
    from transduce.decoding import compiled
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.translator import Translator
    from transduce.model.static_cache import StaticStorage, bucket

    torch.set_num_threads(1)
    compiled._configure()
    # the product's greedy block, its argmax torch's own
    block = types.FunctionType(compiled._greedy.__code__, {
        **compiled._greedy.__globals__, "argmax": lambda x: x.argmax(dim=1)})

    def greedy(model, inputs, memory, src_mask, cache, never, eos_bias):
        return block(model, inputs, memory, src_mask, cache, never, eos_bias, 2)

    torch_block = torch.compile(greedy, dynamic=True, options=compiled.INDUCTOR_OPTIONS)

    class TorchArgmaxSteps(compiled.CompiledSteps):
        def greedy(self, eos_bias):  # `CompiledSteps.greedy`, the other graph
            if len(eos_bias) != 2:
                raise ValueError("blocks of 2 tokens, as compiled.CompiledSteps's")
            self.cache.read(self._window(bucket(self._position + 1)))
            if self.cache.layers[0].self_attention.keys is None:
                self._start()
            self._position += 2
            tokens, self.inputs = torch_block(
                self.model, self.inputs.detach(), self.memory.detach(),
                self.src_mask.detach(), self.cache, self._never, eos_bias)
            return tokens

    class TorchArgmax(compiled.Compiled):
        def steps(self, src, *, use_cache=True):
            storage = self._free.pop() if self._free else StaticStorage()
            steps = TorchArgmaxSteps(self.model, src, storage)
            weakref.finalize(steps, self._free.append, storage)
            return steps

    models = {"torch": TorchArgmax(Translator.load(args.model, device="cpu").model),
              "two stages": compiled.Compiled(Translator.load(args.model, device="cpu").model)}
    translator = Translator.load(args.model, device="cpu")
    config = translator.model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()[:args.sentences]
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    decode = DecodeConfig(beam_size=1, max_len_a=0, max_len_b=args.max_len, min_len=1)
    print(f"torch {torch.__version__}, kernel path {kernels.path()}, one thread; {args.model} "
          f"on {args.src} ({len(sources)} sentences)\n")
    print("| batch | torch's argmax tokens/s | two stages tokens/s | torch's / two stages "
          "seconds, each round | median | same outputs |")
    print("|---|---|---|---|---|---|")
    for size in args.batch:
        batches = list(_batches(sources, size))
        first, seconds = in_turn({name: functools.partial(_ours, m, decode, sources, batches)
                                  for name, m in models.items()}, args.rounds)
        print(row(str(size), first, seconds, args.max_len, ("two stages", "torch")), flush=True)


if __name__ == "__main__":
    main()
