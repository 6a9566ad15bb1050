"""Parallel corpora in, shared-subword token batches out."""

from transduce.data.batching import Batch, TokenBatches, collate
from transduce.data.binarize import KEEP_ALL, PairFilter, TokenizedCorpus, binarize
from transduce.data.corpus import ParallelFiles, SkipCounts, TsvFile, read_lines
from transduce.data.datasets import known_corpus, multi30k
from transduce.data.numbers import NumberWords
from transduce.data.tokenizer import SentencePieceTokenizer, Tokenizers, WordTokenizer

__all__ = [
    "KEEP_ALL", "Batch", "NumberWords", "PairFilter", "ParallelFiles", "SentencePieceTokenizer",
    "SkipCounts", "TokenBatches", "TokenizedCorpus", "Tokenizers", "TsvFile", "WordTokenizer",
    "binarize", "collate", "known_corpus", "multi30k", "read_lines",
]
