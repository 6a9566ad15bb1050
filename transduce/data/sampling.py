"""BPE-dropout (Provilkov et al., 2020): a new random segmentation of the training text each epoch.

While a word is split, each BPE merge is skipped with probability p, so over the epochs the model
sees one word as several sequences of subwords: a regulariser for small corpora. Validation,
translation and evaluation keep the one deterministic segmentation. An epoch's segmentation
depends only on (seed, epoch), so a resumed run sees what the uninterrupted one would have.
"""

from __future__ import annotations

import numpy as np

from transduce.data.binarize import TokenizedCorpus
from transduce.data.tokenizer import Tokenizers
from transduce.errors import DataError


class SegmentedCorpus:
    """Token ids of every training pair for one epoch; reads like a `TokenizedCorpus`."""

    def __init__(self, srcs: list[list[int]], tgts: list[list[int]]) -> None:
        self.srcs, self.tgts = srcs, tgts
        self.src_lengths = np.fromiter(map(len, srcs), np.int32, count=len(srcs))
        self.tgt_lengths = np.fromiter(map(len, tgts), np.int32, count=len(tgts))

    def __len__(self) -> int:
        return len(self.srcs)

    def src(self, i: int) -> list[int]:
        return self.srcs[i]

    def tgt(self, i: int) -> list[int]:
        return self.tgts[i]


class BpeDropout:
    """The training pairs of `train` (a binarized corpus of `corpus`) segmented anew per epoch.

    Holds the training text in memory. A pair whose sampled segmentation has a side longer than
    `max_length` tokens keeps its deterministic one that epoch.
    """

    def __init__(self, corpus, train: TokenizedCorpus, tokenizers: Tokenizers, *,
                 dropout: float, seed: int, max_length: int) -> None:
        self.train = train
        self.tokenizers = tokenizers
        self.dropout = dropout
        self.seed = seed
        self.max_length = max_length
        self.src_texts, self.tgt_texts = _kept_texts(corpus, train.pair_ids)

    def epoch(self, epoch: int) -> SegmentedCorpus:
        src_seed, tgt_seed = np.random.SeedSequence([self.seed, epoch]).generate_state(2).tolist()
        srcs = self.tokenizers.src.sample_batch(self.src_texts, dropout=self.dropout,
                                                seed=src_seed)
        tgts = self.tokenizers.tgt.sample_batch(self.tgt_texts, dropout=self.dropout,
                                                seed=tgt_seed)
        for i, (s, t) in enumerate(zip(srcs, tgts, strict=True)):
            if max(len(s), len(t)) > self.max_length:
                srcs[i], tgts[i] = self.train.src(i).tolist(), self.train.tgt(i).tolist()
        return SegmentedCorpus(srcs, tgts)


def _kept_texts(corpus, pair_ids: np.ndarray) -> tuple[list[str], list[str]]:
    """The source and target text of the pairs numbered `pair_ids` (ascending) in `corpus`."""
    wanted = iter(pair_ids.tolist())
    next_id = next(wanted, None)
    srcs, tgts = [], []
    for number, (src, tgt) in enumerate(corpus.pairs()):
        if number == next_id:
            srcs.append(src)
            tgts.append(tgt)
            next_id = next(wanted, None)
    if next_id is not None:
        raise DataError(f"{corpus}: pair {next_id + 1} of the binarized cache is missing; the "
                         "corpus changed under it")
    return srcs, tgts
