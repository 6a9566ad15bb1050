import itertools

import pytest

from transduce.data.corpus import ParallelFiles
from transduce.data.numbers import NumberWords
from transduce.data.tokenizer import SentencePieceTokenizer, Tokenizers, WordTokenizer
from transduce.errors import DataError

from ..conftest import MULTI30K, needs_multi30k

HARD = ["  two  spaces and trailing ", "Ünïcödé — “quotes” … ½", "emoji 🎉🚀 ∑∫", "我来自中国",
        "tab\there", "ʻOkina Ōlelo", "x"]


def _numbers(n=3000):
    corpus = NumberWords("train", sizes=(n, 10, 10))
    return lambda: iter(list(corpus.pairs()))


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sentencepiece_round_trip_is_lossless_even_outside_its_alphabet(kind):
    pairs = _numbers()
    tokenizers = Tokenizers.train(pairs, kind=kind, vocab_size=400)
    tok = tokenizers.src
    for text in [t for pair in itertools.islice(pairs(), 200) for t in pair] + HARD:
        ids = tok.encode(text)
        assert 0 not in ids  # byte fallback: never <unk>
        assert tok.decode(ids) == text


def test_special_ids_follow_the_convention():
    tok = Tokenizers.train(_numbers(), vocab_size=400).src
    assert tok.pieces([0, 1, 2, 3]) == ["<unk>", "<pad>", "<bos>", "<eos>"]
    assert tok.decode([2, *tok.encode("zwei"), 3, 1, 1]) == "zwei"


def test_shared_vocabulary_is_learnt_from_both_sides():
    tokenizers = Tokenizers.train(_numbers(), vocab_size=500, shared=True)
    assert tokenizers.shared
    pieces = set(tokenizers.src.pieces(range(tokenizers.src.vocab_size)))
    assert "▁hundred" in pieces and any("hundert" in p for p in pieces)


def test_separate_vocabularies_for_english_to_chinese():
    people = ["I", "He", "She", "We", "They", "You"]
    people_zh = ["我", "他", "她", "我们", "他们", "你"]
    places = ["China", "Japan", "France", "Germany", "Beijing", "Shanghai", "Canada", "Italy"]
    places_zh = ["中国", "日本", "法国", "德国", "北京", "上海", "加拿大", "意大利"]
    verbs = [("am from", "来自"), ("live in", "住在"), ("like", "喜欢"), ("visit", "访问")]
    pairs = [(f"{p} {v} {q}", f"{pz}{vz}{qz}")
             for (p, pz), (v, vz), (q, qz) in itertools.product(
                 zip(people, people_zh, strict=True), verbs, zip(places, places_zh, strict=True))]
    tokenizers = Tokenizers.train(lambda: iter(pairs), vocab_size=320, shared=False,
                                  character_coverage=0.9995)
    assert not tokenizers.shared
    zh = tokenizers.tgt
    ids = zh.encode("我来自中国")
    assert zh.decode(ids) == "我来自中国"
    assert not any(p.startswith("<0x") for p in zh.pieces(ids))  # characters, not bytes
    assert tokenizers.src.decode(tokenizers.src.encode("I am from China")) == "I am from China"
    assert not any("中" in p for p in tokenizers.src.pieces(range(tokenizers.src.vocab_size)))


def test_word_vocabulary_keeps_words_seen_min_freq_times():
    texts = ["the cat sat .", "the dog sat .", "a bird flew"]
    tok = WordTokenizer.train(texts, min_freq=2)
    # seen twice each, ranked by count then alphabetically; "a", "cat", ... only once
    assert tok.pieces(range(tok.vocab_size)) == ["<unk>", "<pad>", "<bos>", "<eos>",
                                                ".", "sat", "the"]
    assert tok.encode("the bird sat.") == [tok.words.index("the"), 0,
                                           tok.words.index("sat"), tok.words.index(".")]
    assert tok.decode(tok.encode("the sat.")) == "the sat."


@pytest.mark.parametrize("kind, shared", [("bpe", True), ("unigram", False), ("word", True),
                                          ("word", False)])
def test_save_and_load_give_the_same_tokenizers(tmp_path, kind, shared):
    tokenizers = Tokenizers.train(_numbers(), kind=kind, vocab_size=300, shared=shared)
    tokenizers.save(tmp_path)
    loaded = Tokenizers.load(tmp_path)
    assert loaded.shared == shared
    assert loaded.fingerprint == tokenizers.fingerprint
    for text in ("three hundred and forty-two", "dreihundertzweiundvierzig"):
        assert loaded.src.encode(text) == tokenizers.src.encode(text)
        assert loaded.tgt.encode(text) == tokenizers.tgt.encode(text)


@pytest.mark.parametrize("kind", ["bpe", "word"])
def test_a_lowercasing_tokenizer_learns_and_encodes_lowercase_and_keeps_that_when_loaded(
        tmp_path, kind):
    pairs = [(en.title(), de.upper()) for en, de in _numbers()()]
    pairs += [("A Dog runs.", "Ein Hund rennt."), ("The DOG sleeps.", "Der Hund schläft."),
              ("Über alles", "ÜBER ALLES")] * 20
    cased = Tokenizers.train(lambda: iter(pairs), kind=kind, vocab_size=400)
    tokenizers = Tokenizers.train(lambda: iter(pairs), kind=kind, vocab_size=400, lowercase=True)
    assert tokenizers.lowercase and not cased.lowercase
    assert tokenizers.fingerprint != cased.fingerprint
    vocabulary = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
    learnt = [p for p in vocabulary[4:] if not p.startswith("<0x")]  # but bytes
    assert learnt and not any(p.lower() != p for p in learnt)  # from lowercased text
    tokenizers.save(tmp_path)
    loaded = Tokenizers.load(tmp_path)
    assert loaded.lowercase and loaded.fingerprint == tokenizers.fingerprint
    for tok in (tokenizers.src, loaded.src, loaded.tgt):
        assert tok.encode("Der HUND rennt.") == tok.encode("der hund rennt.")
        assert tok.encode_batch(["Ein Hund", "ÜBER"]) == [tok.encode("ein hund"),
                                                          tok.encode("über")]
        assert tok.decode(tok.encode("Der Hund schläft.")) == "der hund schläft."
    assert cased.src.encode("Der Hund") != cased.src.encode("der hund")


def test_loading_from_a_directory_without_tokenizer_names_it(tmp_path):
    with pytest.raises(DataError, match=rf"{tmp_path}/tokenizer.json: no tokenizer here"):
        Tokenizers.load(tmp_path)


def test_unknown_kind_and_impossible_vocabulary_are_clear_errors():
    with pytest.raises(DataError, match="data.tokenizer"):
        Tokenizers.train(_numbers(), kind="wordpiece")
    with pytest.raises(DataError, match="data.vocab_size=100000"):
        SentencePieceTokenizer.train(["tiny text", "more"], vocab_size=100000)


@needs_multi30k
def test_multi30k_round_trip_with_an_8k_shared_vocabulary():
    corpus = ParallelFiles(MULTI30K / "val.en", MULTI30K / "val.de")
    tokenizers = Tokenizers.train(corpus.pairs, vocab_size=2000)
    for src, tgt in corpus.pairs():
        assert tokenizers.src.decode(tokenizers.src.encode(src)) == src
        assert tokenizers.tgt.decode(tokenizers.tgt.encode(tgt)) == tgt


@pytest.mark.parametrize("kind", ["bpe", "unigram", "word"])
def test_corpus_errors_name_their_file_and_line_under_every_tokenizer(tmp_path, kind):
    def learn(src: bytes, tgt: bytes):
        (tmp_path / "a.en").write_bytes(src)
        (tmp_path / "a.de").write_bytes(tgt)
        corpus = ParallelFiles(tmp_path / "a.en", tmp_path / "a.de")
        return Tokenizers.train(corpus.pairs, kind=kind, vocab_size=300, name=str(corpus))

    text = b"".join(b"sentence number %d here\n" % i for i in range(50))
    with pytest.raises(DataError, match=r"a.en has 50 lines, .*a.de has 49"):
        learn(text, text[: text.rindex(b"sentence")])
    with pytest.raises(DataError, match=r"a.de:3: invalid UTF-8 at byte 2"):
        learn(text, text.replace(b"sentence number 2 ", b"se\xffntence number 2 "))
    with pytest.raises(DataError, match=r"a.en \+ .*a.de: no text to learn a vocabulary from"):
        learn(b"\n" * 5, b" \n" * 5)


def test_a_vocabulary_larger_than_the_text_supports_is_lowered_with_a_warning(caplog):
    corpus = NumberWords("train", sizes=(2000, 10, 10))
    tokenizers = Tokenizers.train(corpus.pairs, vocab_size=8000)  # both defaults
    assert 300 < tokenizers.src.vocab_size < 8000
    assert f"data.vocab_size=8000 is more than the training text supports (at most " \
           f"{tokenizers.src.vocab_size}): using {tokenizers.src.vocab_size} instead" in caplog.text
