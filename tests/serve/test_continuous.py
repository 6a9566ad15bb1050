"""The continuous batcher: requests' sentences join the searches between steps; each gets what
it gets alone, and a request arriving during a search is answered without waiting for it."""

import asyncio
import threading

import pytest

from transduce.serve.continuous import ContinuousBatcher

from .conftest import SENTENCES
from .test_batcher import _search


def test_concurrent_requests_join_and_each_gets_what_it_gets_alone(translator):
    steps = []
    batcher = ContinuousBatcher(translator, on_step=lambda n, *_: steps.append(n))
    beam, greedy = _search(translator, 3), _search(translator, 1)
    requests = [([s], beam if i % 3 else greedy) for i, s in enumerate(SENTENCES * 4)]
    requests += [(SENTENCES[:3], _search(translator, 3, nbest=2)), (["", " seven "], beam)]

    async def main():
        batcher.start()
        try:
            waves = []
            for i in range(0, len(requests), 5):  # in waves, into searches under way
                waves += [asyncio.ensure_future(batcher.translate(s, search))
                          for s, search in requests[i:i + 5]]
                await asyncio.sleep(0.002)
            return await asyncio.gather(*waves)
        finally:
            await batcher.stop()
    results = asyncio.run(main())
    assert max(steps) > 1  # sentences of several requests searched together
    for (sentences, search), got in zip(requests, results, strict=True):
        alone = translator.translate_detailed(sentences, beam_size=search.decode.beam_size,
                                              nbest=search.nbest)
        assert [[text for text, _ in t.nbest] for t in got] == [
            [text for text, _ in t.nbest] for t in alone]
        scores = [score for t in got for _, score in t.nbest]
        assert scores == pytest.approx([score for t in alone for _, score in t.nbest], rel=1e-5)


LONG = ["three hundred and seventy-seven thousand and seventy-seven"] * 6


class _LongThenShort:
    """A long request, then a short one sent once the long one's search has taken its first
    step; `on_step` (the long search's) takes no second step before the short one is queued (on
    a loaded machine the long search could end first: a flaky test). `answered`: in the order
    they were."""

    def __init__(self, search) -> None:
        self.search, self.steps, self.answered = search, [], []
        self.queued = threading.Event()

    def on_step(self, n, *_) -> None:  # on the search thread
        self.steps.append(n)
        self.queued.wait(10)

    async def ask(self, long_to, short_to):
        async def ask(batcher, name, sentences):
            result = await batcher.translate(sentences, self.search)
            self.answered.append(name)
            return result
        first = asyncio.ensure_future(ask(long_to, "long", LONG))
        while not self.steps:  # the long request's search has begun
            await asyncio.sleep(0.001)
        second = asyncio.ensure_future(ask(short_to, "short", ["seven"]))
        await asyncio.sleep(0)  # ask() runs to its await: the request is in the batcher's inbox
        self.queued.set()
        return await asyncio.gather(first, second)


def test_a_request_arriving_during_a_search_does_not_wait_for_it(translator):
    run = _LongThenShort(_search(translator, 3))
    batcher = ContinuousBatcher(translator, on_step=run.on_step)

    async def main():
        batcher.start()
        results = await run.ask(batcher, batcher)
        await batcher.stop()
        return results
    long_result, short_result = asyncio.run(main())
    assert run.answered == ["short", "long"]
    assert max(run.steps) == 7  # the short one joined the long one's search
    assert short_result[0].text == translator.translate(["seven"], beam_size=3)[0]
    assert [t.text for t in long_result] == translator.translate(LONG, beam_size=3)


def test_a_token_budget_holds_sentences_back_until_others_leave(translator):
    seen = []
    batcher = ContinuousBatcher(translator, max_tokens=20,
                                on_step=lambda n, tokens, *_: seen.append((n, tokens)))

    async def main():
        batcher.start()
        results = await asyncio.gather(*(batcher.translate([s], _search(translator, 1))
                                          for s in SENTENCES))
        await batcher.stop()
        return results
    results = asyncio.run(main())
    assert all(tokens <= 20 or n == 1 for n, tokens in seen) and max(n for n, _ in seen) > 1
    assert [r[0].text for r in results] == translator.translate(SENTENCES, beam_size=1)


def test_a_sentence_budget_holds_sentences_back_until_others_leave(translator):
    searched = []
    batcher = ContinuousBatcher(translator, max_sentences=3,
                                on_step=lambda n, *_: searched.append(n))
    beam = _search(translator, 3)
    requests = [SENTENCES[:4], *([s] for s in SENTENCES * 2)]  # one of four: held back too

    async def main():
        batcher.start()
        results = await asyncio.gather(*(batcher.translate(r, beam) for r in requests))
        await batcher.stop()
        return results
    results = asyncio.run(main())
    assert max(searched) == 3  # 20 sentences at once, 3 searched at a time
    for sentences, got in zip(requests, results, strict=True):
        assert [t.text for t in got] == translator.translate(sentences, beam_size=3)


def test_a_cancelled_request_does_not_join(translator):
    steps = []
    batcher = ContinuousBatcher(translator, max_tokens=8, on_step=lambda n, *_: steps.append(n))
    long = ["three hundred and seventy-seven thousand and seventy-seven"]

    async def main():
        batcher.start()
        first = asyncio.ensure_future(batcher.translate(long, _search(translator, 1)))
        while not steps:  # the budget is full: what comes now waits
            await asyncio.sleep(0.001)
        gone = asyncio.ensure_future(batcher.translate(["seven"], _search(translator, 1)))
        await asyncio.sleep(0.001)
        gone.cancel()
        result = await first
        await batcher.stop()
        return result
    asyncio.run(main())
    assert max(steps) == 1  # "seven" never joined


def test_a_cancelled_request_leaves_the_search_at_the_next_step(translator):
    steps, cancelled = [], threading.Event()

    def on_step(n, *_) -> None:  # on the search thread: no second step before the cancel
        steps.append(n)
        cancelled.wait(10)

    batcher = ContinuousBatcher(translator, on_step=on_step)

    async def main():
        batcher.start()
        gone = asyncio.ensure_future(batcher.translate(LONG, _search(translator, 3)))
        while not steps:  # its sentences are in the search
            await asyncio.sleep(0.001)
        gone.cancel()
        await asyncio.sleep(0)
        cancelled.set()
        kept = await batcher.translate(["seven"], _search(translator, 3))
        await batcher.stop()
        return kept
    kept = asyncio.run(main())
    assert steps[0] == len(LONG) and max(steps[1:]) == 1  # the long ones left after a step
    assert [t.text for t in kept] == translator.translate(["seven"], beam_size=3)


@pytest.mark.parametrize("failing", ["step", "result"])
def test_a_failing_search_answers_its_requests_with_the_error_and_goes_on(translator,
                                                                          monkeypatch, failing):
    """A bug in a step (all its requests get the error) or in one translation's result (its
    request does): answered, and the batcher serves the next requests."""
    from transduce.decoding.continuous import ContinuousSearch

    owner = ContinuousSearch if failing == "step" else translator
    original = getattr(owner, failing)
    calls = []

    def fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, failing, fails_once)
    batcher = ContinuousBatcher(translator)

    async def main():
        batcher.start()
        try:
            with pytest.raises(RuntimeError, match="a bug"):
                await batcher.translate(["seven"], _search(translator, 1))
            return await batcher.translate(["twelve"], _search(translator, 1))
        finally:
            await batcher.stop()
    [after] = asyncio.run(main())
    assert after.text == translator.translate(["twelve"], beam_size=1)[0]


def test_batchers_sharing_a_stepper_take_steps_in_turn(translator):
    """Two models' continuous batchers on one Stepper's thread: a request to the second,
    arriving during the first's long search, is answered before it; one stopped, the other goes
    on serving."""
    from transduce.serve.continuous import Stepper

    stepper, run = Stepper(), _LongThenShort(_search(translator, 3))
    first = ContinuousBatcher(translator, on_step=run.on_step, stepper=stepper)
    second = ContinuousBatcher(translator, stepper=stepper)

    async def main():
        first.start()
        second.start()
        results = await run.ask(first, second)
        await first.stop()
        assert stepper._thread.is_alive()  # the second is still served
        again = await second.translate(["twelve"], run.search)
        thread = stepper._thread
        await second.stop()
        assert not thread.is_alive()
        return results, again
    (long_result, short_result), again = asyncio.run(main())
    assert run.answered == ["short", "long"]
    assert short_result[0].text == translator.translate(["seven"], beam_size=3)[0]
    assert [t.text for t in long_result] == translator.translate(LONG, beam_size=3)
    assert again[0].text == translator.translate(["twelve"], beam_size=3)[0]
