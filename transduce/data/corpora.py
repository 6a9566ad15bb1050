"""Many training corpora (`data.corpora`): each prepared once into its own memory-mapped shard
with the one shared tokenizer, and each epoch sampled from them.

An epoch takes E = sum(weight x size) pairs, shared among the corpora in proportion to
(weight x size)^(1/T) (`data.temperature`): at T = 1 each corpus gives weight x size pairs
(weight 2: all of it twice; 0.5: a different half each epoch), and a higher T moves the shares
towards equal ones, as multilingual models do for their smaller languages. Which pairs a
fraction takes depends only on (seed, epoch, corpus), so a resumed run sees the epochs an
uninterrupted one would have.

A corpus's `tag` (<BT> for back-translation, a domain) and, for a model of several target
languages, the target language's token (<2de>) come before each source; the tokenizer keeps
them whole (SentencePiece user-defined symbols).
"""

from __future__ import annotations

import numpy as np

from transduce.data.binarize import TokenizedCorpus
from transduce.data.config import CorpusConfig, DataConfig, language_token
from transduce.data.corpus import SkipCounts


def source_prefix(corpus: CorpusConfig, config: DataConfig) -> str:
    """The tokens before each source of `corpus` ("" for none): its tag, then the target
    language's token."""
    language = corpus.tgt_lang or config.tgt_lang
    tokens = [corpus.tag] if corpus.tag else []
    if config.languages_tagged:
        tokens.append(language_token(language))
    return " ".join(tokens)


class Prefixed:
    """A corpus whose sources start with `prefix` (and a space)."""

    def __init__(self, corpus, prefix: str) -> None:
        self.corpus, self.prefix = corpus, prefix

    def pairs(self):
        for src, tgt in self.corpus.pairs():
            yield f"{self.prefix} {src}", tgt

    @property
    def files(self):
        return self.corpus.files

    def __repr__(self) -> str:
        return f"Prefixed({self.corpus!r}, {self.prefix!r})"

    def __str__(self) -> str:
        return f"{self.corpus} ({self.prefix} before each source)"


class Corpora:
    """The corpora of `data.corpora`, each with its sources' prefix (tag, language token)."""

    def __init__(self, corpora: list, prefixes: list[str]) -> None:
        self.parts = [Prefixed(c, p) if p else c for c, p in zip(corpora, prefixes, strict=True)]

    def pairs(self):
        for part in self.parts:
            yield from part.pairs()

    @property
    def files(self):
        return tuple(f for part in self.parts for f in part.files)

    def __repr__(self) -> str:
        return f"Corpora({self.parts!r})"

    def __str__(self) -> str:
        return f"{len(self.parts)} corpora"


def epoch_counts(sizes: list[int], weights: list[float], temperature: float) -> list[int]:
    """How many pairs an epoch takes from each corpus (see the module's docstring)."""
    weighted = np.asarray(sizes, dtype=np.float64) * np.asarray(weights, dtype=np.float64)
    if not weighted.sum():
        return [0] * len(sizes)
    shares = weighted ** (1.0 / temperature)
    return np.rint(weighted.sum() * shares / shares.sum()).astype(np.int64).tolist()


class Pairs:
    """Pairs drawn from shards, reading like a `TokenizedCorpus`: pair i is pair `index[i]` of
    shard `shard[i]`."""

    def __init__(self, shards: list[TokenizedCorpus], shard: np.ndarray,
                 index: np.ndarray) -> None:
        self.shards, self.shard, self.index = shards, shard, index
        self.src_lengths = np.zeros(len(index), dtype=np.int32)
        self.tgt_lengths = np.zeros(len(index), dtype=np.int32)
        for s, corpus in enumerate(shards):
            mine = shard == s
            self.src_lengths[mine] = corpus.src_lengths[index[mine]]
            self.tgt_lengths[mine] = corpus.tgt_lengths[index[mine]]

    def __len__(self) -> int:
        return len(self.index)

    def src(self, i: int) -> np.ndarray:
        return self.shards[self.shard[i]].src(self.index[i])

    def tgt(self, i: int) -> np.ndarray:
        return self.shards[self.shard[i]].tgt(self.index[i])

    @property
    def skips(self) -> SkipCounts:
        """What the shards' filters kept and dropped, together."""
        total = SkipCounts()
        for corpus in self.shards:
            skips = corpus.skips
            for reason in ("kept", "empty", "too_long", "length_ratio"):
                setattr(total, reason, getattr(total, reason) + getattr(skips, reason))
        return total


class Mixture:
    """The shards of `data.corpora`, and the pairs each epoch takes from them."""

    def __init__(self, shards: list[TokenizedCorpus], weights: list[float], *,
                 temperature: float) -> None:
        self.shards = shards
        self.sizes = [len(s) for s in shards]
        self.counts = epoch_counts(self.sizes, weights, temperature)

    def whole(self) -> Pairs:
        """Every pair of every shard, once."""
        return self._pairs([np.arange(n) for n in self.sizes])

    def epoch(self, epoch: int, seed: int) -> Pairs:
        """The pairs of `epoch`: each corpus whole as often as its count holds it, then a
        sample without replacement for the rest, drawn from (seed, epoch, corpus)."""
        chosen = []
        for s, (size, count) in enumerate(zip(self.sizes, self.counts, strict=True)):
            whole, rest = divmod(count, size) if size else (0, 0)
            rng = np.random.default_rng([seed, epoch, s])
            sample = np.sort(rng.choice(size, rest, replace=False)) if rest else []
            chosen.append(np.concatenate([np.tile(np.arange(size), whole),
                                          np.asarray(sample, dtype=np.int64)]))
        return self._pairs(chosen)

    def _pairs(self, chosen: list[np.ndarray]) -> Pairs:
        """The epoch's pairs: each pair's shard and index there in as few bytes as hold them
        (2 and 4 up to 32,767 corpora of 2**31 pairs), besides its lengths."""
        shard_type = np.int16 if len(chosen) < 2**15 else np.int32
        shard = np.concatenate([np.full(len(c), s, dtype=shard_type)
                                for s, c in enumerate(chosen)])
        index_type = np.int32 if max(self.sizes, default=0) < 2**31 else np.int64
        index = np.concatenate([c.astype(index_type) for c in chosen])
        return Pairs(self.shards, shard, index)
