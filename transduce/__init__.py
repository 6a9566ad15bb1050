"""transduce: the Transformer of "Attention Is All You Need" for machine translation."""

from transduce.model import ModelConfig, Transformer

__version__ = "0.1.0"

__all__ = ["ModelConfig", "Transformer", "__version__"]
