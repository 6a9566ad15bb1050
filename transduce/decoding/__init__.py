"""Search: from a source sentence to the most likely translation."""

from typing import TYPE_CHECKING

from transduce.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "transduce.decoding.beam": ("Hypothesis", "beam_search"),
    "transduce.decoding.ensemble": ("Ensemble",),
    "transduce.decoding.greedy": ("greedy_search", "sample"),
})

if TYPE_CHECKING:
    from transduce.decoding.beam import Hypothesis, beam_search
    from transduce.decoding.ensemble import Ensemble
    from transduce.decoding.greedy import greedy_search, sample

__all__ = ["Ensemble", "Hypothesis", "beam_search", "greedy_search", "sample"]
