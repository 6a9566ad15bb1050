"""Tokenizers: SentencePiece subwords (the paper's shared BPE vocabulary) or whole words.

Every tokenizer uses the special ids <unk>=0, <pad>=1, <bos>=2, <eos>=3 and maps text to ids
without them; batching adds <bos>/<eos>. A lowercasing tokenizer lowercases every text it encodes
or learns from (the usual Multi30k preprocessing), so its outputs are lowercase. A `Tokenizers`
pair (source, target: the same object when the vocabulary is shared) is saved into a model
directory so that it is self-contained.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from transduce.data.marian_tokenizer import MarianTokenizer
from transduce.errors import DataError

UNK, PAD, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
SPECIAL_IDS = {"unk_id": UNK, "pad_id": PAD, "bos_id": BOS, "eos_id": EOS}
_THREADS = 2

log = logging.getLogger(__name__)


class SentencePieceTokenizer:
    """SentencePiece BPE or unigram, lossless: detokenize(tokenize(text)) == text.

    Identity normalisation keeps the text as written (spaces included) and byte fallback spells
    a character outside the vocabulary as its UTF-8 bytes, so nothing becomes <unk>.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, *, lowercase: bool = False) -> None:
        self.model_proto = model_proto
        self.lowercase = lowercase
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int, model_type: str = "bpe",
              character_coverage: float = 0.9995, max_sentences: int = 2_000_000,
              seed: int = 1, lowercase: bool = False,
              symbols: tuple[str, ...] = ()) -> SentencePieceTokenizer:
        """Learn a vocabulary from `texts` (a sample of `max_sentences` when there are more);
        `symbols` (tags, language tokens) are pieces of their own, never split."""
        if model_type not in ("bpe", "unigram"):
            raise DataError(f"data.tokenizer: SentencePiece model type must be 'bpe' or "
                            f"'unigram', got {model_type!r}")
        spm.set_random_generator_seed(seed)
        model = io.BytesIO()
        sentences = _Sentences(texts, lowercase)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_writer=model,
                vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage, byte_fallback=True,
                normalization_rule_name="identity", remove_extra_whitespaces=False,
                unk_id=UNK, pad_id=PAD, bos_id=BOS, eos_id=EOS,
                unk_piece=SPECIALS[UNK], pad_piece=SPECIALS[PAD], bos_piece=SPECIALS[BOS],
                eos_piece=SPECIALS[EOS], input_sentence_size=max_sentences,
                shuffle_input_sentence=True, num_threads=_THREADS, minloglevel=2,
                user_defined_symbols=list(symbols))
        except RuntimeError as error:
            if sentences.error is not None:  # ours, raised while SentencePiece read the text
                raise sentences.error from None
            if sentences.count == 0:
                raise NoText from None
            message = str(error).splitlines()[-1]
            if too_high := _VOCAB_TOO_HIGH.search(message):
                raise VocabularyTooLarge(vocab_size, int(too_high.group(1))) from None
            if too_low := _VOCAB_TOO_LOW.search(message):
                raise DataError(f"data.vocab_size={vocab_size} is too small for this text: it "
                                f"needs at least {too_low.group(1)} (256 byte pieces, the "
                                "special tokens and every character it keeps)") from None
            raise DataError(f"data.vocab_size={vocab_size}: SentencePiece could not train: "
                            f"{message}") from None
        return cls(model.getvalue(), lowercase=lowercase)

    specials = SPECIAL_IDS

    @property
    def vocab_size(self) -> int:
        return self._sp.vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(_case(text, self.lowercase))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._sp.encode(_cases(texts, self.lowercase), num_threads=_THREADS)

    def sample_batch(self, texts: list[str], *, dropout: float, seed: int) -> list[list[int]]:
        """A random segmentation (BPE-dropout: each merge skipped with probability `dropout`),
        the same for the same seed. One thread: with more, which text draws which random numbers
        would depend on scheduling."""
        spm.set_random_generator_seed(seed)
        return self._sp.encode(_cases(texts, self.lowercase), enable_sampling=True,
                               alpha=dropout, nbest_size=-1, num_threads=1)

    def decode(self, ids: Iterable[int]) -> str:
        return self._sp.decode([i for i in ids if i >= len(SPECIALS) or i == UNK])

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._sp.id_to_piece(int(i)) for i in ids]

    @property
    def fingerprint(self) -> str:
        return _fingerprint(self.model_proto, self.lowercase)

    def save(self, path: Path) -> None:
        Path(path).write_bytes(self.model_proto)

    @classmethod
    def load(cls, path: Path, *, lowercase: bool = False) -> SentencePieceTokenizer:
        return cls(Path(path).read_bytes(), lowercase=lowercase)


class NoText(DataError):
    """The training text has no non-empty line to learn a vocabulary from."""


class VocabularyTooLarge(DataError):
    """The text supports fewer subwords than asked for."""

    def __init__(self, asked: int, maximum: int) -> None:
        super().__init__(f"data.vocab_size={asked} is more than the training text supports "
                         f"(at most {maximum})")
        self.asked, self.maximum = asked, maximum


_VOCAB_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. \d+ vs (\d+)")
_VOCAB_TOO_HIGH = re.compile(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= "
                             r"(\d+)")


class _Sentences:
    """The non-empty texts SentencePiece learns from, counted. An exception raised while reading
    them (a corpus error naming its file and line) is kept: SentencePiece would turn it into a
    RuntimeError of its own that names neither."""

    def __init__(self, texts: Iterable[str], lowercase: bool) -> None:
        self.texts, self.lowercase = texts, lowercase
        self.count = 0
        self.error: Exception | None = None

    def __iter__(self) -> Iterator[str]:
        try:
            for text in self.texts:
                if text:
                    self.count += bool(text.strip())
                    yield _case(text, self.lowercase)
        except Exception as error:
            self.error = error
            raise


def _case(text: str, lowercase: bool) -> str:
    return text.lower() if lowercase else text


def _cases(texts: list[str], lowercase: bool) -> list[str]:
    return [t.lower() for t in texts] if lowercase else texts


def _fingerprint(data: bytes, lowercase: bool) -> str:
    return hashlib.sha256(data + (b"\0lowercase" if lowercase else b"")).hexdigest()


_WORD = re.compile(r"\w+|[^\w\s]")
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}'»])")
_NO_SPACE_AFTER = re.compile(r"([(\[{«]) ")


class WordTokenizer:
    """Words and punctuation marks, with a vocabulary of those seen at least `min_freq` times.

    The simple alternative to subwords: rare words become <unk>, and detokenization only
    approximates the original spacing.
    """

    kind = "word"

    def __init__(self, words: list[str], *, lowercase: bool = False) -> None:
        self.words = list(words)
        self.lowercase = lowercase
        self._ids = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def train(cls, texts: Iterable[str], *, min_freq: int = 1, vocab_size: int | None = None,
              lowercase: bool = False) -> WordTokenizer:
        counts = Counter(w for text in texts for w in _WORD.findall(_case(text, lowercase)))
        ranked = sorted((w for w, c in counts.items() if c >= min_freq),
                        key=lambda w: (-counts[w], w))
        if vocab_size is not None:
            ranked = ranked[: max(vocab_size - len(SPECIALS), 0)]
        return cls([*SPECIALS, *ranked], lowercase=lowercase)

    specials = SPECIAL_IDS

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self._ids.get(w, UNK) for w in _WORD.findall(_case(text, self.lowercase))]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        text = " ".join(self.words[i] for i in ids if i >= len(SPECIALS) or i == UNK)
        return _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text))

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self.words[int(i)] for i in ids]

    @property
    def fingerprint(self) -> str:
        return _fingerprint("\n".join(self.words).encode(), self.lowercase)

    def save(self, path: Path) -> None:
        Path(path).write_text("\n".join(self.words) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path, *, lowercase: bool = False) -> WordTokenizer:
        return cls(Path(path).read_text(encoding="utf-8").splitlines(), lowercase=lowercase)


Tokenizer = SentencePieceTokenizer | WordTokenizer | MarianTokenizer
_KINDS = {"sentencepiece": (SentencePieceTokenizer, "model"), "word": (WordTokenizer, "vocab"),
          "marian": (MarianTokenizer, "spm")}


@dataclass(frozen=True)
class Tokenizers:
    """The source and target tokenizers of a model (one object when the vocabulary is shared)."""

    src: Tokenizer
    tgt: Tokenizer

    @property
    def shared(self) -> bool:
        return self.src is self.tgt

    @property
    def specials(self) -> dict[str, int]:
        """The model's special ids (unk_id, pad_id, bos_id, eos_id), the same on both sides."""
        if self.src.specials != self.tgt.specials:
            raise DataError(f"the source and target vocabularies have different special ids "
                            f"({self.src.specials} and {self.tgt.specials})")
        return dict(self.tgt.specials)

    @property
    def lowercase(self) -> bool:
        """Whether outputs are lowercase (the target side lowercases what it learns from)."""
        return self.tgt.lowercase

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.src.fingerprint}:{self.tgt.fingerprint}".encode()).hexdigest()

    def save(self, directory: Path) -> None:
        """Write tokenizer.json and the model files into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        manifest = {"kind": self.src.kind, "shared": self.shared, "lowercase": self.lowercase}
        sides = {"shared": self.src} if self.shared else {"src": self.src, "tgt": self.tgt}
        for side, tokenizer in sides.items():
            name = f"tokenizer.{side}.{_KINDS[tokenizer.kind][1]}"
            tokenizer.save(directory / name)
            manifest[side] = name
        (directory / "tokenizer.json").write_text(json.dumps(manifest, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Tokenizers:
        directory = Path(directory)
        manifest_path = directory / "tokenizer.json"
        if not manifest_path.is_file():
            raise DataError(f"{manifest_path}: no tokenizer here (is {directory} a model "
                            "directory?)")
        manifest = json.loads(manifest_path.read_text())
        kind, _ = _KINDS[manifest["kind"]]
        lowercase = manifest.get("lowercase", False)  # absent before lowercasing existed
        if manifest["shared"]:
            shared = kind.load(directory / manifest["shared"], lowercase=lowercase)
            return cls(shared, shared)
        return cls(kind.load(directory / manifest["src"], lowercase=lowercase),
                   kind.load(directory / manifest["tgt"], lowercase=lowercase))

    @classmethod
    def train(cls, pairs: Callable[[], Iterator[tuple[str, str]]], *, kind: str = "bpe",
              vocab_size: int = 8000, shared: bool = True, character_coverage: float = 0.9995,
              min_freq: int = 1, max_sentences: int = 2_000_000, seed: int = 1,
              lowercase: bool = False, name: str = "the training text",
              symbols: tuple[str, ...] = ()) -> Tokenizers:
        """Learn tokenizers from training pairs; `pairs` gives a fresh iterator on each call.

        kind: "bpe" or "unigram" (SentencePiece) or "word". Shared: one vocabulary learnt from
        source and target text together (the paper's shared BPE), else one per side.
        lowercase: both sides lowercase all text, here and whenever they encode.
        A vocabulary larger than the text supports is lowered to the most it does, with a
        warning; errors in the text are raised as they are, naming their file and line.
        symbols: tokens kept whole (SentencePiece's user-defined symbols: tags, <2de>).
        """
        def texts(side: int | None) -> Iterator[str]:
            for pair in pairs():
                yield from (pair if side is None else (pair[side],))

        def learn(side: int | None, size: int = vocab_size) -> Tokenizer:
            try:
                if kind != "word":
                    return SentencePieceTokenizer.train(
                        texts(side), vocab_size=size, model_type=kind,
                        character_coverage=character_coverage, max_sentences=max_sentences,
                        seed=seed, lowercase=lowercase, symbols=symbols)
                sentences = _Sentences(texts(side), lowercase=False)
                tokenizer = WordTokenizer.train(sentences, min_freq=min_freq, lowercase=lowercase)
                if sentences.count == 0:
                    raise NoText
                return tokenizer
            except VocabularyTooLarge as error:  # e.g. the default 8,000 on a small corpus
                log.warning("%s: using %d instead", error, error.maximum)
                return learn(side, error.maximum)
            except NoText:
                which = {None: "", 0: " (source side)", 1: " (target side)"}[side]
                raise NoText(f"{name}{which}: no text to learn a vocabulary from (every line is "
                             "empty)") from None

        if kind not in ("bpe", "unigram", "word"):
            raise DataError(f"data.tokenizer must be 'bpe', 'unigram' or 'word', got {kind!r}")
        if shared:
            tokenizer = learn(None)
            return cls(tokenizer, tokenizer)
        return cls(learn(0), learn(1))
