"""Decoding with int8 linear layers (`--dtype int8`): the search's equivalences hold on that path
too, and a trained model translates nearly every sentence as in float32."""

import pytest
import torch

from transduce import kernels
from transduce.cli import main
from transduce.config import load_config
from transduce.data.prepare import corpus
from transduce.decoding import translator as translator_module
from transduce.decoding.translator import Translator
from transduce.errors import UserError
from transduce.kernels import int8
from transduce.kernels.int8 import is_int8, quantize_linear_layers
from transduce.quickstart import quickstart

from ..conftest import beam_with, greedy_with, random_tokens, small_model
from .test_translator import run_dir  # noqa: F401 (a module-scoped trained run, quicker)


@pytest.fixture(autouse=True)
def _every_layer_in_int8(monkeypatch):
    """The test models' layers are smaller than the threshold below which int8 layers multiply
    in float: here every one takes the int8 path."""
    monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 0)


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory):
    """The quickstart's model, trained less (90 s beside another training on 2 cores): 300
    updates of a quarter of its batch (a 975-in-1,000 agreement on an AVX2 EPYC; half its batch,
    twice the time: 978; 200 updates of half at a shorter warm-up: 949), on this CPU's own
    kernel path whichever path the test that first asks for it runs on."""
    run = tmp_path_factory.mktemp("quickstart") / "run"
    with kernels.using(kernels.default_path()):
        quickstart(run, ["train.max_updates=300", "data.max_tokens=1024",
                         "data.numbers_train_size=20000", "train.validate_every=0",
                         "train.log_every=100"], examples=0)
    return run


def _int8_model():
    return quantize_linear_layers(small_model().eval())


def test_beam_one_is_greedy_and_cached_is_uncached():
    model, src = _int8_model(), random_tokens(5, 8)
    src[1, 5:] = 1
    greedy = greedy_with(model, src, max_len_a=0, max_len_b=10)
    assert greedy == greedy_with(model, src, max_len_a=0, max_len_b=10, use_cache=False)
    beam = beam_with(model, src, beam_size=1, max_len_a=0, max_len_b=10)
    assert [h[0].tokens for h in beam] == [tuple(g) for g in greedy]
    for cached in (True, False):
        wide = beam_with(model, src, beam_size=4, max_len_a=0, max_len_b=10, use_cache=cached)
        assert [h[0].tokens for h in wide] == [h[0].tokens for h in beam_with(
            model, src, beam_size=4, max_len_a=0, max_len_b=10)]


@pytest.mark.parametrize("k", [1, 4])
def test_a_sentence_is_translated_alike_alone_and_in_a_batch(k):
    model, src = _int8_model(), random_tokens(6, 9)
    src[2, 4:] = src[5, 7:] = 1

    def translate(rows):
        if k == 1:
            return greedy_with(model, rows, max_len_a=0, max_len_b=10)
        return [list(h[0].tokens) for h in beam_with(model, rows, beam_size=k, max_len_a=0,
                                                       max_len_b=10)]

    together = translate(src)
    for i in range(len(src)):
        width = int((src[i] != 1).sum())
        assert translate(src[i: i + 1, :width]) == [together[i]]


@pytest.mark.slow  # trains the quickstart model for a minute or two
def test_the_quickstart_model_translates_held_out_numbers_as_in_float32(quickstart_run):
    config = load_config(quickstart_run / "config.yaml")
    sources = [s for s, _ in corpus(config.data, "test").pairs()]
    fp32 = Translator.load(quickstart_run).translate(sources)
    quantized = Translator.load(quickstart_run, dtype="int8")
    assert is_int8(quantized.model)
    assert any((quickstart_run / "checkpoints").rglob("model.int8.safetensors"))
    same = sum(a == b for a, b in zip(fp32, quantized.translate(sources), strict=True))
    assert len(sources) == 1000 and same >= 0.95 * len(sources), same
    alone = [quantized.translate([s])[0] for s in sources[:20]]  # through the Translator too
    assert alone == quantized.translate(sources[:20])


def test_translate_and_evaluate_take_dtype_int8(run_dir, tmp_path, capsys):  # noqa: F811
    (tmp_path / "src").write_text("seven\nforty-two\n")
    (tmp_path / "ref").write_text("sieben\nzweiundvierzig\n")
    assert main(["translate", "--model", str(run_dir), "--dtype", "int8",
                 "-i", str(tmp_path / "src"), "-o", str(tmp_path / "out")]) == 0
    expected = Translator.load(run_dir, dtype="int8").translate(["seven", "forty-two"])
    assert (tmp_path / "out").read_text().splitlines() == expected
    assert main(["evaluate", "--model", str(run_dir), "--dtype", "int8",
                 "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref")]) == 0
    assert "BLEU = " in capsys.readouterr().out


def test_int8_is_refused_off_the_cpu(run_dir, monkeypatch):  # noqa: F811
    # before anything is loaded, so a CPU-only machine can check it as a GPU one would
    monkeypatch.setattr(translator_module, "resolve_device", lambda *a, **k: torch.device("cuda"))
    with pytest.raises(UserError, match="dtype int8 runs on the CPU, not cuda"):
        Translator.load(run_dir, device="cuda", dtype="int8")
