"""Word alignments from cross-attention: on attention whose argmax is known, pieces grouped
into words, <eos> and a language token never aligned."""

import torch

from transduce.decoding.alignment import align, default_layer, pharaoh, words_of
from transduce.decoding.translator import Translation


def test_pieces_are_grouped_into_words():
    assert words_of(["▁A", "▁dog", "s", "▁run", "."], subwords=True) == [0, 1, 1, 2, 2]
    assert words_of(["<0xC3>", "<0xA9>", "▁x"], subwords=True) == [0, 0, 1]  # bytes: one word
    assert words_of(["a", "dog", "."], subwords=False) == [0, 1, 2]
    assert default_layer(6) == 4 and default_layer(2) == 0 and default_layer(1) == 0


def test_each_target_word_goes_to_the_source_word_it_attends_to_most():
    # source pieces: ▁a ▁big ▁dog s <eos>  (words 0, 1, 2, 2, -); target: ▁ein ▁grosser ▁hund
    # <eos>; each target piece attends most to a known source piece
    attention = torch.full((4, 5), 0.01)
    for t, s in ((0, 0), (1, 1), (2, 3), (3, 4)):
        attention[t, s] = 0.9
    links = align(attention, [0, 1, 2, 2, None], [0, 1, 2, None])
    assert links == [(0, 0), (1, 1), (2, 2)]
    assert pharaoh(links) == "0-0 1-1 2-2"
    attention[1, 4] = 5.0  # most on <eos>: not a word, so the best of the others
    attention[1, 1], attention[1, 2] = 0.01, 0.5
    assert align(attention, [0, 1, 2, 2, None], [0, 1, 2, None])[1] == (2, 1)
    assert align(attention, [None] * 5, [0, 1, 2, None]) == []


def test_a_translators_alignments_skip_its_language_token(monkeypatch):
    """A multilingual source begins with its target's token: word 0 is the sentence's first."""
    from transduce.data.tokenizer import Tokenizers, WordTokenizer
    from transduce.decoding.translator import Translator

    from ..conftest import small_model

    words = WordTokenizer.train(["<2de> a b c x y z"])
    translator = Translator(small_model(), Tokenizers(words, words), prefix="<2de>")
    source = [*words.pieces(translator.encode("a b")), "<eos>"]
    skip = len(source) - 3  # the language token's pieces (this vocabulary splits it)
    assert skip >= 1 and source[skip:] == ["a", "b", "<eos>"]
    # target pieces: x y <eos>; 2 layers, 1 head
    attention = torch.zeros(2, 1, 3, len(source))
    attention[0, 0, 0, 0] = attention[0, 0, 1, skip + 1] = 1.0  # layer 0: x -> <2de>, y -> b
    attention[0, 0, 0, skip] = 0.5  # ... x's best word is a
    attention[1, 0, :, -1] = 1.0  # layer 1 looks at <eos> only
    translation = Translation("a b", [("x y", 0.0)], src_pieces=source,
                              tgt_pieces=["x", "y", "<eos>"], attention=attention, length=2)
    assert translator.alignments(translation) == [(0, 0), (1, 1)]  # layer 0: the penultimate
    assert translator.alignments(translation, layer=1) == [(0, 0), (0, 1)]  # a is first
    empty = Translation("", [("", 0.0)])
    assert translator.alignments(empty) == []
