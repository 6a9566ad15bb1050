"""Word alignments from cross-attention: which source word each target word was translated from,
as Pharaoh's `i-j` pairs (source word i, target word j, from 0), on words, not pieces.

Each target piece is linked to the source piece it attends to most in one decoder layer (heads
averaged), when it is predicted, as fairseq's `--print-alignment` links them; pieces are grouped
into words (a SentencePiece piece starting with "▁" begins a word; a word vocabulary's pieces
are words), and two words are aligned when any of their pieces are. The layer is the
penultimate by default: in a Transformer trained without alignments the last layer's attention
has already moved on towards what comes next, and the penultimate aligns best (Garg et al.,
2019, "Jointly Learning to Align and Translate with Transformer Models"). <eos>, and a
multilingual source's language token or a corpus's tag before the sentence, are never aligned.
"""

from __future__ import annotations

from torch import Tensor

WORD_START = "\u2581"  # SentencePiece's mark of a word's first piece


def default_layer(layers: int) -> int:
    """The penultimate decoder layer (the only one of a one-layer decoder)."""
    return max(layers - 2, 0)


def words_of(pieces: list[str], subwords: bool) -> list[int]:
    """The word each piece belongs to (0, 1, ...): with `subwords` a piece starting with "▁"
    (or the first) begins a word, else every piece is one."""
    words, word = [], -1
    for i, piece in enumerate(pieces):
        if not subwords or i == 0 or piece.startswith(WORD_START):
            word += 1
        words.append(word)
    return words


def align(attention: Tensor, src_words: list[int | None],
          tgt_words: list[int | None]) -> list[tuple[int, int]]:
    """Links (source word, target word), sorted, from `attention` (T, S): a row per target
    piece, a column per source piece. Pieces whose word is None (<eos>, a language token) are
    neither aligned nor aligned to."""
    columns = [s for s, word in enumerate(src_words) if word is not None]
    if not columns:
        return []
    links = set()
    for t, tgt_word in enumerate(tgt_words):
        if tgt_word is None:
            continue
        row = attention[t, columns]
        links.add((src_words[columns[int(row.argmax())]], tgt_word))
    return sorted(links)


def pharaoh(links: list[tuple[int, int]]) -> str:
    """`0-0 1-2 2-1`: the links as one line of Pharaoh's format."""
    return " ".join(f"{i}-{j}" for i, j in links)
