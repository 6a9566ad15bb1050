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
        return SegmentedCorpus(*self.segment(range(len(self.train)), [self.seed, epoch]))

    def segment(self, pairs, entropy: list[int]) -> tuple[list[list[int]], list[list[int]]]:
        """Source and target ids of the pairs numbered `pairs` (of `train`; one may come more
        than once, segmented each time anew), drawn from `entropy` alone."""
        src_seed, tgt_seed = np.random.SeedSequence(entropy).generate_state(2).tolist()
        pairs = list(pairs)
        srcs = self.tokenizers.src.sample_batch([self.src_texts[i] for i in pairs],
                                                dropout=self.dropout, seed=src_seed)
        tgts = self.tokenizers.tgt.sample_batch([self.tgt_texts[i] for i in pairs],
                                                dropout=self.dropout, seed=tgt_seed)
        for at, (i, s, t) in enumerate(zip(pairs, srcs, tgts, strict=True)):
            if max(len(s), len(t)) > self.max_length:
                srcs[at], tgts[at] = self.train.src(i).tolist(), self.train.tgt(i).tolist()
        return srcs, tgts


class MixtureDropout:
    """BPE-dropout over many corpora (`data.corpora`): each epoch's pairs of the mixture
    (transduce.data.corpora.Mixture), each segmented anew where it is taken (a corpus of weight
    2 gives each of its pairs twice, in two segmentations), with its tag and language token
    whole before its source, as in the corpus's shard. Only the pairs an epoch takes are
    segmented; which, and how, depends on (seed, epoch) alone."""

    def __init__(self, mixture, corpora, tokenizers: Tokenizers, *, dropout: float, seed: int,
                 max_length: int) -> None:
        self.mixture, self.seed = mixture, seed
        self.parts = [BpeDropout(part, shard, tokenizers, dropout=dropout, seed=seed,
                                 max_length=max_length)
                      for part, shard in zip(corpora.parts, mixture.shards, strict=True)]

    def epoch(self, epoch: int) -> SegmentedCorpus:
        taken = self.mixture.epoch(epoch, self.seed)
        srcs: list = [None] * len(taken)
        tgts: list = [None] * len(taken)
        for s, part in enumerate(self.parts):
            where = np.flatnonzero(taken.shard == s).tolist()
            src, tgt = part.segment(taken.index[where].tolist(), [self.seed, epoch, s])
            for at, a, b in zip(where, src, tgt, strict=True):
                srcs[at], tgts[at] = a, b
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
