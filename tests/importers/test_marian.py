"""`transduce import marian`: an OPUS-MT model, built here with transformers, computes and
translates in transduce as in Hugging Face, and exports back unchanged."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from transduce.cli import main
from transduce.decoding.search import search
from transduce.errors import UserError
from transduce.runs.load import load_run

from .opus_mt import WORDS_EN, make_opus_mt, sentences

transformers = pytest.importorskip("transformers")

TRICKY = ["Das kostet 1234,56 € — oder 7!", "Über naïve café façade", "Emoji 😀🚀 and ✓",
          "ZQXJ unknownish wörds ŁÓDŹ", "   spaced   out  ", "", "a", "2024-11-24 12:00"]


@pytest.fixture(scope="module")
def opus(tmp_path_factory):
    """(the OPUS-MT directory, its import, the MarianMTModel, the MarianTokenizer)"""
    from transformers import MarianMTModel, MarianTokenizer

    from transduce.importers.marian import import_marian

    root = tmp_path_factory.mktemp("opus")
    directory = make_opus_mt(root / "opus-mt-en-de", language_codes=(">>deu<<", ">>fra<<"))
    run = import_marian(directory, root / "run")
    return (directory, load_run(run), MarianMTModel.from_pretrained(directory).eval(),
            MarianTokenizer.from_pretrained(directory))


def _batch(tokenizer, texts):
    return tokenizer(texts, return_tensors="pt", padding=True)


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch_model.bin"])
def test_the_imported_model_gives_the_same_logits(tmp_path, safetensors):
    from transformers import MarianMTModel, MarianTokenizer

    from transduce.importers.marian import import_marian

    directory = make_opus_mt(tmp_path / "opus", seed=3, safetensors=safetensors)
    assert (directory / "pytorch_model.bin").is_file() != safetensors
    run = load_run(import_marian(directory, tmp_path / "run"))
    hf = MarianMTModel.from_pretrained(directory).eval()
    tokenizer = MarianTokenizer.from_pretrained(directory)
    batch = _batch(tokenizer, sentences(WORDS_EN, 6, 1))
    tgt = torch.randint(2, 130, (6, 9))
    tgt[:, 0] = hf.config.decoder_start_token_id
    with torch.no_grad():
        theirs = hf(**batch, decoder_input_ids=tgt).logits
        ours = run.model(batch["input_ids"], tgt)
    assert theirs.abs().max() > 1  # not a model of zeros
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_the_run_carries_marians_differences(opus):
    _, run, hf, _ = opus
    c = run.model.config
    size = hf.config.vocab_size
    assert (c.eos_id, c.unk_id, c.pad_id, c.bos_id) == (0, 1, size - 1, size - 1)
    assert c.activation == "swish" and c.output_bias and c.scale_embedding
    assert run.config.decode.beam_size == 4 and run.config.decode.renormalize
    assert run.config.data.src_lang == "en" and run.config.data.tgt_lang == "de"


@pytest.fixture(scope="module")
def plain_opus(tmp_path_factory):
    """As `opus`, without language tokens: another random model, whose beams reach the length
    limit, where a forced </s> scores log 1 once renormalised."""
    from transformers import MarianMTModel, MarianTokenizer

    from transduce.importers.marian import import_marian

    root = tmp_path_factory.mktemp("plain")
    directory = make_opus_mt(root / "opus")
    return (directory, load_run(import_marian(directory, root / "run")),
            MarianMTModel.from_pretrained(directory).eval(),
            MarianTokenizer.from_pretrained(directory))


@pytest.mark.parametrize("model", ["opus", "plain_opus"])
@pytest.mark.parametrize("new_tokens", [20, 40])  # the last a forced </s> (forced_eos_token_id)
def test_greedy_and_beam_search_give_generates_outputs(request, model, new_tokens):
    _, run, hf, tokenizer = request.getfixturevalue(model)
    batch = _batch(tokenizer, sentences(WORDS_EN, 40, 7))
    pad = hf.config.pad_token_id
    with torch.no_grad():
        greedy = hf.generate(**batch, num_beams=1, max_new_tokens=new_tokens)
        beam = hf.generate(**batch, max_new_tokens=new_tokens)  # num_beams 4, renormalised
    decode = dataclasses.replace(run.config.decode, max_len_b=new_tokens - 1)

    def ours(**settings):
        found = search(run.model, batch["input_ids"], dataclasses.replace(decode, **settings))
        return [list(h[0].tokens) for h in found]

    def theirs(rows):
        return [[t for t in row.tolist()[1:] if t not in (0, pad)] for row in rows]

    assert ours(beam_size=1) == theirs(greedy)
    assert ours() == theirs(beam)
    assert any(theirs(greedy)) and any(theirs(beam))  # not all empty


def test_tokenization_gives_marian_tokenizers_ids_and_text(opus):
    _, run, _, tokenizer = opus
    texts = [*TRICKY, ">>fra<< Ein kleiner Hund", *sentences(WORDS_EN, 20, 9)]
    for text in texts:
        assert run.tokenizers.src.encode(text) + [0] == tokenizer(text)["input_ids"], text
    assert run.tokenizers.src.encode(">>fra<< x")[0] == tokenizer.convert_tokens_to_ids(">>fra<<")
    targets = tokenizer(text_target=TRICKY)["input_ids"]
    for ids in targets:
        expected = tokenizer.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
        assert run.tokenizers.tgt.decode(ids) == expected
        assert run.tokenizers.tgt.encode(expected) + [0] == tokenizer(text_target=expected)[
            "input_ids"]


def test_it_exports_back_to_hugging_face_with_the_same_weights(opus, tmp_path):
    from transformers import MarianMTModel

    directory, run, hf, _ = opus
    from transduce.export.marian import save_huggingface

    out = save_huggingface(run.model, run.tokenizers, tmp_path / "hf", decode=run.config.decode)
    again = MarianMTModel.from_pretrained(out)
    theirs, ours = hf.state_dict(), again.state_dict()
    assert theirs.keys() == ours.keys()
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-6, rtol=0, msg=key)
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["renormalize_logits"] is True
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (out / name).read_bytes() == (directory / name).read_bytes() or name == "vocab.json"
    assert json.loads((out / "vocab.json").read_text()) == json.loads(
        (directory / "vocab.json").read_text())


def test_ctranslate2_translates_the_imported_model_as_we_do(opus, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from transduce.export.ctranslate2 import save_ctranslate2

    _, run, _, tokenizer = opus
    out = save_ctranslate2(run.model, run.tokenizers, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    texts = sentences(WORDS_EN, 30, 11)
    batch = _batch(tokenizer, texts)
    pieces = [tokenizer.convert_ids_to_tokens(tokenizer(t)["input_ids"]) for t in texts]
    results = translator.translate_batch(pieces, beam_size=1, max_decoding_length=30)
    ours = search(run.model, batch["input_ids"],
                  dataclasses.replace(run.config.decode, beam_size=1, max_len_b=30))
    assert [run.tokenizers.tgt.pieces(h[0].tokens) for h in ours] == [
        r.hypotheses[0] for r in results]


@pytest.mark.parametrize("field, value", [("normalize_embedding", True),
                                          ("activation_function", "gelu_new"),
                                          ("static_position_embeddings", False),
                                          ("decoder_attention_heads", 2)])
def test_a_feature_we_do_not_carry_is_an_error_naming_its_field(opus, tmp_path, field, value):
    import shutil

    from transduce.importers.marian import import_marian

    directory = tmp_path / "changed"
    shutil.copytree(opus[0], directory)
    config = json.loads((directory / "config.json").read_text())
    config[field] = value
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=field):
        import_marian(directory, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # two processes
def test_the_command_imports_and_an_unreachable_hub_is_one_line(opus, tmp_path):
    directory = opus[0]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "transduce", "import", "marian"]
    done = subprocess.run([*command, str(directory), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "config.yaml").is_file()
    again = subprocess.run([*command, str(directory), "--out", str(tmp_path / "run")],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "not empty" in again.stderr
    hub = subprocess.run([*command, "Helsinki-NLP/opus-mt-en-de", "--out", str(tmp_path / "h")],
                         capture_output=True, text=True, env=env)
    assert hub.returncode == 2
    assert hub.stderr.count("\n") == 1 and "pass its path" in hub.stderr
    assert "Traceback" not in hub.stderr


@pytest.mark.parametrize("fault, named", [  # a process each: two in the quick loop, CI all
    ("no source.spm", "source.spm"),
    pytest.param("no vocab.json", "vocab.json", marks=pytest.mark.slow),
    pytest.param("no weights", "no weights", marks=pytest.mark.slow),
    pytest.param("a BART config.json", "config.json", marks=pytest.mark.slow),
    pytest.param("config.json not JSON", "config.json", marks=pytest.mark.slow),
    ("truncated weights", "model.safetensors"),
    pytest.param("weights not a weight file", "model.safetensors", marks=pytest.mark.slow),
])
def test_a_damaged_directory_is_one_line_naming_the_file(opus, tmp_path, fault, named):
    import shutil

    directory = tmp_path / "damaged"
    shutil.copytree(opus[0], directory)
    config, weights = directory / "config.json", directory / "model.safetensors"
    if fault.startswith("no "):
        for name in {"source.spm": ["source.spm"], "vocab.json": ["vocab.json"],
                     "weights": ["model.safetensors"]}[fault[3:]]:
            (directory / name).unlink()
    elif fault == "a BART config.json":
        config.write_text(json.dumps({**json.loads(config.read_text()), "model_type": "bart"}))
    elif fault == "config.json not JSON":
        config.write_text('{"model_type": "marian",')
    elif fault == "truncated weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        weights.write_text("not a weight file")
    done = subprocess.run([sys.executable, "-m", "transduce", "import", "marian", str(directory),
                           "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def _without_languages(directory, to):
    """A copy of the model whose tokenizer_config.json names no languages."""
    shutil.copytree(directory, to)
    config = json.loads((to / "tokenizer_config.json").read_text())
    config.pop("source_lang", None), config.pop("target_lang", None)
    (to / "tokenizer_config.json").write_text(json.dumps(config))
    return to


def test_an_import_names_its_languages_or_asks_for_them(opus, tmp_path, capsys):
    from transduce.runs.load import read_config

    named = _without_languages(opus[0], tmp_path / "opus-mt-fr-es")
    assert main(["import", "marian", str(named), "--out", str(tmp_path / "a")]) == 0
    assert (read_config(tmp_path / "a").data.src_lang,
            read_config(tmp_path / "a").data.tgt_lang) == ("fr", "es")  # from its name
    unnamed = _without_languages(opus[0], tmp_path / "model")
    assert main(["import", "marian", str(unnamed), "--out", str(tmp_path / "b")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "does not say which languages" in line and "--src-lang" in line
    assert not (tmp_path / "b").exists()  # refused before anything was written
    assert main(["import", "marian", str(unnamed), "--out", str(tmp_path / "b"),
                 "--src-lang", "en", "--tgt-lang", "it"]) == 0
    assert read_config(tmp_path / "b").data.tgt_lang == "it"
    assert main(["import", "marian", str(unnamed), "--out", str(tmp_path / "c"),
                 "--src-lang", "english", "--tgt-lang", "it"]) == 2
    assert "--src-lang english: not a language code" in capsys.readouterr().err


def test_the_argos_export_of_an_import_names_its_real_languages(opus, tmp_path):
    import zipfile

    unnamed = _without_languages(opus[0], tmp_path / "model")
    assert main(["import", "marian", str(unnamed), "--out", str(tmp_path / "run"),
                 "--src-lang", "en", "--tgt-lang", "it"]) == 0
    assert main(["export", str(tmp_path / "run"), "--to", "argos", "--out",
                 str(tmp_path / "en_it.argosmodel")]) == 0
    with zipfile.ZipFile(tmp_path / "en_it.argosmodel") as archive:
        [meta] = [n for n in archive.namelist() if n.endswith("/metadata.json")]
        metadata = json.loads(archive.read(meta))
    assert (metadata["from_name"], metadata["to_name"]) == ("English", "Italian")
