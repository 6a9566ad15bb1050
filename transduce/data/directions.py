"""Bidirectional training (Ding et al., 2021, "Improving Neural Machine Translation by
Bidirectional Training"): the first epochs train on every pair both ways, source -> target and
target -> source, the rest on source -> target alone. No language tag is needed: the input's
language says which way to translate. It needs one shared vocabulary, so that a target sentence's
ids mean the same on the source side.
"""

from __future__ import annotations

import numpy as np


class BothDirections:
    """Every pair of `corpus` twice: as it is (pairs 0..n-1), then reversed (n..2n-1).

    Reads like a `TokenizedCorpus` and wraps anything that does (a `SegmentedCorpus` too).
    """

    def __init__(self, corpus) -> None:
        self.corpus = corpus
        self.n = len(corpus)
        self.src_lengths = np.concatenate([corpus.src_lengths, corpus.tgt_lengths])
        self.tgt_lengths = np.concatenate([corpus.tgt_lengths, corpus.src_lengths])

    def __len__(self) -> int:
        return 2 * self.n

    def src(self, i: int):
        return self.corpus.src(i) if i < self.n else self.corpus.tgt(i - self.n)

    def tgt(self, i: int):
        return self.corpus.tgt(i) if i < self.n else self.corpus.src(i - self.n)
