"""`Translator` and the `translate`/`evaluate` commands over a small trained run. What a kernel
path changes (a batch's translations, n-best scores, bfloat16) is checked on every path; the
commands, messages and ensembles, which only pass a search's results on, on this CPU's own."""

import subprocess
import sys

import pytest
import torch

from transduce.cli import main
from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.errors import UserError
from transduce.kernels import transposed
from transduce.kernels.linear import Linear
from transduce.runs.load import load_run
from transduce.training.start import start_run

from ..conftest import own_path_only
from ..training.test_trainer import FAST


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("model") / "run"
    config = load_config(overrides=[*FAST, "train.max_updates=30", "model.max_positions=40"])
    start_run(config, run).train()
    return run


def test_translate_keeps_order_and_empty_lines(run_dir):
    translator = Translator.load(run_dir)
    sentences = ["seven", "", "one hundred and two", "  ", "seven"]
    out = translator.translate(sentences, beam_size=3)
    assert len(out) == 5 and out[1] == "" and out[3] == ""
    assert out[0] == out[4]
    alone = [translator.translate([s], beam_size=3)[0] for s in sentences]
    assert alone == out


def test_nbest_scores_and_attention(run_dir):
    translator = Translator.load(run_dir)
    [t] = translator.translate_detailed(["forty-two"], beam_size=4, nbest=3, attention=True)
    assert len(t.nbest) == 3
    assert [s for _, s in t.nbest] == sorted((s for _, s in t.nbest), reverse=True)
    layers, heads, n_tgt, n_src = t.attention.shape
    assert (n_tgt, n_src) == (len(t.tgt_pieces), len(t.src_pieces))
    assert t.length == len(t.tgt_pieces) - 1  # the best's tokens, <eos> not counted
    assert t.attention.sum(-1).allclose(t.attention.new_ones(layers, heads, n_tgt))


def test_weights_stored_transposed_where_mkl_multiplies(run_dir, kernel_path):
    """`Translator.load` stores a float32 model's weights transposed on MKL's path
    (transduce.kernels.transposed), and the translations, n-best scores and attention are
    those of the weights as trained, greedy and beam, on every path."""
    loaded = Translator.load(run_dir)
    weights = [m.weight for m in loaded.model.modules() if isinstance(m, Linear)]
    assert weights and {transposed.stored(w) for w in weights} == {kernel_path == "mkl"}
    plain, stored = (Translator(model, loaded.tokenizers, loaded.decode) for model in
                     (load_run(run_dir).model, transposed.store(load_run(run_dir).model)))
    sentences = ["seven", "one hundred and two", "forty-two thousand and six", "nine"]
    for beam in (1, 3):
        a, b = (t.translate_detailed(sentences, beam_size=beam, nbest=beam, attention=True)
                for t in (plain, stored))
        for x, y in zip(a, b, strict=True):
            assert [text for text, _ in x.nbest] == [text for text, _ in y.nbest]
            assert [s for _, s in x.nbest] == pytest.approx([s for _, s in y.nbest], abs=1e-4)
            torch.testing.assert_close(x.attention, y.attention, rtol=1e-4, atol=1e-5)


def test_bfloat16_decoding_scores_like_float32(run_dir):
    # 16-bit weights and activations: the same search, scores within bf16 rounding of float32's
    fp32, bf16 = Translator.load(run_dir), Translator.load(run_dir, dtype="bfloat16")
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    sentences = ["forty-two", "one hundred and two", "seven"]
    [a, b] = [t.translate_detailed(sentences, beam_size=3, nbest=2, attention=True)
              for t in (fp32, bf16)]
    same = [(x, y) for x, y in zip(a, b, strict=True) if x.text == y.text]
    assert same  # 16 bits may flip a near tie, not everything
    for x, y in same:
        assert y.attention.dtype == torch.float32
        assert y.nbest[0][1] == pytest.approx(x.nbest[0][1], abs=0.05 + 0.02 * abs(x.nbest[0][1]))
    with pytest.raises(UserError, match="dtype"):
        Translator.load(run_dir, dtype="int4")


@own_path_only
@pytest.mark.parametrize("native", [False, True])
def test_bfloat16_without_native_support_is_warned_about(run_dir, monkeypatch, caplog, native):
    monkeypatch.setattr("transduce.decoding.translator.native_bf16", lambda device: native)
    with caplog.at_level("WARNING"):
        Translator.load(run_dir, dtype="bfloat16", device="cpu")
        Translator.load(run_dir, device="cpu")  # float32: nothing to say
    assert ("no native bf16" in caplog.text) != native
    assert caplog.text.count("no native bf16") <= 1


@own_path_only
def test_too_long_line_is_truncated_with_a_warning_naming_it(run_dir, caplog):
    translator = Translator.load(run_dir)
    long = " ".join(["seven"] * 60)
    out = translator.translate(["one", long])
    assert len(out) == 2
    assert "line 2:" in caplog.text and "truncated" in caplog.text


@own_path_only
def test_cli_translate_file_with_empty_lines(run_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("seven\n\nninety-nine\n\n")
    assert main(["translate", "--model", str(run_dir), "-i", str(src), "-o",
                 str(tmp_path / "out.txt"), "--beam", "2"]) == 0
    lines = (tmp_path / "out.txt").read_text().split("\n")
    assert len(lines) == 5 and lines[1] == "" and lines[3] == "" and lines[4] == ""


@own_path_only
def test_cli_search_options_reach_the_search(run_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("seven\nninety-nine\none hundred and two\n")
    sentences = src.read_text().splitlines()
    for extra, expected in (
            (["--stopping", "exact"], Translator.load(run_dir).translate(
                sentences, beam_size=3, stopping="exact")),
            (["--dtype", "bfloat16"], Translator.load(run_dir, dtype="bfloat16").translate(
                sentences, beam_size=3))):
        out = tmp_path / "out.txt"
        assert main(["translate", "--model", str(run_dir), "-i", str(src), "-o", str(out),
                     "--beam", "3", *extra]) == 0
        assert out.read_text().splitlines() == expected


@own_path_only
def test_cli_translate_attention_maps(run_dir, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("seven\neight hundred\n")
    assert main(["translate", "--model", str(run_dir), "-i", str(src), "-o",
                 str(tmp_path / "out.txt"), "--attention", str(tmp_path / "maps"),
                 "--heads"]) == 0
    maps = sorted((tmp_path / "maps").glob("*.png"))
    assert [m.name for m in maps] == ["attention_0001.png", "attention_0002.png"]
    assert all(m.stat().st_size > 5000 for m in maps)


@own_path_only
def test_cli_invalid_utf8_names_the_line(run_dir, tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"seven\neight \xff\n")
    result = subprocess.run([sys.executable, "-m", "transduce", "translate", "--model",
                             str(run_dir), "-i", str(src)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{src}:2: invalid UTF-8" in result.stderr
    stdin = subprocess.run([sys.executable, "-m", "transduce", "translate", "--model",
                            str(run_dir)], input=b"ok\n\xc3(\n", capture_output=True)
    assert stdin.returncode == 2 and b"<stdin>:2: invalid UTF-8" in stdin.stderr


@own_path_only
@pytest.mark.parametrize("lowercase", [True, False])
def test_cli_evaluate_prints_bleu_chrf_and_ter_with_signatures(run_dir, tmp_path, capsys,
                                                              lowercase):
    """The scores are sacreBLEU's on the translations written by -o, each line with the
    signature that reproduces it."""
    import sacrebleu

    (tmp_path / "src").write_text("seven\nninety-nine\ntwelve\n")
    (tmp_path / "ref").write_text("Sieben\nneunundneunzig\nzwölf\n")
    assert main(["evaluate", "--model", str(run_dir), "--src", str(tmp_path / "src"),
                 "--ref", str(tmp_path / "ref"), "-o", str(tmp_path / "out"),
                 *(["--lowercase"] if lowercase else [])]) == 0
    lines = capsys.readouterr().out.splitlines()
    hypotheses = (tmp_path / "out").read_text().splitlines()
    references = (tmp_path / "ref").read_text().splitlines()
    metrics = [sacrebleu.BLEU(lowercase=lowercase), sacrebleu.CHRF(lowercase=lowercase),
               sacrebleu.TER(case_sensitive=not lowercase)]
    expected = [f"{m.corpus_score(hypotheses, [references])}  {m.get_signature()}"
                for m in metrics]
    assert lines[:3] == expected
    case = "case:lc" if lowercase else "case:mixed"
    assert [line.split(" = ")[0] for line in lines[:3]] == ["BLEU", "chrF2", "TER"]
    assert all(case in line for line in lines[:3])


@own_path_only
def test_not_a_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="not a model directory"):
        Translator.load(tmp_path)


@own_path_only
def test_cli_checkpoint_option_loads_that_checkpoint(tmp_path, capsys):
    from safetensors.torch import load_file

    from transduce.cli import build_parser
    from transduce.runs import checkpoint as ckpt
    from transduce.search_options import load_translator

    run = tmp_path / "run"
    start_run(load_config(overrides=[*FAST, "train.max_updates=4", "train.save_every=2",
                                   "model.max_positions=40"]), run).train()
    for name in ("update_0000002", "update_0000004"):
        args = build_parser().parse_args(["translate", "--model", str(run), "--checkpoint", name])
        weights = load_file(str(ckpt.checkpoint_dir(run) / name / ckpt.WEIGHTS))
        state = load_translator(args).model.state_dict()
        for key, tensor in weights.items():
            assert torch.equal(state[key], tensor), (name, key)
    assert main(["translate", "--model", str(run), "--checkpoint", "update_0000003"]) == 2
    assert "no checkpoint 'update_0000003'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def second_run(run_dir):
    """The run of `run_dir` with another seed: the same tokenizer, other weights."""
    run = run_dir.parent / "second"
    config = load_config(overrides=[*FAST, "train.max_updates=30", "model.max_positions=40",
                                    "train.seed=2"])
    start_run(config, run).train()
    return run


@own_path_only
def test_an_ensemble_of_runs(run_dir, second_run, tmp_path, capsys):
    sentences = ["seven", "", "one hundred and two", "forty-two"]
    alone = Translator.load(run_dir).translate_detailed(sentences, beam_size=3, nbest=2)
    twice = Translator.load([run_dir, run_dir]).translate_detailed(sentences, beam_size=3,
                                                                   nbest=2)
    assert [t.nbest for t in twice] == [  # the mean of a distribution with itself
        [(text, pytest.approx(score, abs=1e-5)) for text, score in t.nbest] for t in alone]
    ensemble = Translator.load([run_dir, second_run])
    [t] = ensemble.translate_detailed(["forty-two"], beam_size=3, attention=True)
    layers, heads, n_tgt, n_src = t.attention.shape  # the members' mean attention
    assert t.attention.sum(-1).allclose(t.attention.new_ones(layers, heads, n_tgt))
    (tmp_path / "src").write_text("seven\nninety-nine\n")
    (tmp_path / "ref").write_text("sieben\nneunundneunzig\n")
    assert main(["evaluate", "--model", str(run_dir), str(second_run), "--checkpoint",
                 "latest", "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref")]) == 0
    assert "BLEU = " in capsys.readouterr().out


@own_path_only
def test_an_ensemble_needs_one_tokenizer(run_dir, tmp_path):
    other = tmp_path / "other"
    start_run(load_config(overrides=[*FAST, "train.max_updates=2", "data.vocab_size=320"]),
            other).train()
    with pytest.raises(UserError, match="its tokenizer is not .*'s; the models of an ensemble"):
        Translator.load([run_dir, other])
