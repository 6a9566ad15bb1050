import pytest

from transduce.decoding.glossary import Glossary
from transduce.decoding.translator import Translator
from transduce.errors import UserError

from ..conftest import own_path_only
from .test_translator import run_dir  # noqa: F401 (a module-scoped trained run)


@pytest.mark.parametrize(("sentence", "terms"), [
    ("a cat sat", ["Katze"]),
    ("cats and a category", []),  # whole words only
    ("A CAT, a Cat", ["Katze"]),  # a lower-case term in any case, its target once
    ("an apple from Apple", ["Apfel", "Apple Inc."]),  # a term with a capital as written
    ("APPLE", ["Apfel"]),
    ("in New  York\tand York", ["Nueva York", "Yorck"]),  # the longest; any whitespace
    ("york", []),  # "York" is written with a capital
    ("write C++ code", ["C plus plus"]),  # terms ending in non-word characters
    ("", []),
])
def test_terms_match_whole_words_longest_first_with_smart_case(sentence, terms):
    glossary = Glossary.of({"cat": "Katze", "apple": "Apfel", "Apple": "Apple Inc.",
                            "new york": "Nueva York", "York": "Yorck", "C++": "C plus plus"})
    assert glossary.terms(sentence) == terms


def test_a_glossary_file_with_comments_blank_lines_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("\ufeff# source\ttarget\n\nNew York\tNueva York\n  cat \t Katze \n",
                    encoding="utf-8")
    glossary = Glossary.read(path)
    assert glossary.entries == (("New York", "Nueva York"), ("cat", "Katze"))
    assert len(glossary) == 2 and Glossary.of({}).terms("a cat") == []


@pytest.mark.parametrize(("text", "message"), [
    ("cat\n", "terms.tsv:1: expected 'source term<TAB>target term', got 'cat'"),
    ("cat\tKatze\n\ndog\t\n", "terms.tsv:3: expected"),
    ("cat\tKatze\tchat\n", "terms.tsv:1: expected"),
    ("cat\tKatze\nCAT\tKater\nCat\tKatze\ncat\tMieze\n",
     "terms.tsv: glossary: 'cat' has two target terms, 'Katze' and 'Mieze'"),
])
def test_a_bad_glossary_line_is_named(tmp_path, text, message):
    path = tmp_path / "terms.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message.replace("+", r"\+")) as error:
        Glossary.read(path)
    assert len(str(error.value).splitlines()) == 1


def test_invalid_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes(b"caf\xe9\tCafe\n")
    with pytest.raises(UserError, match="cannot read the glossary"):
        Glossary.read(path)


SENTENCES = ["seven", "ninety-nine and seven", "one hundred and two", "forty-two", "ninety-nine"]
GLOSSARY = Glossary.of({"seven": "777", "hundred": "HX", "ninety-nine": "9 9 9", "two": "QQ"})


@own_path_only  # a batch's outputs are a sentence's alone on every path: test_beam, test_greedy
@pytest.mark.parametrize("beam_size", [1, 3])
def test_every_translation_holds_its_terms_batched_and_alone(run_dir, beam_size):  # noqa: F811
    translator = Translator.load(run_dir)
    found = translator.translate_detailed(SENTENCES, beam_size=beam_size, nbest=beam_size,
                                          glossary=GLOSSARY)
    for sentence, translation in zip(SENTENCES, found, strict=True):
        for term in GLOSSARY.terms(sentence):
            assert term in translation.text, (sentence, translation.text)
        alone = translator.translate_detailed([sentence], beam_size=beam_size, nbest=beam_size,
                                              glossary=GLOSSARY)[0]
        assert [t for t, _ in alone.nbest] == [t for t, _ in translation.nbest]


def test_no_glossary_and_an_empty_one_change_nothing(run_dir):  # noqa: F811
    translator = Translator.load(run_dir)
    plain = translator.translate_detailed(SENTENCES, beam_size=3, nbest=2)
    assert translator.translate_detailed(SENTENCES, beam_size=3, nbest=2,
                                         glossary=Glossary.of({})) == plain
    unmatched = Glossary.of({"elephant": "Elefant"})
    assert translator.translate_detailed(SENTENCES, beam_size=3, nbest=2,
                                         glossary=unmatched) == plain


def test_terms_per_sentence_beside_a_glossary(run_dir):  # noqa: F811
    translator = Translator.load(run_dir)
    out = translator.translate(SENTENCES[:2], beam_size=3, glossary=GLOSSARY,
                               terms=[["ZZ"], []])
    assert "ZZ" in out[0] and "777" in out[0] and "9 9 9" in out[1]
    with pytest.raises(UserError, match="1 lists of terms for 2 sentences"):
        translator.translate(SENTENCES[:2], terms=[["ZZ"]])


def test_the_check_finds_each_term_and_whether_the_alignments_link_it():
    glossary = Glossary.of({"black dog": "schwarzer Hund", "beach": "Strand", "sea": "Meer"})
    links = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4)]
    checks = glossary.check("A black dog on the beach by the sea.",
                            "Ein schwarzer Hund am Meer.", links)
    assert [(c.source, c.target, c.found, c.aligned, c.source_words, c.target_words)
            for c in checks] == [
        ("black dog", "schwarzer Hund", True, True, [1, 2], [1, 2]),
        ("beach", "Strand", False, False, [5], []),
        ("sea", "Meer", True, False, [8], [4]),  # there, but aligned with "beach"
    ]
    assert [c.aligned for c in glossary.check("the sea", "das Meer")] == [None]  # not asked
