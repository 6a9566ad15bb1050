"""`transduce export` and `train --init-from` on a run of ours: Hugging Face and back, an Argos
Translate package installed and run by the real argostranslate, fine-tuning that resumes."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

from transduce.cli import main
from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.runs import checkpoint as ckpt
from transduce.runs.load import load_run
from transduce.training.start import resume_run, start_run

from ..training.test_trainer import FAST

pytest.importorskip("transformers")
SOURCES = ["seven", "one hundred and two", "forty-two", "three thousand and nine", "twelve",
           "eighty-one", "five hundred", "sixty-six", "nine hundred and ninety", "thirteen"]


def _trained(tmp_path_factory, updates: int):
    """An en -> de run of the number words, of `updates` updates and 40 positions."""
    run = tmp_path_factory.mktemp("export") / "run"
    start_run(load_config(overrides=[*FAST, f"train.max_updates={updates}",
                                     "model.max_positions=40", "data.src_lang=en",
                                     "data.tgt_lang=de"]), run).train()
    return run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return _trained(tmp_path_factory, 60)


def test_hugging_face_export_imports_back_with_the_same_logits(run_dir, tmp_path):
    assert main(["export", str(run_dir), "--to", "huggingface", "--out", str(tmp_path / "hf")]
                ) == 0
    assert main(["import", "marian", str(tmp_path / "hf"), "--out", str(tmp_path / "back")]) == 0
    ours, back = load_run(run_dir), load_run(tmp_path / "back")
    src = torch.tensor([ours.tokenizers.src.encode(s) + [3] for s in SOURCES[:1]] * 2)
    tgt = torch.tensor([[2, 5, 9, 11, 4]] * 2)
    with torch.no_grad():
        torch.testing.assert_close(back.model(src, tgt), ours.model(src, tgt), atol=1e-4,
                                   rtol=1e-4)
    assert [back.tokenizers.src.encode(s) for s in SOURCES] == [
        ours.tokenizers.src.encode(s) for s in SOURCES]


def test_an_export_refuses_to_overwrite_and_a_bad_run_is_one_line(run_dir, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep")
    assert main(["export", str(run_dir), "--to", "ctranslate2", "--out",
                 str(tmp_path / "taken")]) == 2
    assert main(["export", str(tmp_path), "--to", "ctranslate2", "--out",
                 str(tmp_path / "new")]) == 2
    assert main(["export", str(run_dir), "--to", "huggingface", "--quantization", "int8",
                 "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("transduce: error:") for line in err)
    assert (tmp_path / "taken" / "x").read_text() == "keep"


ARGOS = textwrap.dedent("""
    import json, sys
    import argostranslate.package, argostranslate.translate
    argostranslate.package.install_from_path(sys.argv[1])
    sources = json.loads(sys.argv[2])
    print(json.dumps([argostranslate.translate.translate(s, "en", "de") for s in sources]))
""")


def test_an_argos_package_installs_and_translates_as_our_greedy_search(run_dir, tmp_path):
    pytest.importorskip("argostranslate")
    package = tmp_path / "en_de.argosmodel"
    assert main(["export", str(run_dir), "--to", "argos", "--out", str(package)]) == 0
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        top = {n.split("/")[0] for n in names}
        assert len(top) == 1
        (root,) = top
        metadata = json.loads(archive.read(f"{root}/metadata.json"))
        model_config = json.loads(archive.read(f"{root}/model/config.json"))
    assert {f"{root}/sentencepiece.model", f"{root}/model/model.bin"} <= set(names)
    assert any(n.startswith(f"{root}/spacy/") for n in names)
    assert (metadata["from_code"], metadata["to_code"]) == ("en", "de")
    assert {"package_version", "argos_version", "from_name", "to_name"} <= metadata.keys()
    assert model_config["add_source_eos"] is True
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
           "ARGOS_CHUNK_TYPE": "SPACY", "ARGOS_BEAM_SIZE": "1", "ARGOS_DEVICE_TYPE": "cpu",
           "ARGOS_COMPUTE_TYPE": "float32"}  # "auto" may pick int8
    (home / "cache" / "argos-translate" / "spacy" / "senter" / "model").mkdir(parents=True)
    done = subprocess.run([sys.executable, "-c", ARGOS, str(package), json.dumps(SOURCES)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = Translator.load(run_dir, device="cpu").translate(SOURCES, beam_size=1)
    assert theirs == ours
    assert (home / "data" / "argos-translate" / "packages").is_dir()


def _ft_config(source, tmp_path, *overrides):
    pairs = "".join(f"{s}\t{s.upper()}\n" for s in SOURCES * 20)
    (tmp_path / "ft.tsv").write_text(pairs)
    return load_config(overrides=[
        "data.dataset=null", f"data.train_tsv={tmp_path / 'ft.tsv'}", "data.max_tokens=300",
        "train.bleu=false", "train.validate_every=0", "train.log_every=1", "train.warmup=5",
        "train.lr=0.001", f"train.init_from={source}", "model.dropout=0.0", *overrides])


@pytest.fixture(params=["ours", "opus-mt"])
def source_run(request, run_dir, tmp_path_factory):
    """A run to fine-tune: one of ours, or an imported OPUS-MT model (Marian's special ids, an
    output bias)."""
    if request.param == "ours":
        return run_dir
    from transduce.importers.marian import import_marian

    from ..importers.opus_mt import make_opus_mt

    root = tmp_path_factory.mktemp("opus")
    return import_marian(make_opus_mt(root / "opus"), root / "run")


def test_fine_tuning_starts_from_the_source_models_loss(source_run, tmp_path):
    from transduce.training.loss import label_smoothed_cross_entropy

    run_dir = source_run
    trainer = start_run(_ft_config(run_dir, tmp_path, "train.max_updates=1"), tmp_path / "ft")
    source = load_run(run_dir).model
    batch = next(iter(trainer.epochs.stream(type("P", (), {"epoch": 0, "batch_in_epoch": 0})())))
    with torch.no_grad():
        expected = label_smoothed_cross_entropy(
            source(batch.src, batch.tgt_in), batch.tgt_out, ignore_index=source.config.pad_id,
            epsilon=trainer.config.train.label_smoothing).item() / batch.n_tgt_tokens
    assert batch.tgt_in[0, 0] == source.config.bos_id and batch.src[0, -1] in (
        source.config.eos_id, source.config.pad_id)
    trainer.train()
    first = json.loads((tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["update"] == 1
    assert first["train_loss"] == pytest.approx(expected, rel=1e-5)
    assert load_run(tmp_path / "ft").config.model == load_run(run_dir).config.model.replace(
        dropout=0.0)


def test_a_fine_tuning_run_resumes_to_the_bit(source_run, tmp_path):
    run_dir = source_run
    start_run(_ft_config(run_dir, tmp_path, "train.max_updates=8"), tmp_path / "a").train()
    start_run(_ft_config(run_dir, tmp_path, "train.max_updates=4"), tmp_path / "b").train()
    resume_run(tmp_path / "b", ["train.max_updates=8"]).train()
    a = ckpt.read_weights(ckpt.latest_checkpoint(tmp_path / "a") / ckpt.WEIGHTS)
    b = ckpt.read_weights(ckpt.latest_checkpoint(tmp_path / "b") / ckpt.WEIGHTS)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    source = ckpt.read_weights(ckpt.model_checkpoint(run_dir))
    assert not torch.equal(a["encoder.embedding.tokens.weight"],
                           source["encoder.embedding.tokens.weight"])


def test_a_conflicting_model_key_is_an_error_naming_it(run_dir, tmp_path, capsys):
    assert main(["train", "--init-from", str(run_dir), "model.d_model=64",
                 "--run-dir", str(tmp_path / "x")]) == 2
    assert "model.d_model=64" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def long_outputs_run(tmp_path_factory):
    """A barely trained run whose outputs run long (to its 38-token maximum), greedy or beam."""
    return _trained(tmp_path_factory, 2)


def _export_with(run_dir, tmp_path, **settings):
    """Export `run_dir` with these decode settings in its config (a copy of the run)."""
    import shutil

    import yaml

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".lock"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["decode"].update(settings)
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["export", str(copy), "--to", "huggingface", "--out",
                 str(tmp_path / "hf-dir")]) == 0
    return load_run(copy), tmp_path / "hf-dir"


def _docs_generate(hf_dir, sentences):
    """docs/models.md's snippet, nothing set by hand: (token ids after the start token)."""
    from transformers import MarianMTModel, MarianTokenizer

    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    model = MarianMTModel.from_pretrained(hf_dir)
    outputs = []
    for sentence in sentences:
        batch = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            outputs.append((batch["input_ids"], model.generate(**batch)[0].tolist()[1:]))
    return outputs


def test_the_docs_generate_snippet_searches_as_the_run_does(long_outputs_run, tmp_path):
    """The run's length limit comes with the export: Hugging Face's default stops at 20
    tokens; ours run to the model's 38."""
    from transduce.decoding.search import search

    run, hf_dir = _export_with(long_outputs_run, tmp_path, beam_size=1)
    longest = 0
    for src, theirs in _docs_generate(hf_dir, SOURCES):
        [ours] = search(run.model, src, run.config.decode)
        assert theirs == [*ours[0].tokens, run.model.config.eos_id]
        longest = max(longest, len(ours[0].tokens))
    assert longest > 20


@pytest.mark.parametrize("stopping", ["early", "exact", "finished"])
def test_the_exported_beam_search_is_the_runs(run_dir, tmp_path, stopping):
    from transduce.decoding.search import search

    # renormalize: Hugging Face's forced </s> at the length limit costs nothing, as ours then
    run, hf_dir = _export_with(run_dir, tmp_path, beam_size=3, length_normalization="power",
                               length_penalty=1.2, min_len=2, stopping=stopping,
                               max_len_a=0.0, max_len_b=9, renormalize=True)
    generation = json.loads((hf_dir / "generation_config.json").read_text())
    assert generation["num_beams"] == 3 and generation["length_penalty"] == 1.2
    assert generation["max_new_tokens"] == 10 and generation["min_length"] == 3
    assert generation["early_stopping"] == {"early": False, "exact": "never",
                                            "finished": True}[stopping]
    for src, theirs in _docs_generate(hf_dir, SOURCES):
        [ours] = search(run.model, src, run.config.decode)
        assert theirs[:len(theirs) - theirs[::-1].index(3)] == [*ours[0].tokens, 3]
    assert main(["import", "marian", str(hf_dir), "--out", str(tmp_path / "back")]) == 0
    assert load_run(tmp_path / "back").config.decode == run.config.decode  # and back


def test_ctranslate2_with_the_exported_options_searches_as_the_run_does(long_outputs_run,
                                                                        tmp_path):
    """translate_options.json: with it, CTranslate2 stops where the run stops (its default, 256
    tokens, runs past this model's 40 positions and fails)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from transduce.decoding.search import search

    out = tmp_path / "ct2"
    assert main(["export", str(long_outputs_run), "--to", "ctranslate2", "--out", str(out)]
                ) == 0
    options = json.loads((out / "translate_options.json").read_text())
    run = load_run(long_outputs_run)
    translator = ctranslate2.Translator(str(out))
    tokenizer = run.tokenizers
    longest = 0
    for sentence in SOURCES:
        ids = [*tokenizer.src.encode(sentence), run.model.config.eos_id]
        theirs = translator.translate_batch([tokenizer.src.pieces(ids)], **{
            **options, "beam_size": 1})[0].hypotheses[0]
        [ours] = search(run.model, torch.tensor([ids]),
                        dataclasses.replace(run.config.decode, beam_size=1))
        assert theirs == tokenizer.tgt.pieces(ours[0].tokens)
        longest = max(longest, len(ours[0].tokens))
    assert longest > 20
