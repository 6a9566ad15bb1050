"""transduce: the Transformer of "Attention Is All You Need" for machine translation."""

from transduce.api import resume, train
from transduce.decoding.translator import Translation, Translator
from transduce.model import ModelConfig, Transformer

__version__ = "0.1.0"

__all__ = ["ModelConfig", "Transformer", "Translation", "Translator", "__version__", "resume",
           "train"]
