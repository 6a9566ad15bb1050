"""Several searches at once in one worker (`serve --searches`): requests spread over batchers,
each on a search thread of its own with its share of the CPU threads."""

import asyncio

import pytest
import torch

from transduce.errors import UserError
from transduce.serve.batcher import Batcher, Search, search_thread
from transduce.serve.continuous import ContinuousBatcher, Stepper
from transduce.serve.settings import ServeSettings
from transduce.serve.spread import Spread

from .conftest import SENTENCES, make_app


def _search(translator, beam_size: int) -> Search:
    return Search(translator.decode_config(beam_size=beam_size))


def _batchers(translator, continuous: bool, seen: list) -> list:
    """Two batchers, each on a thread of its own of one CPU thread; `seen` gets (the batcher,
    sentences) for each of its searches or steps."""
    def told(which):
        return lambda sentences, *_: seen.append((which, sentences))
    if continuous:
        return [ContinuousBatcher(translator, on_step=told(i), stepper=Stepper(1))
                for i in range(2)]
    return [Batcher(translator, wait=0.02, on_batch=told(i), thread=search_thread(1))
            for i in range(2)]


@pytest.mark.parametrize("continuous", [False, True], ids=["batches", "continuous"])
def test_requests_spread_over_two_searches_get_what_they_get_alone(translator, continuous):
    seen: list = []
    spread = Spread(_batchers(translator, continuous, seen))
    requests = [[s] for s in SENTENCES * 3] + [SENTENCES[:4]]
    beam = _search(translator, 3)

    async def main():
        spread.start()
        try:
            return await asyncio.gather(*(spread.translate(r, beam) for r in requests))
        finally:
            await spread.stop()
    results = asyncio.run(main())
    for sentences, got in zip(requests, results, strict=True):
        assert [t.text for t in got] == translator.translate(sentences, beam_size=3)
    assert {which for which, _ in seen} == {0, 1}  # both searched
    assert sum(n for _, n in seen) >= sum(map(len, requests))


def test_each_search_thread_takes_its_share_of_the_cpu_threads():
    caller = torch.get_num_threads()
    thread = search_thread(1)
    assert thread.submit(torch.get_num_threads).result() == 1
    thread.shutdown()
    counts = []
    stepper = Stepper(1)

    class Told:  # a batcher that tells the stepping thread's count and is done
        busy = False

        def _receive(self, job):
            counts.append(torch.get_num_threads())

        def _advance(self):
            pass

    told = Told()
    stepper.add(told)
    stepper.put(told, "job")

    async def stop():
        await stepper.remove(told)
    asyncio.run(stop())
    assert counts == [1]
    torch.set_num_threads(caller)


def test_a_request_goes_to_the_search_holding_the_fewest_sentences(translator):
    class Held:  # a batcher that answers when told to
        def __init__(self):
            self.asked, self.release = [], asyncio.Event()

        async def translate(self, sentences, search, prefixes=None, terms=None):
            self.asked.append(len(sentences))
            await self.release.wait()
            return sentences

    async def main():
        a, b = Held(), Held()
        spread = Spread([a, b])
        search = _search(translator, 1)
        first = asyncio.ensure_future(spread.translate(["x"] * 5, search))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(spread.translate(["y"] * 2, search))
        await asyncio.sleep(0)
        third = asyncio.ensure_future(spread.translate(["z"] * 2, search))  # 5 against 2
        await asyncio.sleep(0)
        assert (a.asked, b.asked) == ([5], [2, 2])
        a.release.set()
        await first
        fourth = asyncio.ensure_future(spread.translate(["w"], search))  # 0 against 4
        await asyncio.sleep(0)
        assert a.asked == [5, 1]
        b.release.set()
        await asyncio.gather(second, third, fourth)
    asyncio.run(main())


def test_searches_as_a_setting(translator):
    assert ServeSettings(threads=2, searches=2).search_threads(torch.device("cpu")) == (2, 1)
    assert ServeSettings(threads=4, searches=0).search_threads(torch.device("cpu")) == (4, 1)
    assert ServeSettings(threads=4, searches=2).search_threads(torch.device("cpu")) == (2, 2)
    assert ServeSettings(threads=2).search_threads(torch.device("cpu")) == (1, 0)  # its own
    with pytest.raises(UserError, match="--searches must not be negative"):
        ServeSettings(searches=-1)
    with pytest.raises(UserError, match="searches 2: batches are searched at once on a CPU"):
        ServeSettings(searches=2).search_threads(torch.device("cuda"))
    app = make_app(translator, searches=2, threads=2)
    batchers = app.state.service.batchers["en", "de"]
    assert isinstance(batchers, Spread) and len(batchers.batchers) == 2
    assert not isinstance(make_app(translator).state.service.batchers["en", "de"], Spread)
