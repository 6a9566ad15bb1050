"""Translate text with a trained model: `Translator.load(run_dir).translate(sentences)`."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from transduce import runtime
from transduce.data.config import DataConfig
from transduce.data.tokenizer import Tokenizers, WordTokenizer
from transduce.decoding.alignment import align, default_layer, words_of
from transduce.decoding.beam import Hypothesis
from transduce.decoding.compiled import Compiled
from transduce.decoding.config import DTYPES, FIELDS, DecodeConfig, Sampling
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.glossary import Glossary
from transduce.decoding.graphed import compile_for
from transduce.decoding.parallel import at_once, check_searches
from transduce.decoding.scoring import PairScore, score
from transduce.decoding.search import search
from transduce.decoding.searchable import Searchable
from transduce.errors import UserError
from transduce.kernels import transposed
from transduce.runs.load import load_run
from transduce.runtime import native_bf16, resolve_device

log = logging.getLogger(__name__)


@dataclass
class Translation:
    """One source sentence's result: n-best (text, score), best first."""

    source: str
    nbest: list[tuple[str, float]]
    src_pieces: list[str] | None = None
    tgt_pieces: list[str] | None = None  # of the best, ending with <eos>
    attention: Tensor | None = None  # cross-attention of the best: (layers, heads, T, S)
    length: int = 0  # target tokens of the best, <eos> not counted
    scores: PairScore | None = None  # the best's tokens' log-probabilities, as tgt_pieces

    @property
    def text(self) -> str:
        return self.nbest[0][0] if self.nbest else ""


class Translator:
    """A model with its tokenizers and search settings."""

    def __init__(self, model: Searchable, tokenizers: Tokenizers,
                 decode: DecodeConfig | None = None, *, prefix: str = "",
                 data: DataConfig | None = None, searches: int = 1) -> None:
        self.model = model.eval()
        self.tokenizers = tokenizers
        self.decode = decode or DecodeConfig()
        self.prefix = prefix  # before every source: a multilingual model's <2de>
        self.data = data  # the run's data section: its target languages
        self.searches = searches  # batches searched at once (transduce.decoding.parallel)

    @classmethod
    def load(cls, model_dir: str | Path | Sequence[str | Path], *, device: str = "auto",
             checkpoint: str | Path | Sequence[str | Path] | None = None,
             dtype: str = "float32", compile: bool = False,
             tgt_lang: str | None = None, searches: int = 1) -> Translator:
        """The model of a run directory: its averaged checkpoint if any, else its best.

        tgt_lang: the language to translate into, for a model of several (trained with
        language tokens, `data.corpora`); a model of one may be given its own or nothing.

        Several run directories: an ensemble of their models, which must share one tokenizer;
        each next token's probability is the mean of theirs, and the decoding settings are the
        first directory's. `checkpoint` (one per directory for an ensemble) overrides the choice.

        dtype: "float32", or "bfloat16" / "float16" to decode with the weights and activations
        in 16 bits: faster where the hardware multiplies them natively (GPUs, CPUs with
        AVX512-BF16 or AMX) and the matrices are large enough (`base`, not `tiny`:
        docs/speed.md); a few translations may differ from float32.
        "int8" (CPU only): the linear layers in int8 with activations quantized per row on the
        fly (`transduce.kernels.int8`), the rest in float32; its weights come from the
        checkpoint's int8 copy, made and saved beside it on first use (`transduce.runs.int8`).
        Faster where the matrix products dominate (docs/speed.md); a few translations differ.

        compile: run the searches' decoder steps compiled (`transduce.decoding.compiled`; on a
        GPU CUDA graphs, `.graphed`): the same translations, less overhead a step (compiling first).

        searches: on a CPU, how many batches `translate` searches at once, each on a thread of its
        own with an equal share of PyTorch's CPU threads (`transduce.decoding.parallel`; 0: one a
        thread): more sentences a second over a file on a small model, each batch slower.
        """
        runtime.tune()
        if dtype not in DTYPES:
            raise UserError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if compile and dtype == "int8":  # checked here, before any model is read
            raise UserError("compile and dtype int8 do not go together: torch.compile cannot "
                            "look inside the int8 layers' fbgemm kernels; choose one")
        many = not isinstance(model_dir, str | Path)
        dirs = [Path(d) for d in model_dir] if many else [Path(model_dir)]
        if not dirs:
            raise UserError("no model directory given")
        if checkpoint is None:
            checkpoints = [None] * len(dirs)
        else:
            checkpoints = [checkpoint] if isinstance(checkpoint, str | Path) else list(checkpoint)
        if len(checkpoints) != len(dirs):
            raise UserError(f"{len(checkpoints)} checkpoints for {len(dirs)} model directories")
        device = resolve_device(str(device), setting="device")
        searches = check_searches(searches, device)
        if dtype == "int8" and device.type != "cpu":
            raise UserError(f"dtype int8 runs on the CPU, not {device.type}: use float16 or "
                            "bfloat16 there")
        runs = [load_run(d, c, int8=dtype == "int8")
                for d, c in zip(dirs, checkpoints, strict=True)]
        decode, tokenizers, data = runs[0].config.decode, runs[0].tokenizers, runs[0].config.data
        for d, run in zip(dirs[1:], runs[1:], strict=True):
            if run.tokenizers.fingerprint != tokenizers.fingerprint:
                raise UserError(f"{d}: its tokenizer is not {dirs[0]}'s; the models of an "
                                "ensemble need one vocabulary")
        models = [compile_for(run.model, device) if compile else run.model for run in runs]
        model = models[0] if len(models) == 1 else Ensemble(models)
        if dtype == "bfloat16" and not native_bf16(device):
            log.warning("dtype bfloat16: this %s has no native bf16 (AVX512-BF16, AMX or a bf16 "
                        "GPU), so it is emulated and decoding runs slower than in float32",
                        device.type)
        weights = torch.float32 if dtype == "int8" else getattr(torch, dtype)  # int8: the rest
        model = transposed.store_where_it_pays(model.to(device, weights), device, dtype)
        return cls(model, tokenizers, decode, prefix=data.language_prefix(tgt_lang), data=data,
                   searches=searches)

    def into(self, tgt_lang: str | None) -> Translator:
        """This translator, translating into `tgt_lang` (a multilingual model's languages);
        the same model (and engine), not a copy."""
        translator = copy.copy(self)
        translator.prefix = self.data.language_prefix(tgt_lang) if self.data is not None else ""
        return translator

    def compiled(self) -> Translator:
        """This translator, its searches' decoder steps compiled (`Compiled`; `Graphed` on a
        GPU), as `load(..., compile=True)` gives it; the same weights, not a copy."""
        if isinstance(self.model, Compiled | Ensemble):
            raise ValueError("compile a translator of one model, loaded uncompiled")
        translator = copy.copy(self)
        translator.model = compile_for(self.model, next(self.model.parameters()).device)
        return translator

    def decode_config(self, **settings) -> DecodeConfig:
        """This translator's search settings with `settings` (DecodeConfig's fields; None keeps
        a setting) replaced; an unknown name is a UserError listing the fields."""
        unknown = settings.keys() - FIELDS
        if unknown:
            raise UserError(f"unknown search setting {', '.join(sorted(unknown))}; the settings "
                            f"are {', '.join(FIELDS)}")
        return replace(self.decode, **{k: v for k, v in settings.items() if v is not None})

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def translate(self, sentences: Iterable[str], **options) -> list[str]:
        """Detokenized best translations, one per sentence (options: see `translate_detailed`)."""
        return [t.text for t in self.translate_detailed(sentences, **options)]

    def translate_detailed(self, sentences: Iterable[str], *, nbest: int = 1,
                           sampling: Sampling | None = None, prefixes: list[str] | None = None,
                           glossary: Glossary | None = None,
                           terms: list[list[str]] | None = None,
                           attention: bool = False, scores: bool = False,
                           progress: bool = False,
                           on_translation: Callable[[int, Translation], None] | None = None,
                           **decode) -> list[Translation]:
        """Translations with n-best scores, and optionally the cross-attention of the best.

        `decode`: search settings, any field of `DecodeConfig` (beam_size, length_penalty,
        renormalize, ...; None keeps the model's), over the model's own `self.decode`.
        Sentences are batched by `max_tokens` source tokens, longest first, and returned in
        input order. An empty sentence gives an empty translation. Beam size 1 is greedy search;
        `sampling` draws (temperature, top-k, top-p; its seed for the same draws again) instead
        of searching. `prefixes` force the start of each translation. `glossary`: the target
        terms of the source terms each sentence holds must appear in its translations, and
        `terms` (one list per sentence) too (lexically constrained beam search, even with a beam
        of 1: transduce.decoding.constraints). `on_translation(i,
        translation)` is told of each sentence's as soon as it is known (before the rest of its
        batch, whose search goes on), on the calling thread even where `self.searches` batches
        are searched at once on threads of their own (`transduce.decoding.parallel`; sampling
        with a seed searches one at a time: its draws come from one generator, in batch order).
        `scores`: each best translation's tokens' log-probabilities (`Translation.scores`, its
        confidence), teacher-forced.
        """
        decode = self.decode_config(**decode)
        drawing = sampling is not None
        if nbest < 1 or (nbest > decode.beam_size and not drawing) or (nbest > 1 and drawing):
            raise UserError(f"nbest={nbest}: between 1 and the beam size ({decode.beam_size}); "
                            "sampling draws 1")
        sentences = list(sentences)
        sources = [self.encode_source(s, i) for i, s in enumerate(sentences)]
        forced = [self.encode_prefix(p) for p in prefixes] if prefixes else None
        if forced is not None and len(forced) != len(sentences):
            raise UserError(f"{len(prefixes)} prefixes for {len(sentences)} sentences")
        constraints = self.constraints(sentences, glossary, terms)
        generator = None  # one for all batches: the draws of a seed do not depend on batching
        if sampling is not None and sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        results: list[Translation | None] = [None] * len(sentences)
        todo = [i for i, s in enumerate(sentences) if s.strip()]
        searched = set(todo)
        bar = tqdm(total=len(todo), unit="sent", disable=not progress)

        def told(i: int) -> None:  # on the caller's thread
            if on_translation is not None:
                on_translation(i, results[i])
            if i in searched:
                bar.update(1)

        def search(batch: list[int], tell: Callable[[int], None]) -> None:
            def finish(i: int, hyps: list[Hypothesis]) -> None:
                results[i] = self.result(sentences[i], sources[i], hyps, attention,
                                         decode if scores else None)
                tell(i)

            outputs = self.search_batch(
                [sources[i] for i in batch], decode, nbest=nbest, sampling=sampling,
                generator=generator, prefixes=[forced[i] for i in batch] if forced else None,
                constraints=[constraints[i] for i in batch] if constraints else None,
                on_done=(lambda j, hyps: finish(batch[j], hyps)) if on_translation is not None
                else None)
            for i, hyps in zip(batch, outputs, strict=True):
                if results[i] is None:  # not told of already
                    finish(i, hyps)

        for i in sorted(set(range(len(sentences))) - searched):
            results[i] = Translation(sentences[i], [("", 0.0)])
            told(i)
        batches = list(self._batches(todo, sources, decode.max_tokens))
        # a seed's draws come from one generator in batch order: one search at a time
        searches = 1 if generator is not None else min(self.searches, len(batches))
        try:
            if searches > 1:
                for i in at_once(search, batches, searches):
                    told(i)
            else:
                for batch in batches:
                    search(batch, told)
        finally:
            bar.close()
        return results

    def check_search(self, decode: DecodeConfig, sampling: Sampling | None = None) -> None:
        """A UserError where this translator's engine cannot search as `decode` (and
        `sampling`) say; transduce's own search can, always."""

    def search_batch(self, sources: list[list[int]], decode: DecodeConfig, *, nbest: int = 1,
                     sampling: Sampling | None = None,
                     generator: torch.Generator | None = None,
                     prefixes: list[list[int]] | None = None,
                     constraints: list[list[list[int]]] | None = None,
                     on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                     ) -> list[list[Hypothesis]]:
        """One batch's search (`sources`: token ids, <eos> included): transduce's own,
        `transduce.decoding.search.search`; another engine's in a subclass
        (transduce.engines)."""
        return search(self.model, self._pad(sources), decode, nbest=nbest, sampling=sampling,
                      generator=generator, prefixes=prefixes, constraints=constraints,
                      on_done=on_done)

    def score(self, sentences: Iterable[str], translations: Iterable[str], *,
              progress: bool = False, **decode) -> list[PairScore]:
        """How probable the model finds each translation of its sentence: its tokens'
        log-probabilities and its score as the search ranks it (`decode`: the length penalty,
        its form, renormalize, max_tokens, over the model's own), batched as `translate`
        batches, in input order. The search's best translation scores the search's score."""
        decode = self.decode_config(**decode)
        sentences, translations = list(sentences), list(translations)
        if len(sentences) != len(translations):
            raise UserError(f"{len(translations)} translations for {len(sentences)} sentences")
        sources = [self.encode_source(s, i) for i, s in enumerate(sentences)]
        limit = self.model.config.max_positions - 1  # with <bos>, or <eos>, the positions'
        targets = []
        for i, text in enumerate(translations):
            ids = self.tokenizers.tgt.encode(text)
            if len(ids) > limit - 1:
                log.warning("line %d: a translation of %d tokens, scored on its first %d",
                            i + 1, len(ids), limit - 1)
            targets.append(ids[: limit - 1])
        results: list[PairScore | None] = [None] * len(sentences)
        bar = tqdm(total=len(sentences), unit="pair", disable=not progress)
        for batch in self._batches(list(range(len(sentences))), sources, decode.max_tokens):
            found = score(self.model, self._pad([sources[i] for i in batch]),
                          [targets[i] for i in batch], decode)
            for i, result in zip(batch, found, strict=True):
                results[i] = result
            bar.update(len(batch))
        bar.close()
        return results

    def alignments(self, translation: Translation,
                   layer: int | None = None) -> list[tuple[int, int]]:
        """Word alignments (source word, target word) of a translation made with
        `attention=True`, from its cross-attention in `layer` (default: the penultimate;
        transduce.decoding.alignment says why)."""
        if translation.attention is None:
            if translation.length == 0:  # an empty translation: nothing to align
                return []
            raise ValueError("alignments need the translation's attention: translate with "
                             "attention=True")
        layers = translation.attention.shape[0]
        chosen = default_layer(layers) if layer is None else layer % layers
        src_subwords = not isinstance(self.tokenizers.src, WordTokenizer)
        tgt_subwords = not isinstance(self.tokenizers.tgt, WordTokenizer)
        skip = len(self.tokenizers.src.encode(self.prefix)) if self.prefix else 0
        sentence = translation.src_pieces[skip:-1]  # the user's: no language token, no <eos>
        src_words = [None] * skip + words_of(sentence, src_subwords) + [None]
        tgt_words = words_of(translation.tgt_pieces[:-1], tgt_subwords) + [None]
        return align(translation.attention[chosen].mean(dim=0), src_words, tgt_words)

    def fits(self, sentence: str) -> bool:
        """Whether `sentence` is within the model's source length (a longer one is truncated,
        with a warning: cut it first, as `transduce.documents.layout.Splitter` does)."""
        return len(self.encode(sentence)) <= self.model.config.max_positions - 1

    def encode_source(self, sentence: str, index: int = 0) -> list[int]:
        """A sentence's source token ids, <eos> included (truncated to the model's length, with a
        warning naming line `index` + 1)."""
        ids = self.encode(sentence)
        limit = self.model.config.max_positions - 1  # room for <eos>
        if len(ids) > limit:
            log.warning("line %d: %d tokens, truncated to the model's %d", index + 1, len(ids),
                        limit)
            ids = ids[:limit]
        return [*ids, self.model.config.eos_id]

    def constraints(self, sentences: list[str], glossary: Glossary | None = None,
                    terms: list[list[str]] | None = None) -> list[list[list[int]]] | None:
        """Each sentence's target terms as token ids: those of `glossary` whose source term it
        holds, then its own `terms`; None where there are none at all."""
        if terms is not None and len(terms) != len(sentences):
            raise UserError(f"{len(terms)} lists of terms for {len(sentences)} sentences")
        wanted = [(glossary.terms(s) if glossary else []) + list(terms[i] if terms else [])
                  for i, s in enumerate(sentences)]
        if not any(wanted):
            return None
        return [[self.tokenizers.tgt.encode(t) for t in ts] for ts in wanted]

    def encode_prefix(self, prefix: str) -> list[int]:
        """A target prefix's token ids, which the translation is made to start with ("": none)."""
        return self.tokenizers.tgt.encode(prefix) if prefix else []

    def encode(self, sentence: str) -> list[int]:
        """A sentence's source token ids as the model reads them (after a multilingual model's
        language token), without <eos> and untruncated."""
        return self.tokenizers.src.encode(f"{self.prefix} {sentence}" if self.prefix
                                          else sentence)

    @staticmethod
    def _batches(todo: list[int], sources: list[list[int]], max_tokens: int) -> Iterator[list]:
        order = sorted(todo, key=lambda i: -len(sources[i]))
        batch: list[int] = []
        for i in order:
            width = len(sources[batch[0]]) if batch else len(sources[i])
            if batch and (len(batch) + 1) * width > max_tokens:
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def _pad(self, rows: list[list[int]]) -> Tensor:
        width = max(map(len, rows))
        pad = self.model.config.pad_id
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)

    def result(self, sentence: str, source: list[int], hyps: list[Hypothesis],
               attention: bool = False, score_with: DecodeConfig | None = None) -> Translation:
        """The Translation of `sentence` (source ids `source`) from its search's hypotheses,
        best first; with `attention`, the best's cross-attention (teacher-forced); with
        `score_with` (the search's settings), its tokens' log-probabilities under them."""
        decode = self.tokenizers.tgt.decode
        result = Translation(sentence, [(decode(h.tokens), h.score) for h in hyps],
                             length=len(hyps[0].tokens) if hyps else 0)
        if score_with is not None and hyps:
            src = torch.tensor([source], device=self.device)
            [result.scores] = score(self.model, src, [list(hyps[0].tokens)], score_with)
            result.tgt_pieces = [*self.tokenizers.tgt.pieces(hyps[0].tokens), "<eos>"]
        if attention and hyps:
            best = list(hyps[0].tokens)
            config = self.model.config
            src = torch.tensor([source], device=self.device)
            tgt = torch.tensor([[config.bos_id, *best]], device=self.device)
            with torch.no_grad():
                memory = self.model.encode(src)
                _, weights = self.model.decode_with_attention(tgt, memory, None)
            result.attention = weights[:, 0].float().cpu()  # (L, H, T, S)
            result.src_pieces = self.tokenizers.src.pieces(source)
            result.tgt_pieces = [*self.tokenizers.tgt.pieces(best), "<eos>"]
        return result
