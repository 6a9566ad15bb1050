"""Several searches at once in one worker (`serve --searches N`): a model's requests spread over
N batchers, each searching on a thread of its own with an equal share of the worker's CPU
threads (`transduce.decoding.parallel`, CTranslate2's `inter_threads`).

At a small model's shapes a step's products are too small for two threads to share, so one
search on two CPUs leaves most of the second idle; two searches of one thread each keep both
busy with one copy of the model in memory, where a second worker would load another. That pays
in full for a search that lets go of Python's lock (CTranslate2's: two searches answered two
workers' requests); transduce's holds it for the Python of each step, so its searches gain
less than workers do (benchmarks/serve.md). A request goes whole to the batcher with the fewest
sentences in hand, so that the searches stay equally full; its translations are those it gets
alone, whichever batcher searches it.
"""

from __future__ import annotations

import asyncio

from transduce.decoding.translator import Translation
from transduce.serve.batcher import Batcher, Search
from transduce.serve.continuous import ContinuousBatcher


class Spread:
    """As a batcher (start, translate, stop), over `batchers`, one per search thread."""

    def __init__(self, batchers: list[Batcher] | list[ContinuousBatcher]) -> None:
        if not batchers:
            raise ValueError("Spread needs at least one batcher")
        self.batchers = batchers
        self._held = [0] * len(batchers)  # sentences each has in hand (on the event loop)

    def start(self) -> None:
        for batcher in self.batchers:
            batcher.start()

    async def stop(self) -> None:
        """Once what is queued is translated."""
        await asyncio.gather(*(batcher.stop() for batcher in self.batchers))

    async def translate(self, sentences: list[str], search: Search,
                        prefixes: list[str] | None = None,
                        terms: list[list[str]] | None = None) -> list[Translation]:
        """As the batchers' `translate`, by the one holding the fewest sentences (the first of
        those, if several)."""
        which = min(range(len(self.batchers)), key=self._held.__getitem__)
        self._held[which] += len(sentences)
        try:
            return await self.batchers[which].translate(sentences, search, prefixes, terms)
        finally:
            self._held[which] -= len(sentences)
