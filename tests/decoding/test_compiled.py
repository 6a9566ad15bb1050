"""The compiled decoder step (`--compile`): the same tokens as the eager search, greedy and beam,
with finished sentences leaving the batch; beam 1 is greedy and a sentence alone is translated as
in a batch on that path too. Compiling takes a while (Inductor, C++): one module, one model.

What a kernel path changes is what is compiled (its products and attention): the beam search's
step is compared with the eager one on every fast path (the reference path's graphs are MKL's:
tests/conftest.py `fast_paths_only`). Greedy search's graph of two steps unrolled holds the same
products and attention, twice: it is compared on this machine's own path (each path's compiled
products alone: tests/kernels/test_linear.py), as are the tests of what the search does around
the step (a sentence alone, beam prefixes, sampling, ensembles, the command, no second graph),
each of them tens of seconds; a graph compiled from an empty cache is 30-90 s."""

import copy
from pathlib import Path

import pytest
import torch

from transduce.cli import main
from transduce.decoding.compiled import Compiled
from transduce.decoding.translator import Translator
from transduce.kernels import transposed

from ..conftest import (
    beam_with,
    draw_with,
    fast_paths_only,
    greedy_with,
    own_path_only,
    random_tokens,
    small_model,
)
from .test_translator import run_dir  # noqa: F401 (a module-scoped trained run)

pytestmark = pytest.mark.slow  # Inductor compiles C++ for each: tens of seconds a test


def _small() -> torch.nn.Module:
    """The tests' small model with two decoder layers, not three, and one encoder layer: a
    compiled graph's code and compiling grow with the layers (greedy search on three kernel paths
    compiled in 106 s against 160 from an empty Inductor cache); two still check that each layer
    reads and writes its own cache."""
    return small_model(n_encoder_layers=1, n_decoder_layers=2)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(3)
    return _small()


@pytest.fixture(scope="module")
def src():
    torch.manual_seed(4)
    src = random_tokens(7, 9)
    src[1, 5:] = src[4, 3:] = 1  # padding
    return src


LIMITS = dict(max_len_a=1.0, max_len_b=4)  # outputs of different lengths: rows leave


@own_path_only
def test_compiled_greedy_search_finds_the_eager_tokens(model, src):
    """Greedy tokens come `greedy_block` at a time from one graph: outputs end inside blocks, at
    their limits, not before the minimum length, and after forced prefixes as eager ones. In a
    graph of one row (a sentence alone, a size Dynamo specialises) Inductor writes the linear
    layers' products as loops of its own, not calls to the BLAS (`INDUCTOR_OPTIONS`): compiled
    afresh (no graph from a cache, whose passes would not run again), so that its counters
    tell."""
    from torch._dynamo.utils import counters
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    eager = greedy_with(model, src, **LIMITS)
    assert len({len(t) for t in eager}) > 1  # sentences finished at different steps
    torch._dynamo.reset()
    counters.clear()
    width = int((src[1] != 1).sum())
    with (inductor_config.patch(fx_graph_cache=False),
          functorch_config.patch(enable_autograd_cache=False)):
        assert greedy_with(Compiled(model), src, **LIMITS) == eager
        alone = greedy_with(Compiled(model), src[1:2, :width], **LIMITS)
    assert counters["inductor"]["decompose_addmm"] > 0
    assert alone == greedy_with(model, src[1:2, :width], **LIMITS)
    for extra in (dict(min_len=6), dict(prefixes=[[5, 6], [], [7], [8, 9, 10, 11, 12], [], [11],
                                                  [12]])):
        assert greedy_with(Compiled(model), src, **LIMITS, **extra) == greedy_with(
            model, src, **LIMITS, **extra)
    beam_one = beam_with(Compiled(model), src, beam_size=1, **LIMITS)
    assert [list(h[0].tokens) for h in beam_one] == eager


@fast_paths_only
def test_compiled_beam_search_finds_the_eager_hypotheses(model, src):
    eager = beam_with(model, src, beam_size=3, nbest=2, **LIMITS)
    compiled = beam_with(Compiled(model), src, beam_size=3, nbest=2, **LIMITS)
    assert [[h.tokens for h in hyps] for hyps in compiled] == [
        [h.tokens for h in hyps] for hyps in eager]
    for a, b in zip(compiled, eager, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
    # past windows of 16 and 32 positions: the beams' buffers move to longer ones on the way
    # (`StaticKVCache.fit`), reordered before and after
    long = dict(max_len_a=0, max_len_b=40, min_len=34)
    assert [[h.tokens for h in hyps] for hyps in beam_with(Compiled(model), src, beam_size=3,
                                                            nbest=2, **long)] == [
        [h.tokens for h in hyps] for hyps in beam_with(model, src, beam_size=3, nbest=2, **long)]


@pytest.mark.parametrize("kernel_path", ["mkl"], indirect=True)  # whatever this CPU's own
def test_weights_stored_transposed_search_compiled_as_eager(model, src):
    """On MKL's path `Translator.load` stores the weights transposed (transduce.kernels.
    transposed): the compiled searches of a model stored so find the eager tokens of the model
    as trained, greedy and beam, in a batch and alone (whose graph of one row multiplies in
    Inductor's own loops over the weights, `INDUCTOR_OPTIONS`)."""
    stored = Compiled(transposed.store(copy.deepcopy(model)))
    assert greedy_with(stored, src, **LIMITS) == greedy_with(model, src, **LIMITS)
    assert [h[0].tokens for h in beam_with(stored, src, beam_size=3, **LIMITS)] == [
        h[0].tokens for h in beam_with(model, src, beam_size=3, **LIMITS)]
    width = int((src[1] != 1).sum())
    alone = src[1:2, :width]
    assert greedy_with(stored, alone, **LIMITS) == greedy_with(model, alone, **LIMITS)


@own_path_only
def test_a_sentence_alone_is_translated_as_in_the_batch(model, src):
    together = beam_with(Compiled(model), src, beam_size=3, **LIMITS)
    for i in (0, 4):
        width = int((src[i] != 1).sum())
        [alone] = beam_with(Compiled(model), src[i: i + 1, :width], beam_size=3, **LIMITS)
        assert alone[0].tokens == together[i][0].tokens


@own_path_only
def test_translate_compile_gives_the_translations_of_translate(run_dir, tmp_path):  # noqa: F811
    sentences = ["seven", "forty-two", "one hundred and two"]
    eager = Translator.load(run_dir).translate(sentences, beam_size=2)
    compiled = Translator.load(run_dir, compile=True)
    assert isinstance(compiled.model, Compiled)
    assert compiled.translate(sentences, beam_size=2) == eager
    (tmp_path / "src").write_text("\n".join(sentences) + "\n")
    assert main(["translate", "--model", str(run_dir), "--compile", "--beam", "2",
                 "-i", str(tmp_path / "src"), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out").read_text().splitlines() == eager


@own_path_only
def test_compiled_sampling_prefixes_and_ensembles_find_the_eager_tokens(model, src):
    """Every search runs on a Searchable: a compiled model draws, follows prefixes and joins
    an ensemble as the model does."""
    from transduce.decoding.ensemble import Ensemble

    prefixes = [[5, 6], [], [7], [8, 9, 10], [], [11], [12]]
    compiled, eager = (beam_with(m, src, beam_size=3, prefixes=prefixes, **LIMITS)
                       for m in (Compiled(model), model))
    assert [h[0].tokens for h in compiled] == [h[0].tokens for h in eager]
    assert (draw_with(Compiled(model), src, top_k=5, generator=torch.Generator().manual_seed(1),
                      **LIMITS)
            == draw_with(model, src, top_k=5, generator=torch.Generator().manual_seed(1),
                         **LIMITS))
    torch.manual_seed(8)
    other = _small()
    assert (greedy_with(Ensemble([Compiled(model), Compiled(other)]), src, **LIMITS)
            == greedy_with(Ensemble([model, other]), src, **LIMITS))


@own_path_only
def test_sentences_join_the_compiled_search_and_get_what_beam_search_gives_alone(model):
    """Continuous batching over the compiled steps (`DecoderSteps.join`, a static cache's
    `StaticKVCache.join`): sentences that join
    between steps, a few at a time, get the eager beam search's n-best alone; the busy search
    drops the positions no sentence reads any more (`StaticDecoderCache.trim`: its position
    moves back, its window with it). Its graphs: before any sentence joined and after, each
    for one source and for several (Dynamo specialises a size of one), all compiled by a
    server's warm-up (`transduce.serve.models.warm`), and no more."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from transduce.decoding.beam import beam_search
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.continuous import ContinuousSearch
    from transduce.model.static_cache import StaticDecoderCache
    from transduce.serve.models import warm

    from .test_continuous import _arriving, _sources

    decode, trims = DecodeConfig(beam_size=3, **LIMITS), []
    trim = StaticDecoderCache.trim

    def counted(cache):
        trims.append(trim(cache))
        return trims[-1]
    sources = _sources(64, seed=5)
    alone = [beam_search(model, torch.tensor([s]), decode, nbest=2)[0] for s in sources]
    torch._dynamo.reset()
    counters.clear()
    compiled, found, positions = Compiled(model), {}, []
    words = SimpleNamespace(model=compiled, decode=decode,  # a Translator to the warm-up
                            encode_source=lambda text: [4 + len(w) for w in text.split()] + [3])
    warm(words, Path("warm-up"), continuous=True)
    graphs = counters["stats"]["unique_graphs"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StaticDecoderCache, "trim", counted)
        found = _arriving(ContinuousSearch(compiled, decode, nbest=2), sources[:24], seed=2)
        search = ContinuousSearch(compiled, decode, nbest=2)  # one joining every step
        for i, source in enumerate(sources[24:], start=24):
            search.join([source], [i])
            found.update(search.step())
            positions.append(int(search.steps.cache.position))
        while search.active:
            found.update(search.step())
    assert [[h.tokens for h in found[i]] for i in range(len(sources))] == [
        [h.tokens for h in hyps] for hyps in alone]
    assert [h.score for i in range(len(sources)) for h in found[i]] == pytest.approx(
        [h.score for hyps in alone for h in hyps], abs=1e-4)
    assert len({len(hyps[0].tokens) for hyps in alone}) > 1  # finished at different steps
    assert any(trims) and max(positions) < 30  # not the 40 steps the busy search ran
    assert counters["stats"]["unique_graphs"] == graphs <= 4


@own_path_only
def test_no_batch_compiles_the_step_again(model):
    """One graph serves every batch of several sources, whatever the sizes of the first: here
    16 source tokens, as many as the first window's positions (`bucket`), which Dynamo's duck
    sizing took for one size (and compiled again for each batch after). And it is traced once:
    not a second time for a float it first took for a variable (`_configure`)."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    torch._dynamo.reset()
    counters.clear()
    compilation_time_metrics.clear()
    compiled = Compiled(model)
    torch.manual_seed(5)
    for rows, width in [(4, 16), (4, 9), (3, 23), (5, 12)]:
        greedy_with(compiled, random_tokens(rows, width), max_len_a=0, max_len_b=40, min_len=40)
        if rows == 4 and width == 16:
            graphs = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == graphs == 1
    assert "compile_attempt_0" in compilation_time_metrics
    assert "compile_attempt_1" not in compilation_time_metrics  # no trace started again


@own_path_only
def test_beam_search_compiles_one_graph_for_batches(model):
    """Beam search's steps of several sources are one graph: its first step, one row a source
    before the k beams, runs eagerly (compiled, it was a graph of its own, and one more for a
    single source), whatever the sizes."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = Compiled(model)
    torch.manual_seed(6)
    for rows, width in [(3, 11), (5, 7)]:
        src = random_tokens(rows, width)
        found = beam_with(compiled, src, beam_size=3, **LIMITS)
        assert [h[0].tokens for h in found] == [
            h[0].tokens for h in beam_with(model, src, beam_size=3, **LIMITS)]
    assert counters["stats"]["unique_graphs"] == 1


@own_path_only
def test_guards_tell_models_apart_and_follow_weights_loaded_in_place(src, run_dir):  # noqa: F811
    """Dynamo checks a model's guards through its modules' dictionaries (`_configure`: a module
    not changed since the last call passes at once): a model of another shape still gets a
    graph of its own, the first model its own graph back, and weights loaded in place into a
    compiled model are the ones searched. Beam search, on the shapes of the tests above (the
    small model, the trained run's): their graphs are made once a process."""
    def best(searchable):
        return [h[0].tokens for h in beam_with(searchable, src, beam_size=3, **LIMITS)]

    torch.manual_seed(9)
    first, weights, other = _small(), _small(), Translator.load(run_dir).model
    compiled = Compiled(first)
    for searched, eager in ((compiled, first), (Compiled(other), other), (compiled, first)):
        assert best(searched) == best(eager)
    before = best(compiled)
    first.load_state_dict(weights.state_dict())
    assert best(compiled) == best(weights) != before
