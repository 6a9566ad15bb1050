import os
from pathlib import Path

import pytest
import torch

from transduce import ModelConfig, Transformer, kernels

PAD = 1


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=kernels.available())
def kernel_path(request):
    """Each kernel path this PyTorch has (reference, mkl, onednn), whatever this machine's CPU
    would pick: a test taking this fixture runs once under each. The kernel, model and decoding
    tests take it for all their tests (their conftest.py)."""
    with kernels.using(request.param):
        yield request.param


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
