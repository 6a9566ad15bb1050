"""transduce: the Transformer of "Attention Is All You Need" for machine translation."""

from transduce import runtime

# large CPU tensors are allocated and freed every step: see transduce/runtime.py
runtime.use_huge_pages()  # before torch is imported
runtime.keep_freed_memory()

from transduce.api import resume, train  # noqa: E402
from transduce.decoding.translator import Translation, Translator  # noqa: E402
from transduce.model import ModelConfig, Transformer  # noqa: E402

__version__ = "0.1.0"

__all__ = ["ModelConfig", "Transformer", "Translation", "Translator", "__version__", "resume",
           "train"]
