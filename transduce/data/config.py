"""The `data` section of a configuration."""

from __future__ import annotations

from dataclasses import dataclass

from transduce.errors import UserError
from transduce.fields import setting

TOKENIZERS = ("bpe", "unigram", "word")
DATASETS = ("multi30k", "numbers")  # known corpora (transduce.data.datasets reads them)


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
        paths = (self.train_src, self.train_tgt, self.train_tsv)
        if bool(self.train_src) != bool(self.train_tgt):
            raise UserError("data.train_src and data.train_tgt go together")
        if bool(self.valid_src) != bool(self.valid_tgt):
            raise UserError("data.valid_src and data.valid_tgt go together")
        if self.dataset is None and not (self.train_tsv or (self.train_src and self.train_tgt)):
            raise UserError("data: give data.dataset, or data.train_src and data.train_tgt, "
                            "or data.train_tsv")
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
        if self.max_length_ratio < 1:
            raise UserError(f"data.max_length_ratio must be >= 1, got {self.max_length_ratio}")
