"""The training data, epoch after epoch: each epoch's pairs (segmented anew under BPE-dropout,
both ways round in the first bidirectional epochs) and its shuffled batches, streamed from any
position, so that a resumed run sees the batches it would have seen."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from transduce.data.batching import Batch, TokenBatches, collate
from transduce.data.config import DataConfig
from transduce.data.directions import BothDirections
from transduce.data.prepare import PreparedData
from transduce.data.sampling import BpeDropout, MixtureDropout

log = logging.getLogger("transduce.train")


class Epochs:
    def __init__(self, data: PreparedData, config: DataConfig, *, seed: int) -> None:
        self.train = data.train
        self.mixture = data.mixture  # data.corpora: each epoch its own sample of them
        self.specials = data.tokenizers.specials
        self.max_tokens = config.max_tokens
        self.both_ways = config.bidirectional_epochs
        self.seed = seed
        self.batches = TokenBatches.of(data.train, config.max_tokens, seed=seed)
        self.bpe_dropout = None  # each epoch's pairs, segmented anew
        if config.bpe_dropout:
            settings = dict(dropout=config.bpe_dropout, seed=seed, max_length=data.max_length)
            self.bpe_dropout = (
                BpeDropout(data.train_corpus, data.train, data.tokenizers, **settings)
                if self.mixture is None else
                MixtureDropout(self.mixture, data.train_corpus, data.tokenizers, **settings))
        self._cached: tuple = (None, None, None)  # (epoch, its training pairs, its batches)

    def epoch(self, epoch: int):
        """The training pairs as segmented for `epoch` and that epoch's batches (of indices)."""
        if self._cached[0] != epoch:
            pairs, batches = self.train, self.batches
            if self.bpe_dropout is not None:  # of the mixture's pairs, with corpora
                pairs = self.bpe_dropout.epoch(epoch)
            elif self.mixture is not None:
                pairs = self.mixture.epoch(epoch, self.seed)
            if epoch < self.both_ways:
                pairs = BothDirections(pairs)
            elif epoch == self.both_ways > 0:
                log.info("epoch %d: source -> target alone from here (%d epochs both ways)",
                         epoch + 1, self.both_ways)
            if pairs is not self.train:
                batches = TokenBatches.of(pairs, self.max_tokens, seed=self.seed)
            self._cached = (epoch, pairs, batches.epoch(epoch))
        return self._cached[1:]

    def stream(self, position) -> Iterator[Batch]:
        """Batches from `position` (anything with `epoch` and `batch_in_epoch`, the progress of
        a run) onward, across epochs, advancing it batch by batch."""
        while True:
            pairs, batches = self.epoch(position.epoch)
            while position.batch_in_epoch < len(batches):
                ids = batches[position.batch_in_epoch]
                position.batch_in_epoch += 1
                yield collate(pairs, ids, self.specials)
            position.epoch += 1
            position.batch_in_epoch = 0

    def done(self, position) -> float:
        """Epochs completed at `position`, with the fraction of the current one."""
        return position.epoch + position.batch_in_epoch / max(len(self.epoch(position.epoch)[1]),
                                                              1)
