"""CTranslate2 as the engine of a `Translator` (`--engine ctranslate2`).

The run's checkpoint is exported once (transduce.export.ctranslate2) into a directory beside its
weights, remade when the weights change, as the int8 copy is (transduce.runs.int8):

    RUN/checkpoints/NAME/model.safetensors   the weights
    RUN/checkpoints/NAME/ctranslate2/        their CTranslate2 model (float32; `--dtype int8` or
                                             bfloat16 convert it as it loads)

Its `translate_batch` searches each batch, with the settings CTranslate2 has: the beam size, the
n-best, the length penalty in its form (|y|^alpha: `length_normalization: power`), its stopping
rule (`stopping: finished`: done once beam-size hypotheses have finished, its patience 1;
without a length penalty it stops sooner, once its best candidate ends: the same best, where the
rest of an n-best may differ), sampling (temperature, top-k, top-p; not seeded), forced
prefixes, the minimum length, and the output length limit, which CTranslate2 takes per batch
(the batch's longest a * length + b). What it has not is refused in one line: GNMT's length
normalisation and the `early` and `exact` stopping rules in a beam search, `renormalize`,
glossaries, ensembles, `--compile`. The rest is the `Translator`'s: batching, results, and what
is teacher-forced on the run's own model (attention, alignments, scores).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from transduce import runtime
from transduce.decoding.beam import Hypothesis, length_penalty
from transduce.decoding.config import DTYPES, DecodeConfig, Sampling
from transduce.decoding.parallel import check_searches, threads_each
from transduce.decoding.steps import max_output_lengths
from transduce.decoding.translator import Translator
from transduce.errors import UserError
from transduce.kernels import transposed
from transduce.runs.load import load_run
from transduce.runtime import resolve_device

log = logging.getLogger(__name__)

# CTranslate2's matrix products on oneDNN unless the user says otherwise (CT2_USE_MKL=1), read as
# ctranslate2 is first imported: on a 2-core Intel Xeon with AMX its MKL ones ran our trained
# `tiny` model 5x slower (greedy) and 2.3x (beam 5) with 2 threads; on AMD EPYCs the two are
# within 16% either way (docs/speed.md)
os.environ.setdefault("CT2_USE_MKL", "0")

DIRECTORY = "ctranslate2"  # beside the checkpoint's weights
MADE_FROM = "made_from"  # in it: the size and time of the weights it was made from


class CTranslate2Translator(Translator):
    """A Translator whose searches are CTranslate2's."""

    def __init__(self, model, tokenizers, decode=None, *, prefix: str = "", data=None,
                 searches: int = 1, engine=None) -> None:
        super().__init__(model, tokenizers, decode, prefix=prefix, data=data, searches=searches)
        self.engine = engine  # a ctranslate2.Translator
        self._src_pieces = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
        self._tgt_pieces = tokenizers.tgt.pieces(range(tokenizers.tgt.vocab_size))
        self._tgt_ids = {piece: i for i, piece in enumerate(self._tgt_pieces)}

    @classmethod
    def load(cls, model_dir: str | Path | Sequence[str | Path], *, device: str = "auto",
             checkpoint: str | Path | Sequence[str | Path] | None = None,
             dtype: str = "float32", compile: bool = False,
             tgt_lang: str | None = None, searches: int = 1) -> CTranslate2Translator:
        """As `Translator.load`, the run's model searched by CTranslate2 (on `device`, in
        `dtype`: its compute type; `searches` at once: its `inter_threads`, each with an equal
        share of the CPU threads, its `intra_threads`)."""
        runtime.tune()
        if not isinstance(model_dir, str | Path):
            if len(model_dir) != 1:
                raise UserError("--engine ctranslate2 runs one model: CTranslate2 has no "
                                "ensembles (use --engine transduce)")
            [model_dir] = model_dir
        if compile:
            raise UserError("--compile is transduce's own engine: CTranslate2 needs none")
        if dtype not in DTYPES:
            raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if not isinstance(checkpoint, str | Path | None):
            [checkpoint] = checkpoint
        try:
            import ctranslate2
        except ImportError:
            raise UserError("--engine ctranslate2 needs ctranslate2 and transformers: pip "
                            "install 'transduce[export]'") from None
        place = resolve_device(str(device), setting="device")
        kind = "cuda" if place.type == "cuda" else "cpu"
        searches = check_searches(searches, place)
        threads = threads_each(searches) if kind == "cpu" else 0  # PyTorch's, shared out
        if kind == "cpu":
            leave_cpu_to_ctranslate2()
        compute = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
                   "int8": "int8" if kind == "cpu" else "int8_float16"}[dtype]
        supported = sorted(ctranslate2.get_supported_compute_types(kind))
        if compute not in supported:
            raise UserError(f"--dtype {dtype}: CTranslate2 cannot compute in {compute} on this "
                            f"{kind} (it can in {', '.join(supported)})")
        run = load_run(Path(model_dir), checkpoint)
        exported = export_once(run.model, run.tokenizers, run.weights)
        engine = ctranslate2.Translator(
            str(exported), device=kind, device_index=place.index or 0, compute_type=compute,
            intra_threads=threads, inter_threads=searches)
        data = run.config.data
        model = transposed.store_where_it_pays(run.model.to(place), place, "float32")  # as ours
        return cls(model, run.tokenizers, run.config.decode,
                   prefix=data.language_prefix(tgt_lang), data=data, searches=searches,
                   engine=engine)

    def check_search(self, decode: DecodeConfig, sampling: Sampling | None = None) -> None:
        check_settings(decode, sampling, None)

    def search_batch(self, sources: list[list[int]], decode: DecodeConfig, *, nbest: int = 1,
                     sampling: Sampling | None = None,
                     generator: torch.Generator | None = None,
                     prefixes: list[list[int]] | None = None,
                     constraints: list[list[list[int]]] | None = None,
                     on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                     ) -> list[list[Hypothesis]]:
        check_settings(decode, sampling, constraints)
        lengths = torch.tensor([len(s) for s in sources])
        limits = max_output_lengths(lengths, decode, self.model.config.max_positions)
        if prefixes:
            limits = torch.maximum(limits, torch.tensor([len(p) for p in prefixes]))
        options = dict(max_decoding_length=int(limits.max()), min_decoding_length=decode.min_len,
                       max_input_length=0, return_scores=True)
        if prefixes and any(prefixes):
            options["target_prefix"] = [[self._tgt_pieces[t] for t in p] or None
                                        for p in prefixes]
        if sampling is not None:
            options.update(beam_size=1, sampling_topk=sampling.top_k,
                           sampling_topp=sampling.top_p,
                           sampling_temperature=sampling.temperature)
        else:
            options.update(beam_size=decode.beam_size, num_hypotheses=nbest, patience=1,
                           length_penalty=decode.length_penalty
                           if decode.length_normalization == "power" else 0.0)
        results = self.engine.translate_batch(
            [[self._src_pieces[t] for t in s] for s in sources], **options)
        scored = sampling is None and (decode.beam_size > 1 or nbest > 1)
        found = []
        for i, result in enumerate(results):
            hypotheses = []
            for pieces, score in zip(result.hypotheses, result.scores, strict=True):
                tokens = tuple(self._tgt_ids[p] for p in pieces)
                if not scored:
                    hypotheses.append(Hypothesis(0.0, 0.0, tokens))
                    continue
                # CTranslate2's score: log p over (|y| + 1)^alpha, <eos> counted (power)
                penalty = length_penalty(len(tokens) + 1, decode.length_penalty, "power") \
                    if decode.length_normalization == "power" else 1.0
                hypotheses.append(Hypothesis(score, score * penalty, tokens))
            found.append(hypotheses)
            if on_done is not None:
                on_done(i, hypotheses)
        return found


def leave_cpu_to_ctranslate2() -> int:
    """PyTorch's threads down to one, before its thread pool starts (the run's model is loaded
    and, for attention and scores, run by PyTorch): once PyTorch's OpenMP pool of 2 threads was
    up, CTranslate2's searches on a 2-core CPU took 6x as long (its own OpenMP runtime's threads
    and PyTorch's, on the same cores). Returns the threads PyTorch had, CTranslate2's now."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return threads


def check_settings(decode: DecodeConfig, sampling: Sampling | None,
                   constraints: list[list[list[int]]] | None) -> None:
    """A UserError naming the first setting CTranslate2's search cannot follow."""
    if sampling is not None and sampling.seed is not None:
        raise UserError("--engine ctranslate2 draws from a generator of its own, which a seed "
                        "cannot set for one call: no --seed (use --engine transduce)")
    if constraints and any(constraints):
        raise UserError("--engine ctranslate2 takes no glossary: CTranslate2 has no lexically "
                        "constrained search (use --engine transduce)")
    if decode.renormalize:
        raise UserError("--engine ctranslate2 cannot renormalize the scores over the tokens a "
                        "step allows (decode.renormalize): use --engine transduce")
    if decode.beam_size == 1 or sampling is not None:
        return
    power = (decode.length_normalization == "power" or decode.length_penalty == 0)
    if not power or decode.stopping != "finished":
        needs = [] if power else [
            f"--length-normalization power (and a --length-penalty for it; the run's is "
            f"{decode.length_penalty:g} for gnmt) or --length-penalty 0"]
        if decode.stopping != "finished":
            needs.append(f"--stopping finished (--stopping {decode.stopping} is transduce's)")
        raise UserError("--engine ctranslate2 divides scores by |y|^alpha, not by GNMT's "
                        "((5 + |y|) / 6)^alpha, and stops a beam search once it holds "
                        "beam-size finished hypotheses: pass " + " and ".join(needs))


def export_once(model: torch.nn.Module, tokenizers, weights: Path) -> Path:
    """The CTranslate2 model of `model` (float32, on the CPU), whose weights are the file
    `weights`: beside it, exported now unless it was from these weights already; where the run
    cannot be written, in a temporary directory."""
    from transduce.export.ctranslate2 import save_ctranslate2

    target = Path(weights).with_name(DIRECTORY)
    source = _fingerprint(weights)
    if _made_from(target) == source:
        return target
    log.info("exporting %s to CTranslate2 (once, into %s)", weights, target)
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{DIRECTORY}-", dir=target.parent))
    except OSError as error:
        work = Path(tempfile.mkdtemp(prefix="transduce-ctranslate2-"))
        log.warning("could not write beside %s (%s): exported into %s for this process",
                    weights, error.strerror or error, work)
        save_ctranslate2(model, tokenizers, work / DIRECTORY)
        return work / DIRECTORY
    try:
        save_ctranslate2(model, tokenizers, work / DIRECTORY)
        (work / DIRECTORY / MADE_FROM).write_text(source)
        old = work / "old"
        if target.exists():
            os.replace(target, old)
        os.replace(work / DIRECTORY, target)
    except OSError:
        if _made_from(target) != source:  # not another process's export of the same weights
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _fingerprint(weights: Path) -> str:
    stat = Path(weights).stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _made_from(directory: Path) -> str | None:
    try:
        return (directory / MADE_FROM).read_text()
    except OSError:
        return None
