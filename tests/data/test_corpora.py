"""Many corpora (`data.corpora`): shards, epochs sampled by weight or temperature, tags and
language tokens."""

import random

import numpy as np
import pytest
from num2words import num2words

from transduce.config import load_config
from transduce.data.config import DataConfig
from transduce.data.corpora import epoch_counts
from transduce.data.prepare import prepare
from transduce.errors import UserError


def write_numbers(directory, name: str, tgt_lang: str, n: int, seed: int):
    """`n` number words, English and `tgt_lang`, as name.en and name.<tgt_lang>."""
    rng = random.Random(seed)
    numbers = [rng.randint(0, 99_999) for _ in range(n)]
    src, tgt = directory / f"{name}.en", directory / f"{name}.{tgt_lang}"
    src.write_text("".join(num2words(x, lang="en") + "\n" for x in numbers), encoding="utf-8")
    tgt.write_text("".join(num2words(x, lang=tgt_lang) + "\n" for x in numbers),
                   encoding="utf-8")
    return str(src), str(tgt)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    return {"de": write_numbers(root, "de", "de", 400, 1),
            "fr": write_numbers(root, "fr", "fr", 150, 2),
            "bt": write_numbers(root, "bt", "de", 50, 3)}


def _config(files, temperature=1.0, **extra):
    corpora = [{"src": files["de"][0], "tgt": files["de"][1], "weight": 0.5},
               {"src": files["fr"][0], "tgt": files["fr"][1], "tgt_lang": "fr"},
               {"src": files["bt"][0], "tgt": files["bt"][1], "tag": "<BT>", "weight": 2}]
    return DataConfig(dataset=None, corpora=corpora, vocab_size=300, max_length_ratio=9,
                      temperature=temperature, **extra)


@pytest.fixture(scope="module")
def data(files, tmp_path_factory):
    return prepare(_config(files), tmp_path_factory.mktemp("prepared"))


def test_an_epoch_takes_weight_times_size_from_each_corpus(data):
    mixture = data.mixture
    assert mixture.sizes == [400, 150, 50]
    assert mixture.counts == [200, 150, 100]  # half, whole, twice
    for epoch in range(3):
        pairs = mixture.epoch(epoch, seed=1)
        taken = np.bincount(pairs.shard, minlength=3).tolist()
        assert taken == [200, 150, 100]
        assert len(set(pairs.index[pairs.shard == 0].tolist())) == 200  # no pair twice
        assert np.bincount(pairs.index[pairs.shard == 2], minlength=50).tolist() == [2] * 50
    halves = [set(mixture.epoch(e, seed=1).index[mixture.epoch(e, seed=1).shard == 0].tolist())
              for e in range(2)]
    assert halves[0] != halves[1]  # a different half each epoch
    again = mixture.epoch(1, seed=1)  # depends on (seed, epoch) alone
    assert (again.index == mixture.epoch(1, seed=1).index).all()
    assert not (again.index == mixture.epoch(1, seed=2).index).all()


def test_each_pair_of_an_epoch_is_its_corpus_pair(data):
    pairs = data.mixture.epoch(0, seed=1)
    shards = data.mixture.shards
    for i in range(0, len(pairs), 7):
        shard, index = shards[pairs.shard[i]], pairs.index[i]
        assert (pairs.src(i) == shard.src(index)).all() and (pairs.tgt(i) == shard.tgt(index)).all()
        assert pairs.src_lengths[i] == len(shard.src(index))


def test_temperature_moves_the_shares_towards_equal():
    sizes, weights = [9000, 900, 100], [1.0, 1.0, 1.0]
    assert epoch_counts(sizes, weights, 1.0) == sizes
    flat = epoch_counts(sizes, weights, 5.0)
    assert abs(sum(flat) - sum(sizes)) <= 2  # the epoch keeps its size
    assert flat[0] < 9000 and flat[2] > 100
    shares = np.array(flat) / sum(flat)
    expected = np.array(sizes, dtype=float) ** 0.2
    np.testing.assert_allclose(shares, expected / expected.sum(), atol=1e-3)
    assert epoch_counts(sizes, weights, 1e6)[0] == pytest.approx(sum(sizes) / 3, abs=2)


def test_sampling_by_temperature_over_an_epoch(files, tmp_path):
    data = prepare(_config(files, temperature=3.0), tmp_path)
    weighted = np.array([200.0, 150.0, 100.0])
    expected = weighted ** (1 / 3) / (weighted ** (1 / 3)).sum() * weighted.sum()
    taken = np.bincount(data.mixture.epoch(0, seed=1).shard, minlength=3)
    np.testing.assert_allclose(taken, expected, atol=1)


def test_tags_and_language_tokens_are_whole_and_once_in_each_source(data):
    tok = data.tokenizers.src
    ids = {piece: tok.encode(piece) for piece in ("<BT>", "<2de>", "<2fr>")}
    assert all(len(v) <= 2 for v in ids.values())  # the symbol, perhaps after "▁"
    symbol = {piece: next(i for i in v if tok.pieces([i])[0] == piece) for piece, v in ids.items()}
    expected = [{"<2de>": 1, "<2fr>": 0, "<BT>": 0}, {"<2de>": 0, "<2fr>": 1, "<BT>": 0},
                {"<2de>": 1, "<2fr>": 0, "<BT>": 1}]
    for shard, counts in zip(data.mixture.shards, expected, strict=True):
        for i in range(len(shard)):
            src = shard.src(i).tolist()
            assert {p: src.count(symbol[p]) for p in symbol} == counts
        assert all(symbol[p] not in shard.tgt(i).tolist() for p in symbol for i in range(5))
    # the symbols are kept whole wherever they stand
    assert tok.pieces(tok.encode("one <2fr><BT> two")).count("<2fr>") == 1


def test_one_target_language_has_no_language_token(files, tmp_path):
    config = DataConfig(dataset=None, vocab_size=300, max_length_ratio=9, corpora=[
        {"src": files["de"][0], "tgt": files["de"][1]},
        {"src": files["bt"][0], "tgt": files["bt"][1], "tag": "<BT>"}])
    assert config.symbols() == ("<BT>",) and not config.languages_tagged
    forced = DataConfig(dataset=None, corpora=config.corpora, lang_tokens=True)
    assert forced.symbols() == ("<BT>", "<2de>")
    data = prepare(config, tmp_path)
    assert "<2de>" not in data.tokenizers.src.pieces(data.mixture.shards[0].src(0).tolist())
    assert config.language_prefix(None) == "" and config.language_prefix("de") == ""
    with pytest.raises(UserError, match="this model translates into de"):
        config.language_prefix("fr")


def test_a_multilingual_model_must_be_told_its_target(files):
    config = _config(files)
    assert config.target_languages == ("de", "fr")
    assert config.language_prefix("fr") == "<2fr>"
    with pytest.raises(UserError, match="translates into de, fr: choose one with --tgt-lang"):
        config.language_prefix(None)
    lowercase = _config(files, lowercase=True)
    assert lowercase.symbols() == ("<bt>", "<2de>", "<2fr>")


@pytest.mark.parametrize("corpora, message", [
    ("[]", "data.corpora is empty"),
    ("[{src: a.en}]", "data.corpora[0]: give src and tgt, or tsv"),
    ("[{tsv: a.tsv}, {src: a.en, tgt: a.de, tsv: b.tsv}]", "data.corpora[1]: give src and tgt"),
    ("[{tsv: a.tsv, weight: x}]", "data.corpora[0].weight must be a number, got 'x'"),
    ("[{tsv: a.tsv, weight: 0}]", "data.corpora[0].weight must be positive"),
    ("[{tsv: a.tsv, tag: 'a b'}]", "data.corpora[0].tag must be one token"),
    ("[{tsv: a.tsv, lang: de}]", "data.corpora[0]: unknown key 'lang'"),
    ("[a.tsv]", "data.corpora[0] must be a mapping"),
    ("{tsv: a.tsv}", "data.corpora must be a list"),
])
def test_bad_corpora_are_one_line_errors(corpora, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(overrides=["data.dataset=null", f"data.corpora={corpora}"])


def test_corpora_exclude_the_other_sources_and_what_they_cannot_do():
    corpora = ["data.corpora=[{tsv: a.tsv}]"]
    for extra, message in ((["data.dataset=numbers"], "data.dataset and data.corpora"),
                           (["data.dataset=null", "data.train_tsv=b.tsv"], "exclude each other"),
                           (["data.dataset=null", "data.bidirectional_epochs=1",
                             "data.corpora=[{tsv: a.tsv, tag: <BT>}]"], "bidirectional_epochs"),
                           (["data.dataset=null", "data.bidirectional_epochs=1",
                             "data.corpora=[{tsv: a.tsv}, {tsv: b.tsv, tgt_lang: fr}]"],
                            "language tokens"),
                           (["data.dataset=null", "data.tokenizer=word",
                             "data.corpora=[{tsv: a.tsv, tag: <BT>}]"], "SentencePiece"),
                           (["data.dataset=null", "data.temperature=0"], "temperature")):
        with pytest.raises(UserError, match=message):
            load_config(overrides=[*corpora, *extra])


def test_a_missing_corpus_file_is_named(files, tmp_path):
    config = DataConfig(dataset=None, corpora=[{"src": files["de"][0], "tgt": files["de"][1]},
                                               {"tsv": str(tmp_path / "gone.tsv")}])
    with pytest.raises(UserError, match=r"data.corpora\[1\].tsv .*gone.tsv: no such file"):
        prepare(config, tmp_path / "run")


def test_prepare_takes_corpora_on_its_command_line(files, tmp_path, capsys):
    from transduce.cli import main

    corpora = (f"[{{src: {files['de'][0]}, tgt: {files['de'][1]}, weight: 2}}, "
               f"{{src: {files['bt'][0]}, tgt: {files['bt'][1]}, tag: <BT>}}]")
    assert main(["prepare", "--out", str(tmp_path / "p"), "--vocab-size", "300",
                 "--max-length-ratio", "9", "--corpora", corpora, "--lang-tokens", "true",
                 "--temperature", "2"]) == 0
    assert "train: 450 pairs" in capsys.readouterr().out  # 400 + 50, each once
    assert sorted(p.name for p in (tmp_path / "p" / "data").iterdir()) == ["train.0", "train.1"]
    pieces = set()
    from transduce.data.binarize import TokenizedCorpus
    from transduce.data.tokenizer import Tokenizers

    tok = Tokenizers.load(tmp_path / "p").src
    pieces = tok.pieces(TokenizedCorpus(tmp_path / "p" / "data" / "train.1").src(0).tolist())
    assert pieces.count("<BT>") == pieces.count("<2de>") == 1  # lang_tokens forced on
    with pytest.raises(SystemExit):  # argparse's own error, one line
        main(["prepare", "--out", str(tmp_path / "q"), "--corpora", "[{src: x"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --corpora: not valid YAML: '[{src: x' (expected ','" in err


def _symbols(tok) -> dict[str, int]:
    """The ids of the tags and language tokens of `_config`'s corpora."""
    return {piece: next(i for i in tok.encode(piece) if tok.pieces([i])[0] == piece)
            for piece in ("<BT>", "<2de>", "<2fr>")}


def test_bpe_dropout_segments_each_pair_an_epoch_takes_anew(data):
    from transduce.data.sampling import MixtureDropout

    def dropout(seed=1):
        return MixtureDropout(data.mixture, data.train_corpus, data.tokenizers, dropout=0.1,
                              seed=seed, max_length=data.max_length)

    tok, symbols = data.tokenizers, _symbols(data.tokenizers.src)
    sampled, taken = dropout().epoch(0), data.mixture.epoch(0, seed=1)
    assert len(sampled) == len(taken) == sum(data.mixture.counts)
    changed = 0
    for i in range(len(taken)):  # the pairs the epoch takes, in its order, segmented anew
        src, fixed = sampled.src(i), taken.src(i).tolist()
        assert tok.src.decode(src) == tok.src.decode(fixed)
        assert tok.tgt.decode(sampled.tgt(i)) == tok.tgt.decode(taken.tgt(i).tolist())
        # tags and language tokens whole, once, where they stand in the corpus's shard
        assert [src.count(s) for s in symbols.values()] == [fixed.count(s)
                                                            for s in symbols.values()]
        assert [src.index(s) for s in symbols.values() if s in fixed] == [
            fixed.index(s) for s in symbols.values() if s in fixed]
        assert max(len(src), len(sampled.tgt(i))) <= data.max_length
        changed += sampled.tgt(i) != taken.tgt(i).tolist()
    assert 0.1 < changed / len(taken) < 1
    # a pair taken twice (weight 2) is segmented twice
    twice = np.flatnonzero(taken.shard == 2)
    first, second = twice[: len(twice) // 2], twice[len(twice) // 2:]
    assert (taken.index[first] == taken.index[second]).all()
    assert any(sampled.tgt(a) != sampled.tgt(b) for a, b in zip(first, second, strict=True))
    # an epoch depends on (seed, epoch) alone
    again = dropout()
    again.epoch(1)
    assert again.epoch(0).tgts == sampled.tgts and again.epoch(0).srcs == sampled.srcs
    assert dropout(seed=2).epoch(0).tgts != sampled.tgts


def test_untagged_corpora_train_both_ways_in_the_first_epochs(files, tmp_path):
    from transduce.training.epochs import Epochs

    config = DataConfig(dataset=None, vocab_size=300, max_length_ratio=9, bidirectional_epochs=1,
                        corpora=[{"src": files["de"][0], "tgt": files["de"][1], "weight": 0.5},
                                 {"src": files["bt"][0], "tgt": files["bt"][1]}])
    data = prepare(config, tmp_path)
    epochs = Epochs(data, config, seed=1)
    both, _ = epochs.epoch(0)
    taken = data.mixture.epoch(0, seed=1)
    assert len(both) == 2 * len(taken) == 2 * (200 + 50)
    for i in range(0, len(taken), 9):  # each pair as it is, then reversed
        assert (both.src(i) == taken.src(i)).all() and (both.tgt(i) == taken.tgt(i)).all()
        j = len(taken) + i
        assert (both.src(j) == taken.tgt(i)).all() and (both.tgt(j) == taken.src(i)).all()
    one_way, _ = epochs.epoch(1)
    assert len(one_way) == len(data.mixture.epoch(1, seed=1))
