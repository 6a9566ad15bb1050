"""Continuous batching: one model's searches stepped on a thread of their own, requests'
sentences joining them between steps (`transduce.decoding.continuous.ContinuousSearch`).

A request that arrives during a search no longer waits for the search to end: its sentences join
at the next step (one search per kind of search asked for: settings, n-best, attention; those
alive are stepped in turn), within a budget of source tokens searched at once; a sentence leaves
as soon as it is finished, and a request is answered when its last sentence is. Each sentence
gets what it gets alone, so what `transduce translate` gives. The event loop only queues
sentences and resolves futures; the searching never blocks it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from transduce.decoding.beam import Hypothesis
from transduce.decoding.continuous import ContinuousSearch
from transduce.decoding.translator import Translation, Translator
from transduce.serve.batcher import Search

log = logging.getLogger("transduce.serve")


@dataclass
class _Job:
    sentences: list[str]
    search: Search
    future: asyncio.Future = field(repr=False)
    loop: asyncio.AbstractEventLoop = field(repr=False)
    answers: list = field(default_factory=list, repr=False)
    missing: int = 0
    prefixes: list[str] | None = None  # each sentence's forced start of its translation
    terms: list[list[str]] | None = None  # each sentence's target terms (a glossary's)

    def answer(self, at: int, translation: Translation) -> None:  # on the search thread
        self.answers[at] = translation
        self.missing -= 1
        if not self.missing:
            self.loop.call_soon_threadsafe(_resolve, self.future, self.answers)


class ContinuousBatcher:
    """As `Batcher` (start, translate, stop), with sentences joining searches between steps.
    `on_step(sentences, source tokens, seconds, finished translations)` is told of each step."""

    def __init__(self, translator: Translator, *, max_tokens: int = 4096,
                 on_step: Callable[[int, int, float, list], None] | None = None) -> None:
        self.translator = translator
        self.max_tokens = max_tokens
        self.on_step = on_step
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="transduce-search", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Once what is queued is translated."""
        if self._thread is not None:
            self._inbox.put(None)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None

    async def translate(self, sentences: list[str], search: Search,
                        prefixes: list[str] | None = None,
                        terms: list[list[str]] | None = None) -> list[Translation]:
        """The translations of `sentences`, in order (each starting with its prefix and
        holding its terms, if given). Cancelling the await (a client gone, a timeout) keeps its
        sentences that have not joined a search yet from joining."""
        if self._thread is None:
            raise RuntimeError("ContinuousBatcher.start() was not called")
        loop = asyncio.get_running_loop()
        job = _Job(sentences, search, loop.create_future(), loop,
                   [None] * len(sentences), len(sentences), prefixes, terms)
        self._inbox.put(job)
        return await job.future

    # -- the search thread ----------------------------------------------------------------------

    def _run(self) -> None:
        searches: dict[Search, ContinuousSearch] = {}
        waiting: deque[tuple[_Job, int]] = deque()  # sentences not in a search yet, in order
        owners: dict[int, tuple[_Job, int, list[int]]] = {}  # sentence id -> where it goes
        stopping = False
        while True:
            busy = waiting or any(s.active for s in searches.values())
            stopping |= self._receive(waiting, block=not busy and not stopping)
            if stopping and not waiting and not any(s.active for s in searches.values()):
                return
            try:
                self._admit(waiting, searches, owners)
                for search_of in list(searches):
                    if searches[search_of].active:
                        self._step(search_of, searches[search_of], owners)
            except Exception as error:  # noqa: BLE001 - a bug: its requests answer with it,
                log.exception("the search failed")  # and the thread goes on for the next
                for job, _, _ in owners.values():
                    _reject_soon(job, error)
                for job, _ in waiting:
                    _reject_soon(job, error)
                searches.clear()
                waiting.clear()
                owners.clear()

    def _step(self, search_of: Search, search: ContinuousSearch, owners: dict) -> None:
        """One step of a search; its finished sentences answered."""
        start = time.perf_counter()
        searched, tokens = search.active, search.tokens
        finished = search.step()
        done = []
        greedy = search_of.decode.beam_size == 1  # as the Translator's: no score
        for sentence_id, hypotheses in finished:
            job, at, source = owners.pop(sentence_id)
            if greedy:
                hypotheses = [Hypothesis(0.0, 0.0, h.tokens) for h in hypotheses]
            try:
                translation = self.translator.result(
                    job.sentences[at], source, hypotheses, search_of.attention,
                    search_of.decode if search_of.scores else None)
            except Exception as error:  # noqa: BLE001 - a bug: this request answers with it
                log.exception("a translation failed")
                _reject_soon(job, error)
                continue
            job.answer(at, translation)
            done.append(translation)
        if self.on_step is not None:
            self.on_step(searched, tokens, time.perf_counter() - start, done)

    def _receive(self, waiting: deque, block: bool) -> bool:
        """Queue the sentences of newly arrived jobs (waiting for one when `block`); returns
        whether stop() was called."""
        stopping = False
        while True:
            try:
                job = self._inbox.get(block=block)
            except queue.Empty:
                return stopping
            block = False
            if job is None:
                stopping = True
                continue
            for at in range(len(job.sentences)):
                waiting.append((job, at))

    def _admit(self, waiting: deque, searches: dict, owners: dict) -> None:
        """Waiting sentences join their searches, in order of arrival, while the source tokens
        searched at once stay within max_tokens (a search with none takes one anyway)."""
        joining: dict[Search, list] = {}
        held = sum(s.tokens for s in searches.values())
        while waiting:
            job, at = waiting[0]
            if job.future.done():  # cancelled: its client is gone or timed out
                waiting.popleft()
                continue
            sentence = job.sentences[at]
            if not sentence.strip():  # nothing to search: as the Translator answers it
                waiting.popleft()
                job.answer(at, Translation(sentence, [("", 0.0)]))
                continue
            source = self.translator.encode_source(sentence)
            alone = held == 0 and not joining
            if held + len(source) > self.max_tokens and not alone:
                break
            waiting.popleft()
            held += len(source)
            sentence_id = next(self._ids)
            owners[sentence_id] = (job, at, source)
            forced = self.translator.encode_prefix(job.prefixes[at] if job.prefixes else "")
            wanted = self.translator.constraints([sentence], terms=[job.terms[at]]) \
                if job.terms else None
            joining.setdefault(job.search, []).append(
                (sentence_id, source, forced, wanted[0] if wanted else []))
        for search_of, sentences in joining.items():
            if search_of not in searches:
                decode = search_of.decode
                searches[search_of] = ContinuousSearch(self.translator.model, decode,
                                                       search_of.nbest)
            ids, sources, forced, constraints = zip(*sentences, strict=True)
            searches[search_of].join(list(sources), list(ids), list(forced), list(constraints))


def _resolve(future: asyncio.Future, translations: list[Translation]) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(translations)


def _reject_soon(job: _Job, error: Exception) -> None:
    job.loop.call_soon_threadsafe(_reject, job.future, error)


def _reject(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
