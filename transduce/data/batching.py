"""Batches by number of tokens, with pairs of similar length together so that padding is small.

Each epoch shuffles the pairs with a generator seeded by (seed, epoch), sorts them by length
(ties keep the shuffled order), cuts the sorted run into batches of at most `max_tokens` padded
tokens, and shuffles the batches. Same seed and epoch: the same batches; another epoch: another
order; every pair exactly once per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from transduce.data.binarize import TokenizedCorpus
from transduce.data.tokenizer import SPECIAL_IDS
from transduce.errors import DataError


@dataclass
class Batch:
    """One batch of training pairs, right-padded with <pad>.

    src (B, S): source ids ending with <eos>; tgt_in (B, T): decoder input, <bos> first;
    tgt_out (B, T): what the decoder must predict, ending with <eos>; src_lengths and
    tgt_lengths (B,): real lengths of src and tgt_out; ids (B,): indices into the corpus.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    src_lengths: Tensor
    tgt_lengths: Tensor
    ids: Tensor

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def n_tgt_tokens(self) -> int:
        return int(self.tgt_lengths.sum())

    def to(self, device: torch.device | str) -> Batch:
        non_blocking = torch.device(device).type == "cuda"
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in
                       (self.src, self.tgt_in, self.tgt_out, self.src_lengths, self.tgt_lengths,
                        self.ids)))


def collate(corpus: TokenizedCorpus, ids: np.ndarray, specials: dict = SPECIAL_IDS) -> Batch:
    """The pairs `ids` of `corpus` as padded tensors, with the tokenizers' `specials` (those of
    transduce's own tokenizers unless given: an imported model has its own)."""
    PAD, BOS, EOS = specials["pad_id"], specials["bos_id"], specials["eos_id"]  # noqa: N806
    src_len = corpus.src_lengths[ids] + 1  # + <eos>
    tgt_len = corpus.tgt_lengths[ids] + 1  # + <bos> on input, + <eos> on output
    src = np.full((len(ids), src_len.max()), PAD, dtype=np.int64)
    tgt = np.full((len(ids), tgt_len.max() + 1), PAD, dtype=np.int64)
    for row, i in enumerate(ids.tolist()):
        s, t = corpus.src(i), corpus.tgt(i)
        src[row, : len(s)] = s
        src[row, len(s)] = EOS
        tgt[row, 0] = BOS
        tgt[row, 1 : len(t) + 1] = t
        tgt[row, len(t) + 1] = EOS
    tgt_in = tgt[:, :-1].copy()
    tgt_in[tgt_in == EOS] = PAD  # the decoder never reads <eos>
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in),
                 torch.from_numpy(tgt[:, 1:].copy()), torch.from_numpy(src_len.astype(np.int64)),
                 torch.from_numpy(tgt_len.astype(np.int64)), torch.from_numpy(ids.astype(np.int64)))


class TokenBatches:
    """The batches of a corpus for any epoch, as arrays of corpus indices.

    A batch's cost is its padded size: B x max(S, T), with S and T counting <eos> / <bos>.
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, *,
                 seed: int = 1, shuffle: bool = True) -> None:
        # the lengths as given (a corpus's memory-mapped int32), sizes made from them as needed:
        # what a run holds does not grow with its corpus (docs/speed.md)
        self.src_lengths, self.tgt_lengths = np.asarray(src_lengths), np.asarray(tgt_lengths)
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        longest = int(self.sizes().max(initial=0))
        if longest > max_tokens:
            raise DataError(f"data.max_tokens={max_tokens} is smaller than the longest pair "
                            f"({longest} tokens); raise it or lower data.max_length")

    def sizes(self, ids: np.ndarray | None = None) -> np.ndarray:
        """The padded width each pair (or the pairs `ids`) needs: max(S, T)."""
        src, tgt = self.src_lengths, self.tgt_lengths
        if ids is not None:
            src, tgt = src[ids], tgt[ids]
        return np.maximum(src, tgt).astype(np.int32) + 1

    @classmethod
    def of(cls, corpus: TokenizedCorpus, max_tokens: int, **kwargs) -> TokenBatches:
        return cls(corpus.src_lengths, corpus.tgt_lengths, max_tokens, **kwargs)

    def epoch(self, epoch: int = 0) -> list[np.ndarray]:
        n = len(self.src_lengths)
        index = np.int32 if n < 2**31 else np.int64  # 4 bytes a pair kept for the epoch
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(np.arange(n, dtype=index))  # permutation(n)'s order
        else:
            rng, order = None, np.arange(n, dtype=index)
        # by target length, then source length; np.lexsort is stable, so ties stay shuffled
        order = order[np.lexsort((self.src_lengths[order], self.tgt_lengths[order]))]
        batches = self._cut(order)
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _cut(self, order: np.ndarray) -> list[np.ndarray]:
        sizes = self.sizes(order).tolist()
        bounds, start, longest = [0], 0, 0
        for i, size in enumerate(sizes):
            longest = max(longest, size)
            if (i - start + 1) * longest > self.max_tokens:
                bounds.append(i)
                start, longest = i, size
        bounds.append(len(sizes))
        return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]

    def padding_fraction(self, epoch: int = 0) -> float:
        """Share of padding among all token slots (source and target) of an epoch's batches."""
        real = padded = 0
        for ids in self.epoch(epoch):
            s, t = self.src_lengths[ids] + 1, self.tgt_lengths[ids] + 1
            real += int(s.sum() + t.sum())
            padded += len(ids) * int(s.max() + t.max())
        return 1 - real / padded if padded else 0.0
