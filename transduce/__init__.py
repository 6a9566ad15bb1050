"""transduce: the Transformer of "Attention Is All You Need" for machine translation."""

from typing import TYPE_CHECKING

from transduce.exports import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports(__name__, {
    "transduce.api": ("train", "resume"),
    "transduce.decoding.translator": ("Translation", "Translator"),
    "transduce.model.config": ("ModelConfig",),
    "transduce.model.transformer": ("Transformer",),
})

if TYPE_CHECKING:  # for type checkers and editors; at run time, loaded on first use
    from transduce.api import resume, train
    from transduce.decoding.translator import Translation, Translator
    from transduce.model import ModelConfig, Transformer

__all__ = ["ModelConfig", "Transformer", "Translation", "Translator", "__version__", "resume",
           "train"]
