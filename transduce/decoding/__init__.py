"""Search: from a source sentence to the most likely translation."""

from transduce.decoding.greedy import greedy_search

__all__ = ["greedy_search"]
