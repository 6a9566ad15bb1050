"""Sentences of requests that arrive together, searched as one batch.

Each model has one queue and one worker task. The worker takes the first waiting request, then
gathers the others that ask for the same search (settings, n-best, attention) until the token
budget is full or `wait` seconds have passed since it began, and runs the search on a thread of
its own, so that the event loop goes on accepting requests meanwhile; requests that came during
a search are the next batch. A request is answered as soon as its own sentences are translated,
without waiting for the longest sentence of its batch. The Translator's results do not depend on
which sentences share a batch, so every request gets exactly what it would get alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from transduce.decoding.config import DecodeConfig
from transduce.decoding.parallel import enter_search
from transduce.decoding.translator import Translation, Translator


@dataclass(frozen=True)
class Search:
    """What a request asks the search for; requests are batched with others asking the same."""

    decode: DecodeConfig
    nbest: int = 1
    attention: bool = False
    scores: bool = False  # the best's tokens' log-probabilities (teacher-forced)


@dataclass
class _Job:
    sentences: list[str]
    search: Search
    tokens: int
    future: asyncio.Future = field(repr=False)
    prefixes: list[str] | None = None  # each sentence's forced start of its translation
    terms: list[list[str]] | None = None  # each sentence's target terms (a glossary's)
    answers: list = field(default_factory=list, repr=False)  # filled as the search goes
    missing: int = 0  # answers still to come


class Batcher:
    """Batches one model's requests. `start()` in the running event loop, `translate()` from
    request handlers, `stop()` once no more requests come (what is queued is finished first).

    max_tokens: the source tokens of one batch at most (a longer request goes alone); wait:
    seconds to wait for more requests once one is there; batching=False serves the requests one
    at a time, as they come. `on_batch(sentences, source tokens, seconds, translations)` is told
    of each search.
    """

    def __init__(self, translator: Translator, *, max_tokens: int = 4096, wait: float = 0.005,
                 batching: bool = True,
                 on_batch: Callable[[int, int, float, list], None] | None = None,
                 thread: ThreadPoolExecutor | None = None) -> None:
        self.translator = translator
        self.max_tokens = max_tokens
        self.wait = wait
        self.batching = batching
        self.on_batch = on_batch
        # the thread searching: one for every model of a server (`thread`, its owner's), else
        # the batcher's own
        self._owned = thread is None
        self._executor = thread or search_thread()
        self._queue: asyncio.Queue[_Job | None] | None = None
        self._worker: asyncio.Task | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker is not None:
            await self._queue.put(None)  # after every job already queued
            await self._worker
            self._worker = None
        if self._owned:
            self._executor.shutdown(wait=True)

    def tokens(self, sentence: str) -> int:
        """A sentence's source tokens, <eos> included, as the model will see them."""
        return len(self.translator.encode(sentence)) + 1

    async def translate(self, sentences: list[str], search: Search,
                        prefixes: list[str] | None = None,
                        terms: list[list[str]] | None = None) -> list[Translation]:
        """The translations of `sentences`, in order (each starting with its prefix and
        holding its terms, if given). Cancelling the await (a client gone, a timeout) takes the
        request out of the batches not yet begun."""
        if self._queue is None:
            raise RuntimeError("Batcher.start() was not called in this event loop")
        future = asyncio.get_running_loop().create_future()
        tokens = sum(map(self.tokens, sentences))
        await self._queue.put(_Job(sentences, search, tokens, future, prefixes, terms))
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        held: list[_Job] = []  # taken from the queue, waiting for a batch of their own search
        stopping = False
        while not (stopping and not held):
            if held:
                first = held.pop(0)
            else:
                first = await self._queue.get()
                if first is None:
                    stopping = True
                    continue
            if first.future.done():  # cancelled: its client is gone or timed out
                continue
            batch, tokens = [first], first.tokens
            if self.batching:
                stopping |= await self._gather(batch, held, tokens, loop.time() + self.wait)
            await self._search(batch, first.search)

    async def _gather(self, batch: list[_Job], held: list[_Job], tokens: int,
                      deadline: float) -> bool:
        """Add to `batch` the held and queued jobs of its search that fit; returns whether the
        queue has ended (stop() was called)."""
        search = batch[0].search
        for job in list(held):
            if job.search == search and tokens + job.tokens <= self.max_tokens:
                held.remove(job)
                batch.append(job)
                tokens += job.tokens
        while tokens < self.max_tokens:
            try:
                if self._queue.empty():
                    remaining = deadline - asyncio.get_running_loop().time()
                    if remaining <= 0:
                        break
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                else:
                    job = self._queue.get_nowait()
            except TimeoutError:
                break
            if job is None:
                return True
            if job.future.done():
                continue
            if job.search != search or tokens + job.tokens > self.max_tokens:
                held.append(job)
                if job.search == search:
                    break  # full
                continue
            batch.append(job)
            tokens += job.tokens
        return False

    async def _search(self, batch: list[_Job], search: Search) -> None:
        batch = [job for job in batch if not job.future.done()]
        if not batch:
            return
        loop = asyncio.get_running_loop()
        sentences = [s for job in batch for s in job.sentences]
        prefixes = [p for job in batch for p in job.prefixes or [""] * len(job.sentences)]
        terms = [t for job in batch for t in job.terms or [[]] * len(job.sentences)]
        owners = [(job, at) for job in batch for at in range(len(job.sentences))]
        for job in batch:
            job.answers, job.missing = [None] * len(job.sentences), len(job.sentences)

        def answered(i: int, translation: Translation) -> None:  # on the search's thread
            job, at = owners[i]
            job.answers[at] = translation
            job.missing -= 1
            if not job.missing:  # the request is complete: answer it now
                loop.call_soon_threadsafe(_resolve, job.future, job.answers)

        start = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, self._translate, sentences,
                                                 search, answered,
                                                 prefixes if any(prefixes) else None,
                                                 terms if any(terms) else None)
        except Exception as error:  # noqa: BLE001 - each request answers with it
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(error)
            return
        if self.on_batch is not None:
            self.on_batch(len(sentences), sum(job.tokens for job in batch),
                          time.perf_counter() - start, results)

    def _translate(self, sentences: list[str], search: Search, answered,
                   prefixes: list[str] | None, terms: list[list[str]] | None
                   ) -> list[Translation]:
        decode = {**asdict(search.decode),
                  "max_tokens": max(self.max_tokens, search.decode.max_tokens)}
        return self.translator.translate_detailed(
            sentences, nbest=search.nbest, attention=search.attention, scores=search.scores,
            on_translation=answered, prefixes=prefixes, terms=terms, **decode)


def search_thread(threads: int = 0, search: int = 0) -> ThreadPoolExecutor:
    """A thread for searches: a server's models share one (`Service`; one per search with
    `--searches`), since PyTorch's CPU threads are fastest when a single thread of the process
    calls them (`transduce.runtime.in_passing_thread`), and the searches take the CPUs in turn
    anyway. `threads`: its PyTorch CPU threads (0: as PyTorch gives a new thread); `search`:
    which of several at once it is (`enter_search`)."""
    return ThreadPoolExecutor(1, thread_name_prefix="transduce-search",
                              initializer=enter_search, initargs=(search, threads))


def _resolve(future: asyncio.Future, translations: list[Translation]) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(translations)
