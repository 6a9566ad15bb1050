"""Batches searched at once (`transduce.decoding.parallel`, `Translator.load(..., searches=N)`):
the same translations as one search at a time, and their scores and attention to float
rounding (a search of one thread sums in another order than one of two), on threads of their own
with their share of PyTorch's threads, the caller's own count untouched; errors and early
stops reach the caller."""

import threading

import pytest
import torch

from transduce.decoding.config import Sampling
from transduce.decoding.parallel import at_once, check_searches, enter_search, threads_each
from transduce.decoding.translator import Translator
from transduce.errors import UserError

from ..conftest import fast_paths_only, own_path_only
from .test_translator import run_dir  # noqa: F401 (a module-scoped trained run)

# searches at once on every path but the reference (`fast_paths_only`: on threads, its
# operations are MKL's), where a path's copies of weights are made on threads racing; the rest
# (threads, the searches' own options at once) on this machine's path only

SENTENCES = ["seven", "ninety-nine", "one hundred and two", "forty-two", "", "three thousand",
             "eighty-one", "five hundred and six", "twelve", "sixty-six", "nine", "ten"]
SMALL_BATCHES = dict(max_tokens=8)  # a batch of one or two sentences: many batches


@pytest.fixture
def two_threads():
    """The caller at two PyTorch threads (as a 2-core machine's default), set back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@own_path_only
def test_work_runs_on_threads_of_their_own_with_their_share(two_threads):
    seen = []

    def work(item, tell):
        seen.append((item, threading.current_thread().name, torch.get_num_threads()))
        tell(item * 10)
        tell(item * 10 + 1)

    got = list(at_once(work, range(6), 2))
    assert sorted(got) == sorted([n * 10 for n in range(6)] + [n * 10 + 1 for n in range(6)])
    assert sorted(item for item, _, _ in seen) == list(range(6))
    assert {name for _, name, _ in seen} <= {"transduce-search-0", "transduce-search-1"}
    assert {threads for _, _, threads in seen} == {threads_each(2)} == {1}
    assert torch.get_num_threads() == 2  # the caller's count, set back


@own_path_only
def test_an_error_reaches_the_caller_and_stops_the_rest(two_threads):
    started = []

    def work(item, tell):
        started.append(item)
        if item == 0:
            raise ValueError("bad batch 0")
        tell(item)

    with pytest.raises(ValueError, match="bad batch 0"):
        list(at_once(work, range(50), 2))
    assert len(started) < 50  # no new item after the error
    assert torch.get_num_threads() == 2


@own_path_only
def test_a_caller_that_stops_takes_no_more_items(two_threads):
    started, release = [], threading.Event()

    def work(item, tell):
        started.append(item)
        tell(item)
        release.wait(5)

    results = at_once(work, range(50), 2)
    next(results)
    results.close()  # the caller stops (an error, Ctrl-C)
    release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("transduce-search-"):
            thread.join(5)
    assert len(started) <= 3


@own_path_only
def test_searches_are_counted_and_checked():
    assert check_searches(0, torch.device("cpu")) == torch.get_num_threads()
    assert check_searches(3, torch.device("cpu")) == 3
    assert check_searches(0, torch.device("cuda")) == 1
    with pytest.raises(UserError, match="searches 2: batches are searched at once on a CPU"):
        check_searches(2, torch.device("cuda"))
    with pytest.raises(UserError, match="searches must be 0"):
        check_searches(-1, torch.device("cpu"))


@fast_paths_only
@pytest.mark.parametrize("settings", [dict(beam_size=1), dict(beam_size=3, nbest=2),
                                      dict(beam_size=2, attention=True, scores=True)])
def test_searches_at_once_find_what_one_at_a_time_finds(run_dir, two_threads, settings):  # noqa: F811
    one = Translator.load(run_dir, searches=1).translate_detailed(SENTENCES, **settings,
                                                                  **SMALL_BATCHES)
    told, caller = [], threading.current_thread()
    many = Translator.load(run_dir, searches=3).translate_detailed(
        SENTENCES, **settings, **SMALL_BATCHES,
        on_translation=lambda i, t: told.append((i, threading.current_thread() is caller)))
    # the same tokens; scores to float rounding (one thread a search sums in another order)
    assert [[text for text, _ in t.nbest] for t in many] == \
        [[text for text, _ in t.nbest] for t in one]
    assert [score for t in many for _, score in t.nbest] == pytest.approx(
        [score for t in one for _, score in t.nbest], abs=1e-4)
    assert sorted(i for i, _ in told) == list(range(len(SENTENCES)))
    assert all(on_caller for _, on_caller in told)
    for a, b in zip(many, one, strict=True):
        assert a.tgt_pieces == b.tgt_pieces
        if b.attention is not None:
            assert torch.allclose(a.attention, b.attention, atol=1e-5)
            assert a.scores.token_log_probs == pytest.approx(b.scores.token_log_probs, abs=1e-4)


@own_path_only
def test_prefixes_glossaries_and_seeded_draws_at_once(run_dir, two_threads):  # noqa: F811
    one, many = Translator.load(run_dir), Translator.load(run_dir, searches=0)
    assert many.searches == 2
    prefixes = ["sie", "", "hundert", "", "", "", "", "", "", "", "", ""]
    terms = [[], ["QQ"], *[[]] * 10]
    for options in (dict(prefixes=prefixes), dict(terms=terms, beam_size=2),
                    dict(sampling=Sampling(temperature=1.0, seed=5))):
        assert many.translate(SENTENCES, **options, **SMALL_BATCHES) == \
            one.translate(SENTENCES, **options, **SMALL_BATCHES)


@own_path_only
def test_a_compiled_model_gives_each_search_in_flight_buffers_of_its_own(run_dir):  # noqa: F811
    model = Translator.load(run_dir, compile=True).model
    src = torch.tensor([[5, 6, 7, 3]])
    first, second = model.steps(src), model.steps(src)  # two searches at once
    assert first.storage is not second.storage
    kept = first.storage
    del first  # a search ends
    assert model.steps(src).storage is kept  # the next one takes its buffers again


@own_path_only
def test_compiled_searches_at_once_each_call_a_copy_of_their_own(run_dir, two_threads,  # noqa: F811
                                                                monkeypatch):
    """Dynamo's guards are not safe to check from two threads at once (a check of one thread
    failed against the other's inputs, and the step compiled again while serving): each search
    thread calls the compiled steps through a code object of its own, no code object from two
    threads, and they find the eager tokens."""
    from transduce.decoding import compiled

    callers: dict[object, set[int]] = {}
    made = compiled.compiled_decode_next

    def recorded():
        function = made()
        code = function._torchdynamo_orig_callable.__code__
        callers.setdefault(code, set()).add(threading.get_ident())
        return function

    monkeypatch.setattr(compiled, "compiled_decode_next", recorded)
    many = Translator.load(run_dir, compile=True, searches=2)
    assert many.translate(SENTENCES, beam_size=2, **SMALL_BATCHES) == \
        Translator.load(run_dir).translate(SENTENCES, beam_size=2, **SMALL_BATCHES)
    assert len(callers) == 2  # a copy for each search
    assert all(len(threads) == 1 for threads in callers.values())
    assert len({thread for threads in callers.values() for thread in threads}) == 2


@own_path_only
def test_each_search_thread_gets_copies_of_its_own_of_every_compiled_function():
    """A step and a greedy block of each k: the same function, a code object for each search
    (nothing is compiled until called)."""
    from transduce.decoding import compiled

    codes: dict[int, list] = {}

    def search(n: int) -> None:
        enter_search(n, 0)
        codes[n] = [f._torchdynamo_orig_callable.__code__ for f in
                    (compiled.compiled_decode_next(), compiled.compiled_greedy(2),
                     compiled.compiled_greedy(3))]

    for n in (0, 1, 1):
        thread = threading.Thread(target=search, args=(n,))
        thread.start()
        thread.join()
    first, second = codes[0], codes[1]
    assert first[0] is compiled._decode_next.__code__
    assert all(a is not b and a.co_code == b.co_code for a, b in zip(first, second, strict=True))
    assert [c.co_name for c in second] == ["_decode_next_1", "greedy_1", "greedy_1"]
