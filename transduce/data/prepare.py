"""From a `DataConfig` to tokenizers and binarized training and validation data."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path

from transduce.data.binarize import PairFilter, TokenizedCorpus, binarize
from transduce.data.config import DataConfig
from transduce.data.corpora import Corpora, Mixture, Prefixed, source_prefix
from transduce.data.corpus import ParallelFiles, TsvFile
from transduce.data.datasets import known_corpus
from transduce.data.numbers import NumberWords
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError

log = logging.getLogger(__name__)


def corpus(config: DataConfig, split: str):
    """The corpus of a split ("train", "valid", "test") as the configuration describes it, or
    None when it names no such split."""
    if config.dataset == "numbers":
        sizes = (config.numbers_train_size, 1000, 1000)
        return NumberWords(split, config.src_lang, config.tgt_lang, seed=config.seed,
                           max_number=config.numbers_max, sizes=sizes)
    if config.dataset is not None:
        return known_corpus(config.dataset, split, config.src_lang, config.tgt_lang,
                            data_dir=config.dir, cache_dir=config.cache_dir, seed=config.seed)
    if split == "train" and config.corpora:
        return Corpora([_files(c.src, c.tgt, c.tsv) for c in config.corpora],
                       [source_prefix(c, config) for c in config.corpora])
    return _files(*(getattr(config, f"{split}_{k}", None) for k in ("src", "tgt", "tsv")))


def _files(src: str | None, tgt: str | None, tsv: str | None):
    if tsv:
        return TsvFile(Path(tsv))
    if src and tgt:
        return ParallelFiles(Path(src), Path(tgt))
    return None


FILES = [f"{split}_{side}" for split in ("train", "valid") for side in ("src", "tgt", "tsv")]


def check_files(config: DataConfig, flag=lambda key: f"data.{key}") -> None:
    """A UserError naming the setting (`flag(key)`) of the first corpus file that is not there,
    before minutes go into learning a vocabulary from the others."""
    for key in FILES:
        path = getattr(config, key)
        if path and config.dataset is None and not Path(path).is_file():
            raise UserError(f"{flag(key)} {path}: no such file")
    for name in ("corpora", "valid_corpora"):
        for i, corpus in enumerate(getattr(config, name) or ()):
            for key in ("src", "tgt", "tsv"):
                path = getattr(corpus, key)
                if path and not Path(path).is_file():
                    raise UserError(f"{flag(f'{name}[{i}].{key}')} {path}: no such file")


def references(data: TokenizedCorpus, corpus, lowercase: bool) -> list[str]:
    """The target side of each pair `data` kept of `corpus`, as text (lowercased with
    `lowercase`)."""
    keep = set(data.pair_ids.tolist())
    return [t.lower() if lowercase else t for i, (_, t) in enumerate(corpus.pairs()) if i in keep]


@dataclass
class ValidSet:
    """One validation set of `data.valid_corpora`: its pair's name (en-de), its binarized
    pairs, its text."""

    name: str
    data: TokenizedCorpus
    corpus: object


@dataclass
class PreparedData:
    tokenizers: Tokenizers
    train: TokenizedCorpus
    valid: TokenizedCorpus | None
    train_corpus: object  # the raw training text (BPE-dropout segments it anew each epoch)
    valid_corpus: object | None  # the raw validation text, for BLEU against references
    max_length: int  # tokens: training pairs with a longer side are skipped
    mixture: Mixture | None = None  # data.corpora: the shards, and each epoch's pairs of them
    valid_sets: list[ValidSet] = field(default_factory=list)  # data.valid_corpora: each pair's

    @functools.cached_property
    def valid_references(self) -> list[str]:
        """The target side of each kept validation pair, as text (lowercased when the tokenizers
        lowercase: then so are the translations), to score translations of the split against."""
        return references(self.valid, self.valid_corpus, self.tokenizers.lowercase)

    def check_not_empty(self) -> None:
        """Training needs pairs, and validation, when it has a split, needs some too: otherwise
        a clear error now instead of a loop that never finds a batch."""
        for name, what, split in (("train", "training", self.train),
                                  ("valid", "validation", self.valid),
                                  *((f"valid {s.name}", "validation", s.data)
                                    for s in self.valid_sets)):
            if split is not None and len(split) == 0:
                raise UserError(f"no {what} pairs: {split.skips.report(name)}; check the "
                                "corpus, or loosen data.max_length / data.max_length_ratio")


def prepare(config: DataConfig, directory: Path, tokenizers: Tokenizers | None = None, *,
            max_positions: int | None = None) -> PreparedData:
    """Tokenizers (learnt from the training split unless given, then saved in `directory`) and
    the binarized splits under `directory`/data, reused while data and tokenizers are unchanged.

    max_positions: the model's; longer pairs are skipped (and counted) in both splits.
    """
    limit = None if max_positions is None else max_positions - 1  # room for <bos>/<eos>
    directory = Path(directory)
    check_files(config)
    train_corpus, valid_corpus = corpus(config, "train"), corpus(config, "valid")
    if tokenizers is None:
        log.info("learning a %s vocabulary of %s from %s", config.tokenizer,
                 "words" if config.tokenizer == "word" else config.vocab_size, train_corpus)
        tokenizers = Tokenizers.train(
            train_corpus.pairs, kind=config.tokenizer, vocab_size=config.vocab_size,
            shared=config.shared_vocab, character_coverage=config.character_coverage,
            min_freq=config.min_freq, lowercase=config.lowercase, name=str(train_corpus),
            symbols=config.symbols())
        tokenizers.save(directory)
    elif tokenizers.lowercase != config.lowercase:
        raise UserError(f"data.lowercase={str(config.lowercase).lower()}, but the given "
                        f"tokenizers {'do' if tokenizers.lowercase else 'do not'} lowercase")
    max_length = min(config.max_length, limit or config.max_length)
    keep = PairFilter(max_length=max_length, max_length_ratio=config.max_length_ratio)
    mixture = None
    if isinstance(train_corpus, Corpora):  # a shard each
        shards = [binarize(part, tokenizers, directory / "data" / f"train.{i}",
                           name=f"train corpus {i} ({part})", pair_filter=keep)
                  for i, part in enumerate(train_corpus.parts)]
        mixture = Mixture(shards, [c.weight for c in config.corpora],
                          temperature=config.temperature)
        train = mixture.whole()
    else:
        train = binarize(train_corpus, tokenizers, directory / "data" / "train", name="train",
                         pair_filter=keep)
    valid, valid_sets = None, []
    every = PairFilter(max_length=limit, max_length_ratio=None)  # however odd, if it fits
    if valid_corpus is not None:
        valid = binarize(valid_corpus, tokenizers, directory / "data" / "valid", name="valid",
                         pair_filter=every)
    for i, spec in enumerate(config.valid_corpora or ()):
        name = f"{spec.src_lang or config.src_lang}-{spec.tgt_lang or config.tgt_lang}"
        part, prefix = _files(spec.src, spec.tgt, spec.tsv), source_prefix(spec, config)
        part = Prefixed(part, prefix) if prefix else part
        valid_sets.append(ValidSet(name, binarize(part, tokenizers, directory / "data" /
                                                  f"valid.{i}", name=f"valid {name}",
                                                  pair_filter=every), part))
    if valid_sets:  # the first is the one that has no name
        valid, valid_corpus = valid_sets[0].data, valid_sets[0].corpus
    return PreparedData(tokenizers, train, valid, train_corpus, valid_corpus, max_length,
                        mixture, valid_sets)
