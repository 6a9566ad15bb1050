import numpy as np
import pytest
from num2words import num2words

from transduce.data.numbers import NumberWords
from transduce.errors import DataError


def test_the_example_of_the_issue():
    assert num2words(342, lang="en") == "three hundred and forty-two"
    assert num2words(342, lang="de") == "dreihundertzweiundvierzig"


def test_pairs_spell_the_same_number_in_both_languages():
    corpus = NumberWords("valid", tgt_lang="fr", sizes=(100, 50, 50))
    for n, (en, fr) in zip(corpus.numbers().tolist(), corpus.pairs(), strict=True):
        assert (en, fr) == (num2words(n, lang="en"), num2words(n, lang="fr"))


def test_splits_are_disjoint_and_deterministic_by_seed():
    sizes = (2000, 300, 300)
    splits = {s: NumberWords(s, sizes=sizes, seed=7).numbers() for s in ("train", "valid", "test")}
    assert [len(v) for v in splits.values()] == list(sizes)
    everything = np.concatenate(list(splits.values()))
    assert len(np.unique(everything)) == sum(sizes)
    assert np.array_equal(NumberWords("test", sizes=sizes, seed=7).numbers(), splits["test"])
    assert not np.array_equal(NumberWords("test", sizes=sizes, seed=8).numbers(), splits["test"])


def test_short_numbers_are_not_drowned_out():
    numbers = NumberWords("train", sizes=(5000, 10, 10)).numbers()
    digits = np.bincount([len(str(n)) for n in numbers])
    assert digits[1] >= 5 and digits[2] >= 50 and digits[3] >= 500


def test_bad_requests_are_clear_errors():
    with pytest.raises(DataError, match="split"):
        NumberWords("dev")
    with pytest.raises(DataError, match="language 'xx'"):
        NumberWords(tgt_lang="xx")
    with pytest.raises(DataError, match="distinct numbers"):
        NumberWords(max_number=100)
