"""Continuous batching: a model's searches stepped on a thread shared by a server's models
(`Stepper`), requests' sentences joining them between steps
(`transduce.decoding.continuous.ContinuousSearch`).

A request that arrives during a search no longer waits for the search to end: its sentences join
at the next step (one search per kind of search asked for: settings, n-best, attention; those
alive are stepped in turn), within a budget of source tokens searched at once and, if set, of
sentences; a sentence leaves as soon as it is finished, and a request is answered when its last
sentence is, or leaves at the next step if its request is cancelled (a client gone, a timeout).
Each sentence gets what it gets alone, so what `transduce translate` gives. The event loop only
queues sentences and resolves futures; the searching never blocks it.
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
from transduce.decoding.parallel import enter_search
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
    `max_sentences`: sentences searched at once at most (0: as many as `max_tokens` allows);
    the others wait, in order of arrival, for sentences to leave. A step's time grows with its
    sentences and every sentence takes all its steps, so a long sentence's wait is its length
    times a full batch's step: fewer at once keep that tail short, and on a CPU cost little
    throughput (benchmarks/serve.md).
    `on_step(sentences, source tokens, seconds, finished translations)` is told of each step.
    `stepper`: the thread that steps the searches, shared by a server's models (`Stepper`);
    else the batcher's own."""

    def __init__(self, translator: Translator, *, max_tokens: int = 4096, max_sentences: int = 0,
                 on_step: Callable[[int, int, float, list], None] | None = None,
                 stepper: Stepper | None = None) -> None:
        self.translator = translator
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.on_step = on_step
        self.stepper = stepper or Stepper()
        self._ids = itertools.count()
        # on the stepping thread only:
        self._searches: dict[Search, ContinuousSearch] = {}
        self._waiting: deque[tuple[_Job, int]] = deque()  # sentences not in a search yet
        self._owners: dict[int, tuple[_Job, int, list[int]]] = {}  # sentence id -> its place
        self._stopping = False
        self._stopped = threading.Event()  # set on the stepping thread once stop()'s job is done

    def start(self) -> None:
        self._stopping = False
        self._stopped.clear()
        self.stepper.add(self)

    async def stop(self) -> None:
        """Once what is queued is translated."""
        if self.stepper.takes(self):
            self.stepper.put(self, None)
            await asyncio.get_running_loop().run_in_executor(None, self._stopped.wait)
            await self.stepper.remove(self)

    async def translate(self, sentences: list[str], search: Search,
                        prefixes: list[str] | None = None,
                        terms: list[list[str]] | None = None) -> list[Translation]:
        """The translations of `sentences`, in order (each starting with its prefix and
        holding its terms, if given). Cancelling the await (a client gone, a timeout) keeps its
        sentences that have not joined a search yet from joining, and takes those that have out
        at the next step."""
        if not self.stepper.takes(self):
            raise RuntimeError("ContinuousBatcher.start() was not called")
        loop = asyncio.get_running_loop()
        job = _Job(sentences, search, loop.create_future(), loop,
                   [None] * len(sentences), len(sentences), prefixes, terms)
        self.stepper.put(self, job)
        return await job.future

    # -- on the stepping thread -----------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self._waiting) or any(s.active for s in self._searches.values())

    def _receive(self, job: _Job | None) -> None:
        """Queue a newly arrived job's sentences (None: stop() was called)."""
        if job is None:
            self._stopping = True
            return
        for at in range(len(job.sentences)):
            self._waiting.append((job, at))

    def _advance(self) -> None:
        """Waiting sentences join, then one step of each search; stop()'s wait ends once it was
        called and nothing is left."""
        try:
            self._drop_cancelled()
            self._admit()
            for search_of in list(self._searches):
                if self._searches[search_of].active:
                    self._step(search_of, self._searches[search_of])
        except Exception as error:  # noqa: BLE001 - a bug: its requests answer with it,
            log.exception("the search failed")  # and the thread goes on for the next
            for job, _, _ in self._owners.values():
                _reject_soon(job, error)
            for job, _ in self._waiting:
                _reject_soon(job, error)
            self._searches.clear()
            self._waiting.clear()
            self._owners.clear()
        if self._stopping and not self.busy:
            self._stopped.set()

    def _step(self, search_of: Search, search: ContinuousSearch) -> None:
        """One step of a search; its finished sentences answered."""
        start = time.perf_counter()
        searched, tokens = search.active, search.tokens
        finished = search.step()
        done = []
        greedy = search_of.decode.beam_size == 1  # as the Translator's: no score
        for sentence_id, hypotheses in finished:
            job, at, source = self._owners.pop(sentence_id)
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

    def _drop_cancelled(self) -> None:
        """The sentences of requests cancelled (a client gone, a timeout) leave their searches:
        no step is spent on a translation nobody waits for."""
        gone = {i for i, (job, _, _) in self._owners.items() if job.future.done()}
        if gone:
            for search in self._searches.values():
                search.drop(gone)
            for i in gone:
                del self._owners[i]

    def _admit(self) -> None:
        """Waiting sentences join their searches, in order of arrival, while the source tokens
        searched at once stay within max_tokens (a search with none takes one anyway) and the
        sentences within max_sentences."""
        waiting, searches = self._waiting, self._searches
        joining: dict[Search, list] = {}
        held = sum(s.tokens for s in searches.values())
        room = (self.max_sentences - sum(s.active for s in searches.values())
                if self.max_sentences else len(waiting))
        while waiting and room > 0:
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
            room -= 1
            sentence_id = next(self._ids)
            self._owners[sentence_id] = (job, at, source)
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


class Stepper:
    """One thread stepping the searches of several continuous batchers (a server's models) in
    turn: PyTorch's CPU operations run on the OpenMP threads of the thread that calls them, and
    two threads' teams on the same CPUs make each wait for the other's sleeping threads
    (`transduce.runtime.in_passing_thread`). It starts with its first batcher and ends when its
    last is stopped. `threads`: its thread's PyTorch CPU threads (0: as PyTorch gives a new
    thread); `search`: which of several at once it is (`enter_search`)."""

    def __init__(self, threads: int = 0, search: int = 0) -> None:
        self.threads = threads
        self.search = search
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()  # (batcher, job | None)
        self._batchers: list[ContinuousBatcher] = []
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, batcher: ContinuousBatcher) -> None:
        with self._lock:
            self._batchers.append(batcher)
            if self._thread is None:  # a thread and an inbox of its own
                self._inbox = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._run, args=(self._inbox,),
                                                name="transduce-search", daemon=True)
                self._thread.start()

    def takes(self, batcher: ContinuousBatcher) -> bool:
        return batcher in self._batchers

    def put(self, batcher: ContinuousBatcher, job: _Job | None) -> None:
        self._inbox.put((batcher, job))

    async def remove(self, batcher: ContinuousBatcher) -> None:
        """`batcher` leaves (stopped, nothing left); the thread ends with the last one."""
        with self._lock:
            self._batchers.remove(batcher)
            if self._batchers:
                return
            thread, self._thread = self._thread, None
            self._inbox.put(None)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)

    def _run(self, inbox: queue.SimpleQueue) -> None:
        enter_search(self.search, self.threads)
        while True:
            block = not any(b.busy for b in list(self._batchers))
            while True:
                try:
                    message = inbox.get(block=block)
                except queue.Empty:
                    break
                if message is None:
                    return
                block = False
                batcher, job = message
                batcher._receive(job)
            for batcher in list(self._batchers):
                batcher._advance()


def _resolve(future: asyncio.Future, translations: list[Translation]) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(translations)


def _reject_soon(job: _Job, error: Exception) -> None:
    job.loop.call_soon_threadsafe(_reject, job.future, error)


def _reject(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
