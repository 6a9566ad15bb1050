"""On a GPU: training resumes to the bit in each precision, DistributedDataParallel and FSDP2
over NCCL take the update of the plain model, and the search keeps its contracts (beam 1 =
greedy, cached = uncached, a sentence alone = in its batch). Skipped where PyTorch sees no
CUDA device (CI's machines); run them on one with `pytest tests/gpu`."""

import copy
import os
import socket

import pytest
import torch

from tests.conftest import beam_with, greedy_with, random_tokens, small_model
from tests.decoding.test_beam import _batch
from tests.decoding.test_greedy import _model_that_stops
from tests.training.test_trainer import _config, _weights
from transduce.training.objective import Objective
from transduce.training.start import resume_run, start_run

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU here: these run on a GPU machine")
CUDA = torch.device("cuda", 0)


@pytest.fixture
def deterministic():
    """CUDA's deterministic kernels (some sums, e.g. an embedding's gradient, are otherwise
    atomic additions in whatever order the threads come)."""
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_on_the_gpu_resumes_to_the_bit(tmp_path, precision, deterministic):
    extra = ["train.device=cuda", f"train.precision={precision}"]
    straight = start_run(_config(*extra, "train.max_updates=20"), tmp_path / "a")
    assert straight.device.type == "cuda" and straight.precision == precision
    straight.train()
    start_run(_config(*extra, "train.max_updates=10"), tmp_path / "b").train()
    resumed = resume_run(tmp_path / "b", ["train.max_updates=20"])
    assert resumed.progress.update == 10
    resumed.train()
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.isfinite(a[key]).all(), key
        assert torch.equal(a[key], b[key]), key
    untrained = start_run(_config(*extra), tmp_path / "c").model.state_dict()
    assert not torch.equal(a["encoder.layers.0.self_attn.in_proj.weight"],
                           untrained["encoder.layers.0.self_attn.in_proj.weight"].cpu())


def test_the_search_keeps_its_contracts_on_the_gpu():
    model = _model_that_stops().to(CUDA)
    src = _batch().to(CUDA)
    greedy = greedy_with(model, src, max_len_a=0, max_len_b=12)
    beam = beam_with(model, src, beam_size=1, length_penalty=0.6, max_len_a=0, max_len_b=12)
    assert [h[0].tokens for h in beam] == [tuple(g) for g in greedy]
    assert len({len(g) for g in greedy}) > 1  # they finish at different steps
    kw = dict(beam_size=4, max_len_a=0, max_len_b=10, nbest=4)
    cached, uncached = beam_with(model, src, **kw), beam_with(model, src, use_cache=False, **kw)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    alone = [beam_with(model, src[i:i + 1], **kw)[0][0].tokens for i in range(len(src))]
    assert alone == [hs[0].tokens for hs in cached]
    on_cpu = beam_with(model.cpu(), src.cpu(), **kw)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(cached, on_cpu, strict=True))
    assert same >= len(src) - 1, f"{same} of {len(src)} as on the CPU"


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_pytorchs_engines_over_nccl_take_the_plain_update(parallel, precision, deterministic):
    """One process in an NCCL group: DDP's buckets, summing hook and no_sync around the
    accumulated batches, or FSDP2's gathered and reduce-scattered shards, give the gradients of
    the model alone, to the bit."""
    import torch.distributed as dist

    from transduce.training.parallel import DataParallel, FullyShardedParallel, Local

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=CUDA)
    try:
        model = small_model(dropout=0.0).train()
        shared = {"ddp": DataParallel, "fsdp": FullyShardedParallel}[parallel]
        engines = [engine(Objective(copy.deepcopy(model).to(CUDA), label_smoothing=0.1), CUDA)
                   for engine in (Local, shared)]
        batches = [(random_tokens(8, 10), random_tokens(8, 9), random_tokens(8, 9))
                   for _ in range(3)]
        for engine in engines:
            for i, batch in enumerate(batches):
                with engine.sync(last=i == len(batches) - 1), torch.autocast(
                        "cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    engine.objective(*(t.to(CUDA) for t in batch)).backward()
        plain, other = (dict(e.model.named_parameters()) for e in engines)
        for name, parameter in plain.items():
            assert parameter.grad is not None and other[name].grad is not None, name
            grad = other[name].grad
            grad = grad.full_tensor() if hasattr(grad, "full_tensor") else grad  # FSDP's shard
            assert torch.equal(parameter.grad, grad), name
        assert engines[1].sum(2.5) == 2.5
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_on_the_gpu_kernels_is_attention_written_out(dtype):
    """The fused kernels a GPU runs (not cuDNN's) against the definition, padding and causal."""
    from transduce.model.attention import attention, attention_with_weights

    q, k, v = (torch.randn(3, 4, 7, 16, device=CUDA, dtype=dtype) for _ in range(3))
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool, device=CUDA)
    mask[1, ..., 5:] = False  # a padded source
    for kw in (dict(mask=mask), dict(causal=True)):
        fused = attention(q.requires_grad_(), k, v, **kw)
        written = attention_with_weights(q.float(), k.float(), v.float(), **kw)[0]
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(fused.float(), written, atol=tolerance, rtol=tolerance)


def test_the_fused_loss_on_the_gpu_is_the_loss_on_the_cpu():
    """One chunk of positions on a GPU, 64 at a time on a CPU: the same loss and gradients."""
    from transduce.kernels.loss import _rows
    from transduce.training.loss import projected_label_smoothed_cross_entropy

    hidden, weight = torch.randn(300, 32), torch.randn(500, 32)
    target = torch.randint(4, 500, (300,))
    target[::7] = 1  # padding
    results = []
    for device in ("cpu", CUDA):
        h, w = (t.to(device).detach().requires_grad_() for t in (hidden, weight))  # leaves
        loss = projected_label_smoothed_cross_entropy(h, w, target.to(device), epsilon=0.1)
        loss.backward()
        results.append([t.detach().cpu() for t in (loss, h.grad, w.grad)])
    assert _rows(torch.empty(300, 500, device=CUDA)) >= 300 > _rows(torch.empty(300, 500))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_search_replayed_from_cuda_graphs_finds_the_eager_tokens(dtype):
    """`--compile` on a GPU (transduce.decoding.graphed): each step captured once for its
    padded shape and replayed, in searches whose sentences finish at different steps; the
    graphs kept for the next search."""
    from transduce.decoding.graphed import Graphed

    model = _model_that_stops().to(CUDA, dtype)
    src = _batch(n=7).to(CUDA)  # 7 sources: graphs of 8
    kw = dict(max_len_a=0, max_len_b=12)
    graphed = Graphed(model)
    eager = greedy_with(model, src, **kw)
    assert len({len(g) for g in eager}) > 1
    # the graphs attend over sources padded to 16 positions, masked: in bf16 another kernel
    # tiling's rounding may turn a near tie (one sentence of the seven, at most)
    least = len(src) if dtype == torch.float32 else len(src) - 1
    for _ in range(2):  # captured, then replayed
        same = zip(greedy_with(graphed, src, **kw), eager, strict=True)
        assert sum(a == b for a, b in same) >= least
    [storage] = graphed._free
    assert all(slot.graph is not None for slot in storage.slots.values())
    for k in (1, 4):
        ours, theirs = (beam_with(m, src, beam_size=k, nbest=k, **kw) for m in (graphed, model))
        assert sum([h.tokens for h in a] == [h.tokens for h in b]
                   for a, b in zip(ours, theirs, strict=True)) >= least
