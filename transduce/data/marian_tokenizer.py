"""The tokenizer of a Marian (OPUS-MT) model, as Hugging Face's `MarianTokenizer` has it.

A SentencePiece model cuts text into pieces, and a separate vocabulary (`vocab.json`, often one
for both sides while each side has its own SentencePiece model) gives each piece its model id:
SentencePiece's own ids are not the model's. A piece the vocabulary lacks is <unk>. The special
tokens are the vocabulary's: `</s>` (0 in OPUS-MT), `<unk>` (1) and `<pad>` (the last id, also
the decoder's first input). A source may begin with a target-language token such as `>>fra<<`
(multilingual models), kept whole. Decoding leaves out the special tokens, as
`MarianTokenizer.decode(ids, skip_special_tokens=True)` does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from transduce.errors import DataError

_THREADS = 2
EOS_PIECE, UNK_PIECE, PAD_PIECE = "</s>", "<unk>", "<pad>"
SPIECE_UNDERLINE = "\u2581"


class MarianTokenizer:
    """One side of a Marian model: its SentencePiece model and its vocabulary (piece -> id)."""

    kind = "marian"
    lowercase = False

    def __init__(self, model_proto: bytes, vocab: dict[str, int], *,
                 name: str = "vocabulary", tokens: dict[str, str] | None = None,
                 start: str | None = None) -> None:
        """tokens: the special tokens' pieces ({"eos": "</s>", "unk": "<unk>", "pad": "<pad>"}
        unless given); start: the decoder's first input (<pad> unless given)."""
        self.tokens = {"eos": EOS_PIECE, "unk": UNK_PIECE, "pad": PAD_PIECE, **(tokens or {})}
        self.tokens["start"] = start or self.tokens["pad"]
        for piece in self.tokens.values():
            if piece not in vocab:
                raise DataError(f"{name}: no {piece} token")
        self.model_proto = model_proto
        self.vocab = dict(vocab)
        self._pieces = {i: p for p, i in self.vocab.items()}
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.unk_id, self.eos_id, self.pad_id, self.start_id = (
            vocab[self.tokens[k]] for k in ("unk", "eos", "pad", "start"))
        self._special = {self.unk_id, self.eos_id, self.pad_id, self.start_id}
        self.language_codes = {p for p in vocab if p.startswith(">>") and p.endswith("<<")}

    @property
    def vocab_size(self) -> int:
        return max(self.vocab.values()) + 1

    @property
    def specials(self) -> dict[str, int]:
        """The model's special ids: the decoder starts from <pad>, as Marian models do."""
        return {"unk_id": self.unk_id, "pad_id": self.pad_id, "bos_id": self.start_id,
                "eos_id": self.eos_id}

    def _ids(self, code: list[str], pieces: list[str]) -> list[int]:
        return [self.vocab.get(p, self.unk_id) for p in (*code, *pieces)]

    def encode(self, text: str) -> list[int]:
        code, text = _language_code(text)
        return self._ids(code, self._sp.encode(text, out_type=str))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encode_batch(texts, num_threads=_THREADS)

    def sample_batch(self, texts: list[str], *, dropout: float, seed: int) -> list[list[int]]:
        """A random segmentation of each text (BPE-dropout), the same for the same seed."""
        spm.set_random_generator_seed(seed)
        return self._encode_batch(texts, enable_sampling=True, alpha=dropout, nbest_size=-1,
                                  num_threads=1)

    def _encode_batch(self, texts: list[str], **options) -> list[list[int]]:
        codes = [_language_code(t) for t in texts]
        pieces = self._sp.encode([text for _, text in codes], out_type=str, **options)
        return [self._ids(code, p) for (code, _), p in zip(codes, pieces, strict=True)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` without the special tokens, as MarianTokenizer decodes it."""
        pieces = [self._pieces.get(int(i), UNK_PIECE) for i in ids
                  if int(i) not in self._special]
        text = self._sp.decode_pieces(pieces)
        return text.replace(SPIECE_UNDERLINE, " ").strip()

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._pieces.get(int(i), UNK_PIECE) for i in ids]

    @property
    def fingerprint(self) -> str:
        vocab = json.dumps(self.vocab, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(self.model_proto + b"\0" + vocab).hexdigest()

    def save(self, path: Path) -> None:
        """The SentencePiece model at `path`, the vocabulary beside it (`path`.vocab.json)."""
        path = Path(path)
        path.write_bytes(self.model_proto)
        _vocab_path(path).write_text(json.dumps(self.vocab, ensure_ascii=False, indent=1) + "\n",
                                     encoding="utf-8")
        _tokens_path(path).write_text(json.dumps(self.tokens, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path, *, lowercase: bool = False) -> MarianTokenizer:
        if lowercase:
            raise DataError(f"{path}: a Marian tokenizer does not lowercase")
        tokens = json.loads(_tokens_path(path).read_text()) if _tokens_path(path).is_file() else {}
        start = tokens.pop("start", None)
        return cls.from_files(path, _vocab_path(path), tokens=tokens, start=start)

    @classmethod
    def from_files(cls, spm_path: Path, vocab_path: Path, *, tokens: dict | None = None,
                   start: str | None = None) -> MarianTokenizer:
        """From a SentencePiece model and a vocab.json, as an OPUS-MT directory has them."""
        for path in (spm_path, vocab_path):
            if not Path(path).is_file():
                raise DataError(f"{path}: no such file")
        try:
            vocab = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise DataError(f"{vocab_path}: not a JSON vocabulary ({error})") from None
        if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
            raise DataError(f"{vocab_path}: expected a JSON object of piece -> id")
        proto = Path(spm_path).read_bytes()
        try:
            spm.SentencePieceProcessor(model_proto=proto)
        except RuntimeError:
            raise DataError(f"{spm_path}: not a SentencePiece model") from None
        return cls(proto, vocab, name=str(vocab_path), tokens=tokens, start=start)


def _vocab_path(path: Path) -> Path:
    return Path(f"{path}.vocab.json")


def _tokens_path(path: Path) -> Path:
    return Path(f"{path}.tokens.json")


def _language_code(text: str) -> tuple[list[str], str]:
    """A leading `>>xxx<<` target-language token apart from the text, as MarianTokenizer does."""
    if text.startswith(">>") and (end := text.find("<<")) != -1:
        return [text[: end + 2]], text[end + 2 :]
    return [], text
