"""Parallel corpora in, shared-subword token batches out."""

from typing import TYPE_CHECKING

from transduce.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "transduce.data.batching": ("Batch", "TokenBatches", "collate"),
    "transduce.data.binarize": ("KEEP_ALL", "PairFilter", "TokenizedCorpus", "binarize"),
    "transduce.data.corpus": ("ParallelFiles", "SkipCounts", "TsvFile", "read_lines"),
    "transduce.data.datasets": ("known_corpus", "multi30k"),
    "transduce.data.numbers": ("NumberWords",),
    "transduce.data.tokenizer": ("SentencePieceTokenizer", "Tokenizers", "WordTokenizer"),
})

if TYPE_CHECKING:
    from transduce.data.batching import Batch, TokenBatches, collate
    from transduce.data.binarize import KEEP_ALL, PairFilter, TokenizedCorpus, binarize
    from transduce.data.corpus import ParallelFiles, SkipCounts, TsvFile, read_lines
    from transduce.data.datasets import known_corpus, multi30k
    from transduce.data.numbers import NumberWords
    from transduce.data.tokenizer import SentencePieceTokenizer, Tokenizers, WordTokenizer

__all__ = [
    "Batch", "KEEP_ALL", "NumberWords", "PairFilter", "ParallelFiles", "SentencePieceTokenizer",
    "SkipCounts", "TokenBatches", "TokenizedCorpus", "Tokenizers", "TsvFile", "WordTokenizer",
    "binarize", "collate", "known_corpus", "multi30k", "read_lines",
]
