"""A synthetic corpus made on the fly: English number words -> German or French number words.

"three hundred and forty-two" -> "dreihundertzweiundvierzig". It needs no download, trains a
small model in minutes on a CPU, and tests generalisation honestly: the train, valid and test
splits hold disjoint numbers, all drawn deterministically from the seed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from num2words import CONVERTER_CLASSES

from transduce.errors import DataError

SPLITS = ("train", "valid", "test")
LANGUAGES = ("en", "de", "fr")


@dataclass(frozen=True)
class NumberWords:
    """One split of the number-words corpus, as a parallel corpus (see `pairs`)."""

    split: str = "train"
    src_lang: str = "en"
    tgt_lang: str = "de"
    seed: int = 1
    max_number: int = 999_999  # numbers are drawn from 0 .. max_number
    sizes: tuple[int, int, int] = (50_000, 1_000, 1_000)  # train, valid, test

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise DataError(f"numbers corpus: unknown split {self.split!r}; choose one of {SPLITS}")
        for lang in (self.src_lang, self.tgt_lang):
            if lang not in LANGUAGES:
                raise DataError(f"numbers corpus: language {lang!r} not supported; choose from "
                                f"{LANGUAGES}")
        if sum(self.sizes) > self.max_number + 1:
            raise DataError(f"numbers corpus: {sum(self.sizes):,} distinct numbers requested but "
                            f"only {self.max_number + 1:,} exist up to {self.max_number:,}")

    def numbers(self) -> np.ndarray:
        """The numbers of this split: one seeded draw without replacement, cut into the splits.

        Each digit count is drawn equally often (while it lasts), so short numbers are not
        drowned out by the many six-digit ones.
        """
        candidates = np.arange(self.max_number + 1)
        digits = np.floor(np.log10(np.maximum(candidates, 1))).astype(np.int64)
        weights = 1.0 / np.bincount(digits)[digits]
        rng = np.random.default_rng(self.seed)
        drawn = rng.choice(candidates, size=sum(self.sizes), replace=False,
                           p=weights / weights.sum())
        start = sum(self.sizes[: SPLITS.index(self.split)])
        return drawn[start : start + self.sizes[SPLITS.index(self.split)]]

    def pairs(self) -> Iterator[tuple[str, str]]:
        yield from _number_words(self)

    @property
    def files(self) -> tuple:
        return ()

    def __str__(self) -> str:
        return (f"numbers {self.src_lang}-{self.tgt_lang} {self.split} (seed {self.seed}, "
                f"0..{self.max_number:,})")


@functools.lru_cache(maxsize=8)
def _number_words(corpus: NumberWords) -> tuple[tuple[str, str], ...]:
    """Spelt once per process: num2words is slow enough to matter for 50,000 German words."""
    src = CONVERTER_CLASSES[corpus.src_lang].to_cardinal
    tgt = CONVERTER_CLASSES[corpus.tgt_lang].to_cardinal
    return tuple((src(n), tgt(n)) for n in corpus.numbers().tolist())
