import os

# OpenMP's threads sleep when they wait, not spin (GNU OpenMP reads this as PyTorch loads it, so
# before the import; the workers and the commands the tests start inherit it): with two workers
# on two cores a test's second thread spinning took the core its own search or the other
# worker needed (tests/decoding/test_parallel.py's searches at once, a busy core beside them:
# 104 s spinning, 55 s asleep); the tests time nothing
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections import Counter
from pathlib import Path

import pytest
import torch
import torch._dynamo.config
import torch._inductor.config

from transduce import ModelConfig, Transformer, kernels
from transduce.kernels import linear as linear_kernels
from transduce.kernels import openblas as openblas_kernels

PAD = 1

# `transduce serve` compiles its search by default on a CPU, tens of seconds a server: the
# servers the tests start do not, unless a test asks (--compile; the default is tested in
# tests/serve/test_models.py)
os.environ.setdefault("TRANSDUCE_SERVE_COMPILE", "false")

# With several workers (scripts/test.sh), each worker and the commands it starts take their share
# of the CPU's cores, not all of them each: the test models are small, and two workers' threads
# on two cores waited on each other (two 30-update trainings side by side: 17-22 s with 2
# threads each, 10-11 s with 1; alone, 1 thread is quicker too, 8.0 s against 9.2)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_threads))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # and Inductor compiles in the process, not in a pool of its own (one per process that
    # compiles, started at its first graph: a compiled greedy search of the small model, from
    # an empty cache, 110 s in the process against 128 s with a pool of two)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # the commands it starts
    torch._inductor.config.compile_threads = int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])

# a compiled function that has reached Dynamo's limit of graphs runs eagerly, with a warning
# only: in a test of the compiled search that is an error, not an eager search that passes
torch._dynamo.config.fail_on_recompile_limit_hit = True


# The test modules that compile the search, most of them for models of one shape (tests/training/
# test_trainer.py's FAST with 40 positions) on this CPU's own kernel path: with several workers
# (scripts/test.sh) one worker takes them all, in one process, so that the graphs one compiles
# (30-80 s each on a 2-core CPU, even from Inductor's cache on disk) serve the others
COMPILING = ("tests/decoding/test_compiled.py", "tests/serve/test_models.py",
             "tests/test_every_option.py", "tests/test_score_command.py",
             "tests/test_translate_command.py")
_missing = [m for m in COMPILING if not (Path(__file__).parents[1] / m).is_file()]
assert not _missing, f"tests/conftest.py: COMPILING names modules that are not there: {_missing}"


def _scope(nodeid: str) -> str:
    """What one worker runs in one process: a module, or `COMPILING` together."""
    module = nodeid.split("::", 1)[0]
    return "compiling" if module in COMPILING else module


def pytest_collection_modifyitems(items):
    """The modules marked `first` (the longest: the docs' commands, the wheel) start first, then
    the rest, the scopes with the most tests first: with several workers (scripts/test.sh) the
    long ones start at once instead of one keeping a worker busy after the others are done (the
    wheel, last by xdist's own order of scopes, was the last two minutes of a CI run)."""
    tests = Counter(_scope(item.nodeid) for item in items)
    items.sort(key=lambda item: (item.get_closest_marker("first") is None,
                                 -tests[_scope(item.nodeid)]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's `--dist loadscope` (a module to a worker, `COMPILING` one scope), taking
    the scopes in the order of the collection (`pytest_collection_modifyitems`)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist's: by number of tests alone

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return Scheduling(config, log)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# each kernel path this installation has; those this CPU does not pick, `slow`
PATH_PARAMS = [pytest.param(path, marks=() if path == kernels.default_path() else pytest.mark.slow)
               for path in kernels.available()]


@pytest.fixture(params=PATH_PARAMS)
def kernel_path(request, monkeypatch):
    """Each kernel path this installation has (reference, mkl, onednn, openblas), whatever this
    machine's CPU would pick: a test taking this fixture runs once under each. The kernel, model
    and decoding tests take it for all their tests (their conftest.py). The paths this CPU does
    not pick are `slow`: the quick loop (-m "not slow") runs the CPU's own, CI every one. The
    sizes from which a layer goes to oneDNN or to OpenBLAS on their paths are scaled to the
    tests' small models (`TEST_ONEDNN_FROM`, `TEST_OPENBLAS_FROM`), so that they too have layers
    on both sides of them; and OpenBLAS's path runs on one thread, as it multiplies only for a
    caller on one (transduce.kernels.openblas)."""
    monkeypatch.setattr(linear_kernels, "ONEDNN_FROM", TEST_ONEDNN_FROM)
    monkeypatch.setattr(openblas_kernels, "FROM_FEATURES", TEST_OPENBLAS_FROM)
    threads = torch.get_num_threads()
    if request.param == "openblas":
        torch.set_num_threads(1)
    try:
        with kernels.using(request.param):
            yield request.param
    finally:
        torch.set_num_threads(threads)


# weight elements from which a layer goes to oneDNN on its path, in the tests: `small_model`'s
# feed-forward layers (48 x 32), packed projections (96 x 32) and output layer (50 x 32) go to
# oneDNN, its attention's output projections (32 x 32) stay with MKL
TEST_ONEDNN_FROM = 1536
# output features from which a layer goes to OpenBLAS on its path, in the tests: `small_model`'s
# output layer (50) and packed self-attention projections (96), not its feed-forward layers (48)
# or cross-attention's projections (slices of the packed one)
TEST_OPENBLAS_FROM = 50


# for a test of a module whose tests run on every kernel path (tests/decoding, tests/model)
# that checks what does not change with the path (a command, what the search does around the
# model): on this CPU's own path only
own_path_only = pytest.mark.parametrize("kernel_path", [kernels.default_path()], indirect=True)

# for a test of them that, on the reference path, would run what MKL's path runs again (the
# compiled search of the tests' small models: the same graphs, Inductor's cache finds the one
# in the other; searches on threads: PyTorch's own operations, no weights' copies kept between
# calls): every path but the reference
fast_paths_only = pytest.mark.parametrize(
    "kernel_path", [param for param in PATH_PARAMS if param.values[0] != "reference"]
    or [kernels.default_path()], indirect=True)


def small_config(**overrides) -> ModelConfig:
    """A model small enough for fast tests, with every dimension different to catch mix-ups."""
    fields = dict(src_vocab_size=50, tgt_vocab_size=50, d_model=32, n_heads=4, d_ff=48,
                  n_encoder_layers=2, n_decoder_layers=3, max_positions=64)
    return ModelConfig.preset("tiny", **{**fields, **overrides})


def small_model(**overrides) -> Transformer:
    return Transformer(small_config(**overrides)).eval()


def random_tokens(batch: int, length: int, vocab: int = 50) -> torch.Tensor:
    """Ids of real tokens only (no specials)."""
    return torch.randint(4, vocab, (batch, length))


SHARED_DATA = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                                  Path(__file__).resolve().parents[1].parent / "shared" / "data"))
MULTI30K = SHARED_DATA / "multi30k"

needs_multi30k = pytest.mark.skipif(
    not (MULTI30K / "train.en").is_file(),
    reason=f"Multi30k not found at {MULTI30K} (set TRANSDUCE_SHARED_DATA to the shared corpora)")


SEARCH = ("nbest", "prefixes", "constraints", "use_cache", "on_done",
          "generator")  # not DecodeConfig's


def beam_with(model, src, **settings):
    """`beam_search` with its DecodeConfig's fields given as keywords, as tests read best."""
    from transduce.decoding.beam import beam_search

    decode, rest = _split(settings)
    return beam_search(model, src, decode, **rest)


def greedy_with(model, src, **settings):
    from transduce.decoding.greedy import greedy_search

    decode, rest = _split(settings, beam_size=1)
    return greedy_search(model, src, decode, **rest)


def draw_with(model, src, *, temperature=1.0, top_k=0, top_p=1.0, **settings):
    from transduce.decoding.config import Sampling
    from transduce.decoding.greedy import sample

    decode, rest = _split(settings, beam_size=1)
    return sample(model, src, decode, Sampling(temperature, top_k, top_p), **rest)


def _split(settings: dict, **defaults):
    from transduce.decoding.config import DecodeConfig

    decode = {k: v for k, v in settings.items() if k not in SEARCH}
    return DecodeConfig(**{**defaults, **decode}), {k: v for k, v in settings.items()
                                                     if k in SEARCH}
