import pytest

from transduce.data.config import DataConfig
from transduce.data.numbers import NumberWords
from transduce.data.prepare import corpus, prepare
from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError

from ..conftest import MULTI30K, needs_multi30k


def test_prepare_learns_saves_and_reuses(tmp_path):
    config = DataConfig(dataset="numbers", vocab_size=400, numbers_train_size=3000)
    data = prepare(config, tmp_path)
    assert len(data.train) == 3000 and len(data.valid) == 1000
    loaded = Tokenizers.load(tmp_path)
    assert loaded.fingerprint == data.tokenizers.fingerprint
    again = prepare(config, tmp_path, tokenizers=loaded)
    assert again.train.meta == data.train.meta  # the binarized cache, not a rebuild
    src, _ = next(iter(data.valid_corpus.pairs()))
    assert data.tokenizers.src.decode(data.valid.src(0)) == src


def test_prepare_refuses_tokenizers_that_do_not_lowercase_as_configured(tmp_path):
    config = DataConfig(dataset="numbers", vocab_size=400, numbers_train_size=3000)
    cased = prepare(config, tmp_path).tokenizers
    with pytest.raises(UserError, match="data.lowercase=true, but the given tokenizers do not"):
        prepare(DataConfig(**{**vars(config), "lowercase": True}), tmp_path, tokenizers=cased)


def test_own_files_and_tsv(tmp_path):
    (tmp_path / "t.en").write_text("a house\nthe dog\n")
    (tmp_path / "t.de").write_text("ein Haus\nder Hund\n")
    (tmp_path / "v.tsv").write_text("a dog\tein Hund\n")
    config = DataConfig(dataset=None, train_src=str(tmp_path / "t.en"),
                        train_tgt=str(tmp_path / "t.de"), valid_tsv=str(tmp_path / "v.tsv"),
                        tokenizer="word")
    data = prepare(config, tmp_path / "out")
    assert (len(data.train), len(data.valid)) == (2, 1)
    assert corpus(config, "test") is None


@pytest.mark.parametrize("fields, message", [
    (dict(dataset=None), "give data.dataset"),
    (dict(dataset="numbers", train_src="a", train_tgt="b"), "exclude each other"),
    (dict(dataset="wmt99"), "unknown dataset 'wmt99'"),
    (dict(dataset=None, train_src="a"), "go together"),
    (dict(tokenizer="chars"), "data.tokenizer"),
    (dict(vocab_size=0), "data.vocab_size"),
    (dict(max_length_ratio=0.5), "data.max_length_ratio"),
])
def test_bad_settings_name_the_key(fields, message):
    with pytest.raises(UserError, match=message):
        DataConfig(**fields)


def test_numbers_config_reaches_the_corpus():
    config = DataConfig(dataset="numbers", tgt_lang="fr", seed=4, numbers_train_size=100,
                        numbers_max=5000)
    assert corpus(config, "test") == NumberWords("test", "en", "fr", seed=4, max_number=5000,
                                                 sizes=(100, 1000, 1000))


@needs_multi30k
def test_multi30k_from_its_directory(tmp_path):
    config = DataConfig(dataset="multi30k", dir=str(MULTI30K), vocab_size=8000)
    data = prepare(config, tmp_path)
    assert len(data.valid) == 1014
    assert data.train.skips.kept + data.train.skips.skipped == 29000
