"""Search: from a source sentence to the most likely translation."""

from transduce.decoding.beam import Hypothesis, beam_search
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.greedy import greedy_search, sample

__all__ = ["Ensemble", "Hypothesis", "beam_search", "greedy_search", "sample"]
