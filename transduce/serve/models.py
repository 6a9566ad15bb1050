"""The models a server translates with, each a language pair read from its run directory."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from transduce.decoding.continuous import ContinuousSearch
from transduce.decoding.parallel import enter_search
from transduce.decoding.translator import Translator
from transduce.engines import engine as engines
from transduce.errors import UserError
from transduce.runs.checkpoint import model_checkpoint
from transduce.runs.load import read_config
from transduce.runtime import in_passing_thread

log = logging.getLogger("transduce.serve")


@dataclass(frozen=True)
class ModelSpec:
    """`--model RUN_DIR` or `--model en:de=RUN_DIR`: a run and the pair it serves."""

    run_dir: Path
    source: str | None = None  # None: the run's data.src_lang
    target: str | None = None  # None: the run's data.tgt_lang

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        match = re.fullmatch(r"([A-Za-z][\w-]*):([A-Za-z][\w-]*)=(.+)", text)
        if match:
            return cls(Path(match[3]), match[1].lower(), match[2].lower())
        return cls(Path(text))

    def pairs(self) -> dict[tuple[str, str], str | None]:
        """The (source, target) codes it serves, each with the target language it asks the
        run for (a multilingual run's; None for a run of one target, whatever the pair calls
        it): the given pair, else the run's data.src_lang to each of its target languages. A
        multilingual run's given target must be one of its languages."""
        data = read_config(self.run_dir).data
        targets = [t.lower() for t in data.target_languages]
        if self.source and self.target:
            if data.languages_tagged and self.target not in targets:
                raise UserError(f"--model {self.source}:{self.target}={self.run_dir}: the run "
                                f"translates into {', '.join(targets)}")
            targets = [self.target]
        source = self.source or data.src_lang.lower()
        return {(source, t): t if data.languages_tagged else None for t in targets}


@dataclass
class ServedModel:
    source: str
    target: str
    translator: Translator
    run_dir: Path | None = None

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"


def check_specs(specs: list[ModelSpec]) -> dict[tuple[str, str], tuple[ModelSpec, str | None]]:
    """Each spec's pairs (with the target language each asks for), one model per pair, each a
    run with a checkpoint: what can be known without loading a model (and is, before starting
    worker processes)."""
    if not specs:
        raise UserError("serve needs at least one --model RUN_DIR")
    pairs: dict[tuple[str, str], tuple[ModelSpec, str | None]] = {}
    for spec in specs:
        for pair, tgt_lang in spec.pairs().items():
            if pair in pairs:
                raise UserError(f"--model {spec.run_dir}: {pair[0]}:{pair[1]} is served by "
                                f"{pairs[pair][0].run_dir} already; name another pair with "
                                f"--model SRC:TGT={spec.run_dir}")
            pairs[pair] = spec, tgt_lang
        model_checkpoint(spec.run_dir)
    return pairs


def load_models(specs: list[ModelSpec], *, device: str = "auto",
                dtype: str = "float32", compile: bool = False,
                engine: str = "transduce", continuous: bool = False,
                searches: int = 1, threads: int = 0) -> list[ServedModel]:
    """Each spec's model, loaded as `transduce translate --model RUN_DIR` loads it (the same
    checkpoint and search settings); one model per pair, a multilingual run's loaded once for
    all its pairs. Loaded and warmed (compiled: the search of batches, or with `continuous`,
    that of continuous batching) on a thread that ends once they are
    (`transduce.runtime.in_passing_thread`), so that the server's search threads are the only
    ones left with PyTorch's CPU threads. `searches` at once (`serve --searches`, each of
    `threads` CPU threads; 0: the caller's): CTranslate2's `inter_threads`; transduce's
    compiled search is warmed for each search, its own copy of the compiled steps
    (`enter_search`), on `threads`, as its searches will run: Dynamo's guards hold the thread
    count a graph was compiled at, and compile it again at another."""
    return in_passing_thread(_load_models, specs, device=device, dtype=dtype, compile=compile,
                             engine=engine, continuous=continuous, searches=searches,
                             threads=threads)


def _load_models(specs: list[ModelSpec], *, device: str, dtype: str, compile: bool,
                 engine: str, continuous: bool, searches: int, threads: int
                 ) -> list[ServedModel]:
    models, loaded = [], {}
    for pair, (spec, tgt_lang) in check_specs(specs).items():
        if spec in loaded:  # another pair of a multilingual run: its model, another language
            translator = loaded[spec].into(tgt_lang)
        else:
            translator = loaded[spec] = engines.load(
                spec.run_dir, engine=engine, device=device, dtype=dtype, compile=compile,
                tgt_lang=tgt_lang, **({"searches": searches} if engine == "ctranslate2" else {}))
            for search in range(searches if compile else 0):  # each search's own copy
                enter_search(search, threads)
                warm(translator, spec.run_dir, continuous)
        models.append(ServedModel(*pair, translator, spec.run_dir))
        log.info("serving %s:%s from %s", *pair, spec.run_dir)
    return models


def warm(translator: Translator, run_dir: Path, continuous: bool = False) -> None:
    """Compile the search a request runs by default (the run's settings) before the server
    counts as up, so that no client waits for it: a batch of one sentence and one of two
    (Dynamo compiles a graph of its own for a single source; one more serves every other
    batch: transduce.decoding.compiled); with `continuous` (continuous batching) the same
    before any sentence has joined a search and after, each state brought about by sentences
    joining and leaving (`ContinuousSearch.drop`; none ends on its own in the four steps:
    `min_len`, which the graphs do not depend on), whatever the model translates them to. A
    request with other settings (another beam size, sampling) compiles its own graphs when it
    first comes."""
    start = time.perf_counter()
    if continuous:
        sources = [translator.encode_source(s) for s in
                   ("the compiled search warms up", "on a search", "as sentences join")]
        decode = replace(translator.decode, min_len=max(translator.decode.min_len, 5))
        search = ContinuousSearch(translator.model, decode)
        search.join(sources[:2], [0, 1])
        search.step()  # two sources
        search.drop({1})
        search.step()  # one
        search.join(sources[2:], [2])
        search.step()  # two, one of which joined
        search.drop({2})
        search.step()  # one, after a join
    else:
        for batch in (["the compiled search warms up"], ["on a batch", "of two sentences"]):
            translator.translate(batch)
    log.info("compiled the search of %s in %.0f s", run_dir, time.perf_counter() - start)


def language_name(code: str) -> str:
    """The English name of an ISO 639 code ("de" -> "German"), or the code if unknown."""
    try:
        from babel import Locale

        return Locale("en").languages.get(code.replace("-", "_"), code)
    except ImportError:  # pragma: no cover - babel comes with transduce[serve]
        return code
