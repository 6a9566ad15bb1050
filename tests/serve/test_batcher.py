import asyncio

import pytest

from transduce.serve.batcher import Batcher, Search

from .conftest import SENTENCES


def _serve(batcher: Batcher, requests: list[tuple]):
    """batcher.translate(*request) for every request at once: their results."""
    async def main():
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.translate(*request) for request in requests))
        finally:
            await batcher.stop()
    return asyncio.run(main())


def test_concurrent_requests_are_batched_and_each_gets_what_it_gets_alone(translator):
    batches = []
    batcher = Batcher(translator, wait=0.05, on_batch=lambda n, *_: batches.append(n))
    beam, greedy = _search(translator, 3), _search(translator, 1)
    requests = [([s], beam if i % 3 else greedy) for i, s in enumerate(SENTENCES * 4)]
    requests.append((SENTENCES[:3], _search(translator, 3, nbest=2)))
    results = _serve(batcher, requests)
    assert len(batches) < len(requests) and max(batches) > 1  # batched
    assert sum(batches) == sum(len(s) for s, _ in requests)
    for (sentences, search), got in zip(requests, results, strict=True):
        alone = translator.translate_detailed(sentences, beam_size=search.decode.beam_size,
                                              nbest=search.nbest)
        assert [t.text for t in got] == [t.text for t in alone]
        assert [[text for text, _ in t.nbest] for t in got] == [
            [text for text, _ in t.nbest] for t in alone]
        scores = [score for t in got for _, score in t.nbest]  # up to float rounding
        assert scores == pytest.approx([score for t in alone for _, score in t.nbest], rel=1e-5)


def test_without_batching_requests_are_served_one_at_a_time(translator):
    batches = []
    batcher = Batcher(translator, batching=False, on_batch=lambda n, *_: batches.append(n))
    results = _serve(batcher, [([s], _search(translator, 3)) for s in SENTENCES])
    assert batches == [1] * len(SENTENCES)
    assert [r[0].text for r in results] == translator.translate(SENTENCES, beam_size=3)


def test_a_token_budget_splits_batches(translator):
    batches = []
    batcher = Batcher(translator, max_tokens=16, wait=0.05,
                      on_batch=lambda n, tokens, *_: batches.append((n, tokens)))
    _serve(batcher, [([s], _search(translator, 1)) for s in SENTENCES])
    assert len(batches) > 1 and max(n for n, _ in batches) > 1
    assert all(tokens <= 16 or n == 1 for n, tokens in batches)


def test_a_cancelled_request_is_left_out(translator):
    batches = []
    batcher = Batcher(translator, wait=0.2, on_batch=lambda n, *_: batches.append(n))

    async def main():
        batcher.start()
        gone = asyncio.ensure_future(batcher.translate(["seven"], _search(translator, 1)))
        kept = asyncio.ensure_future(batcher.translate(["twelve"], _search(translator, 1)))
        await asyncio.sleep(0.01)
        gone.cancel()  # its client left while the batch was gathering
        result = await kept
        await batcher.stop()
        return result
    [only] = asyncio.run(main())
    assert only.text == translator.translate(["twelve"], beam_size=1)[0]
    assert batches == [1]


def test_a_request_is_answered_when_its_sentences_are_done_not_the_whole_batch(translator):
    batches, answered = [], []
    batcher = Batcher(translator, wait=0.05, on_batch=lambda n, *_: batches.append(n))
    short, long = ["seven"], ["three hundred and seventy-seven thousand and seventy-seven"]

    async def main():
        batcher.start()

        async def ask(name, sentences):
            result = await batcher.translate(sentences, _search(translator, 1))
            answered.append(name)
            return result
        results = await asyncio.gather(ask("long", long), ask("short", short))
        await batcher.stop()
        return results
    long_result, short_result = asyncio.run(main())
    assert batches == [2]  # one batch
    assert answered == ["short", "long"]
    assert short_result[0].text == translator.translate(short, beam_size=1)[0]
    assert long_result[0].text == translator.translate(long, beam_size=1)[0]


def _search(translator, beam_size: int, nbest: int = 1) -> Search:
    """A request's search: the model's settings with this beam size."""
    return Search(translator.decode_config(beam_size=beam_size), nbest)


WANTED = {"prefixes": [["neun", ""], None, ["", "sieben"], None],  # two sentences a request
          "terms": [[["ZZ"], []], None, [[], ["QQ", "neun"]], None]}


@pytest.mark.parametrize("engine", ["batcher", "continuous"])
@pytest.mark.parametrize("wanted", WANTED)
def test_prefixes_and_terms_are_each_sentences_own_in_a_batch_with_others(translator, engine,
                                                                          wanted):
    """Requests with target prefixes (or glossary terms) batched with requests without: each
    gets what it gets alone, its translations starting with their prefixes (holding their
    terms)."""
    from transduce.serve.continuous import ContinuousBatcher

    batcher = (Batcher(translator, wait=0.05) if engine == "batcher"
               else ContinuousBatcher(translator))
    beam = _search(translator, 3)
    asked = WANTED[wanted]
    requests = [(SENTENCES[2 * i:2 * i + 2], beam, *((a, None) if wanted == "prefixes"
                                                     else (None, a)))
                for i, a in enumerate(asked)]
    results = _serve(batcher, requests)
    for (sentences, *_), a, got in zip(requests, asked, results, strict=True):
        alone = translator.translate_detailed(sentences, beam_size=3, **{wanted: a})
        assert [t.text for t in got] == [t.text for t in alone]
        for t, want in zip(got, a or [None, None], strict=True):
            if wanted == "prefixes":
                assert t.text.startswith(want or "")
            else:
                assert all(w in t.text for w in want or [])
