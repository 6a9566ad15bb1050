"""transduce: the Transformer of "Attention Is All You Need" for machine translation."""

import os

# Large CPU tensors (logits, activations) are allocated and freed every step; backed by huge pages
# they cost a fraction of the page faults: a training step of the `tiny` model ran about 20%
# faster on 2 cores (benchmarks/train_step.py). Read by PyTorch at its first allocation, so set
# before importing torch; a user's own setting wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from transduce.api import resume, train  # noqa: E402
from transduce.decoding.translator import Translation, Translator  # noqa: E402
from transduce.model import ModelConfig, Transformer  # noqa: E402

__version__ = "0.1.0"

__all__ = ["ModelConfig", "Transformer", "Translation", "Translator", "__version__", "resume",
           "train"]
