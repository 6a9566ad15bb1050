"""The steps of a CUDA-graph search (transduce.decoding.graphed), run eagerly on the CPU
(`capture=False`: no graphs here): the batch padded to the graphs' rows and source positions,
its inputs copied into the graphs' tensors, the storage's buffers and position. The same tokens
as the model's own search, greedy, beam, sampling and prefixes, with sentences finishing at
different steps; the slots (one per graph) reused from step to step and search to search. With
the graphs captured and replayed: tests/gpu. (The search around the steps is what is tested:
on this machine's own kernel path.)"""

import torch

from transduce.decoding.graphed import Graphed, GraphStorage, row_bucket

from ..conftest import beam_with, draw_with, greedy_with, own_path_only, random_tokens
from .test_beam import _batch
from .test_greedy import _model_that_stops

LIMITS = dict(max_len_a=0, max_len_b=12)


def _graphed(model) -> Graphed:
    return Graphed(model, capture=False)


def test_row_buckets():
    assert [row_bucket(n) for n in (1, 2, 3, 4, 5, 17, 64, 65)] == [1, 2, 4, 4, 8, 32, 64, 128]


@own_path_only
def test_greedy_and_beam_find_the_tokens_of_the_models_own_search():
    torch.manual_seed(0)
    model, src = _model_that_stops(), _batch(n=7)  # 7 sources: padded to 8
    eager = greedy_with(model, src, **LIMITS)
    assert len({len(t) for t in eager}) > 1  # sentences finished at different steps
    assert greedy_with(_graphed(model), src, **LIMITS) == eager
    for kw in (dict(beam_size=3, nbest=2), dict(beam_size=1), dict(beam_size=4, min_len=3)):
        ours = beam_with(_graphed(model), src, **LIMITS, **kw)
        theirs = beam_with(model, src, **LIMITS, **kw)
        assert [[h.tokens for h in hs] for hs in ours] == [[h.tokens for h in hs] for hs in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert [h.score for h in a] == [h.score for h in b] or all(
                abs(x.score - y.score) < 1e-4 for x, y in zip(a, b, strict=True))


@own_path_only
def test_sampling_and_prefixes_find_the_tokens_of_the_models_own_search():
    torch.manual_seed(1)
    model, src = _model_that_stops(), _batch(n=5)
    prefixes = [[5, 6], [], [7], [8, 9, 10], []]
    assert ([h[0].tokens for h in beam_with(_graphed(model), src, beam_size=3,
                                            prefixes=prefixes, **LIMITS)]
            == [h[0].tokens for h in beam_with(model, src, beam_size=3, prefixes=prefixes,
                                               **LIMITS)])
    assert (draw_with(_graphed(model), src, top_k=5,
                      generator=torch.Generator().manual_seed(1), **LIMITS)
            == draw_with(model, src, top_k=5, generator=torch.Generator().manual_seed(1),
                         **LIMITS))


@own_path_only
def test_a_graph_is_made_once_for_each_shape_and_kept_for_the_next_search():
    torch.manual_seed(2)
    model = _model_that_stops()
    graphed = _graphed(model)
    src = random_tokens(6, 20)  # 20 source positions: padded to 32
    first = greedy_with(graphed, src, max_len_a=0, max_len_b=20, min_len=20)
    [storage] = graphed._free
    assert isinstance(storage, GraphStorage)
    shapes = {key[:4] for key in storage.slots}  # sources, group, positions, window
    assert shapes == {(8, 1, 32, 16), (8, 1, 32, 32)}  # 6 sources of 20 tokens, 21 steps
    made = len(storage.slots)
    assert greedy_with(graphed, src, max_len_a=0, max_len_b=20, min_len=20) == first
    assert len(storage.slots) == made  # the same graphs again
    assert first == greedy_with(model, src, max_len_a=0, max_len_b=20, min_len=20)


def test_compiling_for_a_gpu_is_replaying_graphs_and_always_pays():
    from transduce.decoding.compiled import Compiled, pays
    from transduce.decoding.graphed import compile_for

    from ..conftest import small_model

    for device in (torch.device("cuda"), torch.device("cuda", 1)):
        assert pays(device, "float32", words=3) and pays(device, "bfloat16", words=3, beams=5)
    model = small_model()
    assert type(compile_for(model, torch.device("cuda", 0))) is Graphed
    assert type(compile_for(model, torch.device("cpu"))) is Compiled
    assert not pays(torch.device("cpu"), "float32", words=3)
