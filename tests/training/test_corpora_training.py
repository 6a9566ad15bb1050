"""Training on many corpora (`data.corpora`) and translating a multilingual model by flag."""

import json

import pytest
import torch

from tests.data.test_corpora import write_numbers
from tests.training.test_trainer import _config, _weights
from transduce.cli import main
from transduce.training.start import resume_run, start_run

pytestmark = pytest.mark.slow  # trains


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    de, fr = write_numbers(root, "de", "de", 600, 1), write_numbers(root, "fr", "fr", 600, 2)
    bt = write_numbers(root, "bt", "de", 100, 3)
    _TARGETS.update(de=de[1], fr=fr[1])
    _VALID.update(de=write_numbers(root, "valid-de", "de", 40, 4),
                  fr=write_numbers(root, "valid-fr", "fr", 30, 5))
    return ("data.corpora=" + json.dumps([
        {"src": de[0], "tgt": de[1]}, {"src": fr[0], "tgt": fr[1], "tgt_lang": "fr"},
        {"src": bt[0], "tgt": bt[1], "tag": "<BT>", "weight": 0.5}]))


_TARGETS = {}  # language -> its training targets' file
_VALID = {}  # language -> its validation set's (source, target) files


def _trigrams(text: str) -> set[str]:
    return {text[i:i + 3] for i in range(len(text) - 2)}


def _nearer(output: str, language: str) -> bool:
    """Whether `output` shares more character trigrams with the training targets in `language`
    than with those in the other language."""
    shared = {lang: len(_trigrams(output) & _trigrams(open(path, encoding="utf-8").read()))
              for lang, path in _TARGETS.items()}
    other = next(lang for lang in shared if lang != language)
    return shared[language] > shared[other]


def _corpora_config(corpora, *extra):
    return _config("data.dataset=null", corpora, *extra)


@pytest.mark.parametrize("bpe_dropout", [0.0, 0.1])
def test_a_run_on_many_corpora_resumes_to_the_bit(corpora, tmp_path, bpe_dropout):
    dropout = f"data.bpe_dropout={bpe_dropout}"
    straight = start_run(_corpora_config(corpora, "train.max_updates=100", dropout),
                         tmp_path / "a")
    straight.train()
    assert straight.progress.epoch >= 1  # the resumed part crosses into another epoch's sample
    segmented = straight.epochs.epoch(1)[0].tgt_lengths
    taken = straight.data.mixture.epoch(1, seed=straight.config.train.seed).tgt_lengths
    assert (segmented != taken).any() == (bpe_dropout > 0)  # the same pairs, segmented anew
    start_run(_corpora_config(corpora, "train.max_updates=50", dropout), tmp_path / "b").train()
    resume_run(tmp_path / "b", ["train.max_updates=100"]).train()
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def multilingual(corpora, tmp_path_factory):
    run = tmp_path_factory.mktemp("multilingual") / "run"
    start_run(_corpora_config(corpora, "train.max_updates=250", "train.lr=0.005"), run).train()
    return run


def _translate(run, tmp_path, *args):
    source = tmp_path / "in.txt"
    source.write_text("seven\nninety-one\ntwelve\nthree hundred and four\nsixty\n"
                      "eight thousand and twenty\nforty-five\nnine hundred\n")
    out = tmp_path / "out.txt"
    code = main(["translate", "--model", str(run), "-i", str(source), "-o", str(out), *args])
    return code, out.read_text().splitlines() if code == 0 else None


def test_a_multilingual_model_translates_into_the_language_asked(multilingual, tmp_path,
                                                                 capsys):
    _, german = _translate(multilingual, tmp_path, "--tgt-lang", "de")
    _, french = _translate(multilingual, tmp_path, "--tgt-lang", "fr")
    assert sum(g != f for g, f in zip(german, french, strict=True)) >= 6
    # after 250 updates the numbers are not right yet, but their language is
    assert sum(_nearer(g, "de") for g in german) >= 6, german
    assert sum(_nearer(f, "fr") for f in french) >= 6, french
    code, _ = _translate(multilingual, tmp_path)
    assert code == 2
    assert "this model translates into de, fr: choose one with --tgt-lang" in \
        capsys.readouterr().err
    code, _ = _translate(multilingual, tmp_path, "--tgt-lang", "cs")
    assert code == 2 and "--tgt-lang cs: this model translates into de, fr" in \
        capsys.readouterr().err




def test_a_multilingual_run_serves_each_of_its_pairs(multilingual, tmp_path):
    """One `--model RUN` serves en:de and en:fr, each as `translate --tgt-lang` translates."""
    from fastapi.testclient import TestClient

    from transduce.serve import ModelSpec, ServeSettings, create_app, load_models

    models = load_models([ModelSpec.parse(str(multilingual))], device="cpu")
    assert [m.name for m in models] == ["en-de", "en-fr"]
    assert models[0].translator.model is models[1].translator.model  # loaded once
    sentences = ["seven", "ninety-one", "twelve", "sixty"]
    with TestClient(create_app(models, ServeSettings())) as client:
        languages = client.get("/languages").json()
        assert {t for lang in languages if lang["code"] == "en" for t in lang["targets"]} >= {
            "de", "fr"}
        for target in ("de", "fr"):
            answer = client.post("/translate", json={"q": sentences, "source": "en",
                                                     "target": target})
            assert answer.status_code == 200, answer.text
            (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n")
            assert main(["translate", "--model", str(multilingual), "--tgt-lang", target,
                         "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]) == 0
            assert answer.json()["translatedText"] == \
                (tmp_path / "out.txt").read_text().splitlines()
    from transduce.errors import UserError

    with pytest.raises(UserError, match="the run translates into de, fr"):
        ModelSpec.parse(f"en:cs={multilingual}").pairs()
    assert ModelSpec.parse(f"en:fr={multilingual}").pairs() == {("en", "fr"): "fr"}


def test_a_multilingual_run_validates_each_pair(corpora, tmp_path):
    import math

    valid = "data.valid_corpora=" + json.dumps([
        {"src": _VALID["de"][0], "tgt": _VALID["de"][1], "tgt_lang": "de"},
        {"src": _VALID["fr"][0], "tgt": _VALID["fr"][1], "tgt_lang": "fr"}])
    trainer = start_run(_corpora_config(corpora, valid, "train.max_updates=20",
                                        "train.validate_every=10", "train.bleu=true"),
                        tmp_path / "run")
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    by_split = {}
    for row in rows:
        by_split.setdefault(row["split"], []).append(row)
    assert [r["update"] for r in by_split["valid en-de"]] == [10, 20]
    assert [r["update"] for r in by_split["valid en-fr"]] == [10, 20]
    for whole, de, fr in zip(by_split["valid"], by_split["valid en-de"], by_split["valid en-fr"],
                             strict=True):
        for key in ("valid_loss", "valid_bleu", "valid_chrf", "valid_ter", "valid_exact"):
            assert math.isclose(whole[key], (de[key] + fr[key]) / 2), key
    log = (tmp_path / "run" / "train.log").read_text()
    assert "update 20: valid en-fr loss" in log and "(mean of 2 pairs)" in log
    sets = trainer.data.valid_sets
    assert [s.name for s in sets] == ["en-de", "en-fr"] and [len(s.data) for s in sets] == [40, 30]
    tok = trainer.data.tokenizers.src
    assert tok.pieces(sets[1].data.src(0).tolist()).count("<2fr>") == 1
