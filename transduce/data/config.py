"""The `data` section of a configuration."""

from __future__ import annotations

from dataclasses import dataclass

from transduce.errors import UserError
from transduce.fields import setting

TOKENIZERS = ("bpe", "unigram", "word")
DATASETS = ("multi30k", "numbers")  # known corpora (transduce.data.datasets reads them)


@dataclass(frozen=True)
class CorpusConfig:
    """One training corpus of `data.corpora`."""

    src: str | None = setting(None, "source file (plain or .gz), line-aligned with tgt")
    tgt: str | None = setting(None, "... its target side")
    tsv: str | None = setting(None, "or one source<TAB>target file")
    weight: float = setting(1.0,
        "how much of it an epoch takes, times its size: 2 = twice over, 0.5 = a different "
        "half each epoch")
    tag: str | None = setting(None,
        "a token put before each of its sources, e.g. <BT> for back-translated text")
    src_lang: str | None = setting(None, "its source language (default: data.src_lang)")
    tgt_lang: str | None = setting(None, "its target language (default: data.tgt_lang)")

    @classmethod
    def parse(cls, value, index: int, key: str = "corpora") -> CorpusConfig:
        """A corpus from its YAML mapping; errors name `data.corpora[index].key` (or the
        list `key` names)."""
        where = f"data.{key}[{index}]"
        if not isinstance(value, dict):
            raise UserError(f"{where} must be a mapping of {', '.join(_CORPUS_KEYS)}, got "
                            f"{value!r}")
        for key, item in value.items():
            if key not in _CORPUS_KEYS:
                raise UserError(f"{where}: unknown key {key!r} (keys: {', '.join(_CORPUS_KEYS)})")
            numeric = key == "weight"
            if item is not None and not (isinstance(item, int | float) and not isinstance(
                    item, bool) if numeric else isinstance(item, str)):
                raise UserError(f"{where}.{key} must be {'a number' if numeric else 'a string'}"
                                f", got {item!r}")
        corpus = cls(**{k: float(v) if k == "weight" else v for k, v in value.items()})
        if bool(corpus.src) != bool(corpus.tgt) or bool(corpus.tsv) == bool(corpus.src):
            raise UserError(f"{where}: give src and tgt, or tsv")
        if corpus.weight <= 0:
            raise UserError(f"{where}.weight must be positive, got {corpus.weight}")
        if corpus.tag is not None and (not corpus.tag.strip() or " " in corpus.tag):
            raise UserError(f"{where}.tag must be one token without spaces, got {corpus.tag!r}")
        return corpus


_CORPUS_KEYS = tuple(f for f in CorpusConfig.__dataclass_fields__)


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes batches of token ids."""

    dataset: str | None = setting("numbers",
        "a known corpus ('multi30k', 'numbers'); None: use paths")
    dir: str | None = setting(None, "local copy of a known dataset (else it is downloaded)")
    cache_dir: str | None = setting(None,
        "downloads; default $TRANSDUCE_CACHE or ~/.cache/transduce")
    src_lang: str = setting("en", "source language code (a known dataset's file suffix)")
    tgt_lang: str = setting("de", "target language code")
    train_src: str | None = setting(None, "aligned text files (plain or .gz) instead of a dataset")
    train_tgt: str | None = setting(None, "... the target side of train_src")
    valid_src: str | None = setting(None, "validation source file (none: no validation)")
    valid_tgt: str | None = setting(None, "... its target side")
    train_tsv: str | None = setting(None, "or one source<TAB>target file per split")
    corpora: tuple[CorpusConfig, ...] | None = setting(None,
        "or many training corpora, a list of {src, tgt | tsv, weight, tag, src_lang, "
        "tgt_lang}, each prepared once into its own shard and sampled per epoch "
        "(docs/data.md, \"Many corpora\")")
    valid_corpora: tuple[CorpusConfig, ...] | None = setting(None,
        "or validation sets, one per language pair of a multilingual run: a list of {src, tgt "
        "| tsv, src_lang, tgt_lang}, each validated and reported on its own, the best "
        "checkpoint chosen by their mean")
    temperature: float = setting(1.0,
        "data.corpora: an epoch takes from each corpus in proportion to (weight x size)^(1/T):"
        " 1 = weight x size pairs each; above 1 nearer equal shares (5 is usual for many "
        "languages)")
    lang_tokens: bool | None = setting(None,
        "a target-language token (<2de>) before every source, to choose the output language "
        "of one model for many (translate --tgt-lang); null: when data.corpora name more than "
        "one target language")
    valid_tsv: str | None = setting(None, "validation pairs as one source<TAB>target file")
    tokenizer: str = setting("bpe", "'bpe' or 'unigram' (SentencePiece), or 'word'")
    vocab_size: int = setting(8000, "subword vocabulary size (per side when not shared)")
    shared_vocab: bool = setting(True, "one vocabulary learnt from both sides (the paper's)")
    character_coverage: float = setting(0.9995, "share of characters SentencePiece keeps as pieces")
    bpe_dropout: float = setting(0.0,
        "BPE only: skip each merge with this probability, a new segmentation of the training "
        "text every epoch (0.1 is usual)")
    bidirectional_epochs: int = setting(0,
        "the first epochs also train target -> source (every pair reversed as well; BiT, Ding et "
        "al. 2021); needs shared_vocab")
    lowercase: bool = setting(False,
        "lowercase all text, both sides, in training and translation (the usual Multi30k "
        "preprocessing): outputs are lowercase")
    min_freq: int = setting(1, "word tokenizer: drop words seen fewer times")
    max_length: int = setting(256, "training pairs with a longer side (in tokens) are skipped")
    max_length_ratio: float = setting(3.0,
        "... and those whose longer side is more than this many times the shorter one")
    max_tokens: int = setting(4096, "padded tokens per batch, B x max(S, T)")
    numbers_train_size: int = setting(50_000, "number-words corpus: training pairs")
    numbers_max: int = setting(999_999, "number-words corpus: largest number")
    seed: int = setting(1, "the number-words corpus's draw")

    def __post_init__(self) -> None:
        for key in ("corpora", "valid_corpora"):  # from YAML's mappings
            if (listed := getattr(self, key)) is not None:
                if not listed:
                    raise UserError(f"data.{key} is empty: give one at least, or null")
                object.__setattr__(self, key, tuple(
                    c if isinstance(c, CorpusConfig) else CorpusConfig.parse(c, i, key=key)
                    for i, c in enumerate(listed)))
        if self.corpora is not None:
            if any((self.train_src, self.train_tgt, self.train_tsv)):
                raise UserError("data.corpora and data.train_src/train_tgt/train_tsv exclude "
                                "each other")
            if self.dataset is not None:
                raise UserError("data: data.dataset and data.corpora exclude each other; set "
                                "data.dataset=null to use your own files")
            if self.bidirectional_epochs and (self.tags or self.languages_tagged):
                raise UserError("data.bidirectional_epochs does not combine with tagged corpora "
                                "or language tokens: a tag belongs to its corpus's direction (a "
                                "reversed back-translation would train on its synthetic side)")
            if self.tokenizer == "word" and (self.tags or self.languages_tagged):
                raise UserError("data.corpora: tags and language tokens need a SentencePiece "
                                "tokenizer (data.tokenizer=bpe or unigram)")
        if self.valid_corpora is not None:
            for i, c in enumerate(self.valid_corpora):
                if c.tag is not None or c.weight != 1.0:
                    raise UserError(f"data.valid_corpora[{i}]: a validation set has no tag or "
                                    "weight")
            if any((self.valid_src, self.valid_tgt, self.valid_tsv)):
                raise UserError("data.valid_corpora and data.valid_src/valid_tgt/valid_tsv "
                                "exclude each other")
        if self.temperature <= 0:
            raise UserError(f"data.temperature must be positive, got {self.temperature}")
        paths = (self.train_src, self.train_tgt, self.train_tsv, self.corpora)
        if bool(self.train_src) != bool(self.train_tgt):
            raise UserError("data.train_src and data.train_tgt go together")
        if bool(self.valid_src) != bool(self.valid_tgt):
            raise UserError("data.valid_src and data.valid_tgt go together")
        if self.dataset is None and not (self.train_tsv or (self.train_src and self.train_tgt)
                                         or self.corpora):
            raise UserError("data: give data.dataset, or data.train_src and data.train_tgt, "
                            "or data.train_tsv, or data.corpora")
        if self.dataset is not None and any(paths):
            raise UserError("data: data.dataset and training file paths exclude each other; "
                            "set data.dataset=null to use your own files")
        if self.dataset is not None and self.dataset not in DATASETS:
            raise UserError(f"data.dataset: unknown dataset {self.dataset!r}; choose one of "
                            f"{DATASETS}")
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer must be one of {TOKENIZERS}, got {self.tokenizer!r}")
        for name in ("vocab_size", "max_length", "max_tokens", "min_freq", "numbers_train_size"):
            if getattr(self, name) <= 0:
                raise UserError(f"data.{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.character_coverage <= 1:
            raise UserError(f"data.character_coverage must be in (0, 1], got "
                            f"{self.character_coverage}")
        if not 0 <= self.bpe_dropout < 1:
            raise UserError(f"data.bpe_dropout must be in [0, 1), got {self.bpe_dropout}")
        if self.bpe_dropout and self.tokenizer != "bpe":
            raise UserError(f"data.bpe_dropout needs data.tokenizer=bpe, not {self.tokenizer!r}")
        if self.bidirectional_epochs < 0:
            raise UserError(f"data.bidirectional_epochs must be >= 0, got "
                            f"{self.bidirectional_epochs}")
        if self.bidirectional_epochs and not self.shared_vocab:
            raise UserError("data.bidirectional_epochs needs data.shared_vocab=true: a reversed "
                            "pair reads target ids as source ids")
        if self.lang_tokens and not self.corpora:
            raise UserError("data.lang_tokens needs data.corpora (each with its tgt_lang)")
        if self.max_length_ratio < 1:
            raise UserError(f"data.max_length_ratio must be >= 1, got {self.max_length_ratio}")

    @property
    def target_languages(self) -> tuple[str, ...]:
        """The target languages the training data goes into, in the order first named."""
        if not self.corpora:
            return (self.tgt_lang,)
        return tuple(dict.fromkeys(c.tgt_lang or self.tgt_lang for c in self.corpora))

    @property
    def languages_tagged(self) -> bool:
        """Whether each source starts with its target language's token (<2de>)."""
        if self.lang_tokens is not None:
            return self.lang_tokens
        return len(self.target_languages) > 1

    @property
    def tags(self) -> tuple[str, ...]:
        """The corpora's tags, once each."""
        return tuple(dict.fromkeys(c.tag for c in self.corpora or () if c.tag))

    def symbols(self) -> tuple[str, ...]:
        """The tokens the tokenizer must keep whole: tags and language tokens (lowercase when
        the text is: the tokenizer sees them as it sees the text)."""
        languages = self.target_languages if self.languages_tagged else ()
        symbols = (*self.tags, *(language_token(lang) for lang in languages))
        return tuple(s.lower() for s in symbols) if self.lowercase else symbols

    def language_prefix(self, tgt_lang: str | None) -> str:
        """What goes before a source to translate it into `tgt_lang` ("" for a model of one
        target language); a UserError when the model does not translate into it, or, being
        multilingual, needs to be told."""
        languages = self.target_languages
        if tgt_lang is not None and tgt_lang not in languages:
            raise UserError(f"--tgt-lang {tgt_lang}: this model translates into "
                            f"{', '.join(languages)}")
        if not self.languages_tagged:
            return ""
        if tgt_lang is None:
            raise UserError(f"this model translates into {', '.join(languages)}: choose one "
                            "with --tgt-lang")
        token = language_token(tgt_lang)
        return token.lower() if self.lowercase else token


def language_token(language: str) -> str:
    """The token before a source that asks for output in `language`: <2de>."""
    return f"<2{language}>"
