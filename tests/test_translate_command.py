"""`transduce translate` and `evaluate`: options checked up front (one line, exit 2), outputs
checked before the work, finished translations kept when interrupted."""

import subprocess
import sys

import pytest

from transduce import translate_command
from transduce.cli import main
from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.training.start import start_run

from .training.test_trainer import FAST


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("model") / "run"
    start_run(load_config(overrides=[*FAST, "train.max_updates=4", "model.max_positions=40",
                                   "decode.beam_size=2"]), run).train()
    return run


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("seven\nninety-nine\none hundred and two\n")
    return path


def _run(argv, capsys):
    """main(argv) as the command line runs it: (exit status, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's usage errors
        code = exit.code
    return code, capsys.readouterr().err


INVALID = [
    (["--beam", "0"], "--beam-size must be >= 1, got 0"),
    (["--beam", "two"], "argument --beam-size/--beam: invalid int value: 'two'"),
    (["--nbest", "0"], "argument --nbest: must be at least 1, got 0"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
    (["--min-len", "-1"], "--max-len-a, --max-len-b and --min-len must be >= 0"),
    (["--max-len-a", "-0.5"], "--max-len-a, --max-len-b and --min-len must be >= 0"),
    (["--length-normalization", "log"], "argument --length-normalization: invalid choice"),
    (["--sample", "--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
    (["--sample", "--temperature", "0"], "--temperature must be positive, got 0.0"),
    (["--dtype", "int4"], "argument --dtype: invalid choice: 'int4'"),
    (["--device", "gpu"], "--device: 'gpu' is not a device; use auto, cpu, cuda or cuda:N"),
    (["--device", "cuda"], "--device: cuda, but this PyTorch is built without CUDA"),
    (["--nbest", "3"], "--nbest 3 needs a beam at least as large (the run's decode.beam_size, 2)"),
    (["--nbest", "4", "--beam", "3"], "--nbest 4 needs a beam at least as large (--beam-size)"),
    (["--interactive", "--nbest", "2", "--beam", "2"], "--interactive translates what you type"),
    (["--interactive", "--attention", "maps"], "it takes no --attention"),
    (["--interactive", "-i", "IN"], "it takes no -i"),
    (["--sample", "--beam", "4"], "--sample draws one translation instead of searching: it takes "
                                  "no --beam-size"),
    (["--sample", "--nbest", "2"], "it takes no --nbest"),
    (["--top-k", "5"], "--top-k is an option of --sample"),
    (["--seed", "5"], "--seed is an option of --sample"),
    (["--heads"], "--heads is an option of --attention DIR"),
    (["--layer", "1"], "--layer is an option of --attention DIR"),
    (["--attention", "MAPS", "--layer", "7"], "--layer 7: the model has 2 decoder layers"),
    (["--checkpoint", "update_9"], "no checkpoint 'update_9'"),
    (["-i", "missing.txt"], "-i missing.txt: no such file"),
    (["-i", "IN", "--prefix-file", "missing.txt"], "--prefix-file missing.txt: no such file"),
    (["-i", "IN", "--prefix-file", "TWO"], "line counts differ: --prefix-file "),
    (["--interactive", "--prefix-file", "TWO"], "it takes no --prefix-file"),
    (["-i", "IN", "--split-sentences", "--prefix-file", "TWO"],
     "--split-sentences translates a line as several sentences: it takes no --prefix-file"),
    (["--interactive", "--alignments", "TWO"], "it takes no --alignments"),
    (["-i", "IN", "--split-sentences", "--alignments", "TWO"], "it takes no --alignments"),
    (["-i", "IN", "--alignments", "IN"], "--alignments "),
    (["-i", "IN", "--glossary", "missing.tsv"], "missing.tsv: no such glossary file"),
    (["-i", "IN", "--glossary", "TWO"], "two:1: expected 'source term<TAB>target term', got "),
    (["-i", "IN", "--glossary", "CLASH"], "clash: glossary: 'Neun' has two target terms"),
    (["--sample", "--glossary", "TWO"], "it takes no --glossary"),
]


@pytest.mark.parametrize("options, message", INVALID, ids=[" ".join(o) for o, _ in INVALID])
def test_an_invalid_option_is_one_line_with_exit_2(run_dir, text, tmp_path, capsys, options,
                                                   message):
    (tmp_path / "two").write_text("neun\nsieben\n")  # two lines: the input has three
    (tmp_path / "clash").write_text("Neun\t9\n\nNeun\tnine\n")
    named = {"IN": str(text), "MAPS": str(tmp_path / "maps"), "TWO": str(tmp_path / "two"),
             "CLASH": str(tmp_path / "clash")}
    options = [named.get(o, o) for o in options]
    code, err = _run(["translate", "--model", str(run_dir), *options], capsys)
    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err


def test_the_cuda_device_on_a_cpu_build_is_one_line_in_a_subprocess_too(run_dir):
    result = subprocess.run([sys.executable, "-m", "transduce", "translate", "--model",
                             str(run_dir), "--device", "cuda"], input="seven\n",
                            capture_output=True, text=True)
    if "built without CUDA" not in result.stderr:
        pytest.skip("this PyTorch has CUDA")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_an_output_in_a_missing_directory_is_created(run_dir, text, tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "out.txt"
    assert main(["translate", "--model", str(run_dir), "-i", str(text), "-o", str(out)]) == 0
    assert out.read_text().splitlines() == Translator.load(run_dir).translate(
        text.read_text().splitlines())


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_an_unwritable_output_is_refused_before_any_translating(run_dir, text, tmp_path, capsys,
                                                                monkeypatch, command):
    def never(*args, **kwargs):
        raise AssertionError("translated before checking the output")

    monkeypatch.setattr(Translator, "translate_detailed", never)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    io = (["-i", str(text)] if command == "translate" else ["--src", str(text), "--ref",
                                                             str(text)])
    for out, message in ((blocker / "out.txt", "cannot write there"),
                         (tmp_path, "is a directory"),
                         (text, "is also the input")):
        code, err = _run([command, "--model", str(run_dir), *io, "-o", str(out)], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert text.read_text() == "seven\nninety-nine\none hundred and two\n"


def test_ctrl_c_keeps_the_translations_finished_before_it(run_dir, tmp_path, capsys, monkeypatch):
    lines = [f"line {i}" for i in range(7)]
    (tmp_path / "in.txt").write_text("".join(x + "\n" for x in lines))
    monkeypatch.setattr(translate_command, "CHUNK", 3)
    real = Translator.translate_detailed
    calls = []

    def interrupted_on_the_third_chunk(self, sentences, **options):
        calls.append(len(sentences))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, sentences, **options)

    monkeypatch.setattr(Translator, "translate_detailed", interrupted_on_the_third_chunk)
    out = tmp_path / "out.txt"
    code, err = _run(["translate", "--model", str(run_dir), "-i", str(tmp_path / "in.txt"),
                      "-o", str(out)], capsys)
    assert code == 130 and "Traceback" not in err
    assert "the first 6 of 7 translations are in" in err
    assert out.read_text().splitlines() == Translator.load(run_dir).translate(lines[:6])


def test_evaluate_writes_its_output_and_prints_the_scores(run_dir, text, tmp_path, capsys):
    out = tmp_path / "new" / "hyp.txt"
    assert main(["evaluate", "--model", str(run_dir), "--src", str(text), "--ref", str(text),
                 "-o", str(out)]) == 0
    assert "BLEU = " in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 3


def test_reading_from_a_terminal_says_so(run_dir, monkeypatch, capsys):
    import io

    class Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(io.BytesIO(b"seven\n")))
    assert main(["translate", "--model", str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert "reading sentences from the terminal" in captured.err
    assert len(captured.out.splitlines()) == 1


def test_ctrl_c_in_interactive_mode_exits_quietly(run_dir, monkeypatch, capsys):
    class Typing:
        def __iter__(self):
            yield "seven\n"
            raise KeyboardInterrupt

    monkeypatch.setattr(sys, "stdin", Typing())
    code, err = _run(["translate", "--model", str(run_dir), "--interactive"], capsys)
    assert code == 130 and "Traceback" not in err


@pytest.mark.parametrize("text", ["zwei\ndrei", "a\r\nb", "x\x1cy\u2028z", "end\n", ""])
def test_a_translation_with_a_line_break_is_written_as_one_line(text):
    """A byte-fallback tokenizer can decode to a line break (sampling an untrained model does):
    the output keeps one line per input line."""
    assert translate_command.one_line(text).splitlines() == ([] if not text.strip() else
                                                             [translate_command.one_line(text)])
    assert "\n" not in translate_command.one_line(text)


@pytest.mark.parametrize("options, message", [
    (["--nbest", "3"], "--nbest 3 needs a beam at least as large"),
    (["--attention", "MAPS", "--layer", "7"], "--layer 7: the model has 2 decoder layers")])
def test_options_that_depend_on_the_run_are_refused_before_the_model_loads(
        run_dir, text, tmp_path, capsys, monkeypatch, options, message):
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(Translator, "load", never)
    options = [str(tmp_path / "maps") if o == "MAPS" else o for o in options]
    code, err = _run(["translate", "--model", str(run_dir), "-i", str(text), *options], capsys)
    assert code == 2 and message in err, err


def test_an_output_under_a_file_names_the_file(run_dir, text, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    code, err = _run(["translate", "--model", str(run_dir), "-i", str(text), "-o",
                      str(tmp_path / "afile" / "out.de")], capsys)
    assert code == 2 and f"{tmp_path / 'afile'} is a file, not a directory" in err, err


def test_the_stopping_help_names_its_choices(capsys):
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "STOPPING" not in help_text and "--stopping {early,exact,finished}" in help_text


def test_ctrl_c_within_a_chunk_keeps_every_line_finished_before_it(run_dir, tmp_path, capsys,
                                                                   monkeypatch):
    """Lines are written as they finish, not a chunk at a time: a file shorter than a chunk
    interrupted halfway keeps its first half."""
    from transduce.decoding import translator as module

    lines = [f"line {i}" for i in range(7)]  # one token count: batched in input order
    (tmp_path / "in.txt").write_text("".join(x + "\n" for x in lines))
    real, calls = module.search, []

    def interrupted_in_the_fifth_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "search", interrupted_in_the_fifth_batch)
    out = tmp_path / "out.txt"
    code, err = _run(["translate", "--model", str(run_dir), "-i", str(tmp_path / "in.txt"),
                      "--max-tokens", "4", "-o", str(out)], capsys)  # one line a batch
    assert code == 130 and "the first 4 of 7 translations are in" in err, err
    monkeypatch.setattr(module, "search", real)
    assert out.read_text().splitlines() == Translator.load(run_dir).translate(lines[:4])


@pytest.mark.parametrize("command", ["translate", "evaluate", "serve"])
def test_compile_with_int8_is_refused_before_loading(command, tmp_path, capsys):
    io = {"evaluate": ["--src", "S", "--ref", "R"]}.get(command, [])
    code, err = _run([command, "--model", str(tmp_path / "no-run-here"), *io, "--compile",
                      "--dtype", "int8"], capsys)  # refused before the run is even looked at
    assert code == 2 and "--compile and --dtype int8 do not go together" in err, err
    assert len(err.strip().splitlines()) == 1


def test_prefix_file_starts_each_translation_with_its_line(run_dir, text, tmp_path, capsys):
    """Each translation begins with its line's prefix, the search going on from it; a line
    without one is translated as with no --prefix-file (prefixes per sentence do not change
    their batch-mates), and the command gives what the Python API gives."""
    prefixes = ["neun", "", "hundert und"]
    (tmp_path / "prefixes").write_text("\n".join(prefixes) + "\n")
    out = tmp_path / "out.txt"
    assert main(["translate", "--model", str(run_dir), "-i", str(text), "-o", str(out),
                 "--prefix-file", str(tmp_path / "prefixes")]) == 0
    forced = out.read_text().splitlines()
    plain_out = tmp_path / "plain.txt"
    assert main(["translate", "--model", str(run_dir), "-i", str(text), "-o",
                 str(plain_out)]) == 0
    plain = plain_out.read_text().splitlines()
    assert [f.startswith(p) for f, p in zip(forced, prefixes, strict=True)] == [True] * 3
    assert forced[1] == plain[1]
    assert forced[0] != plain[0] or plain[0].startswith("neun")
    translator = Translator.load(run_dir)
    assert translator.translate(text.read_text().splitlines(), prefixes=prefixes) == forced


def test_alignments_link_words_of_each_line_in_its_own_line(run_dir, text, tmp_path):
    """One Pharaoh line per input line, each link within its source and output words; an
    empty input line gives an empty line."""
    (tmp_path / "in2.txt").write_text(text.read_text() + "\nforty-two\n")
    out, links = tmp_path / "out.txt", tmp_path / "links.txt"
    assert main(["translate", "--model", str(run_dir), "-i", str(tmp_path / "in2.txt"), "-o",
                 str(out), "--alignments", str(links)]) == 0
    sources = (tmp_path / "in2.txt").read_text().splitlines()
    outputs, lines = out.read_text().splitlines(), links.read_text().splitlines()
    assert len(lines) == len(outputs) == len(sources) == 5
    assert lines[3] == ""  # the empty line
    for source, output, line in zip(sources, outputs, lines, strict=True):
        pairs = [tuple(map(int, link.split("-"))) for link in line.split()]
        assert all(i < len(source.split()) and j < len(output.split()) for i, j in pairs)
        assert len(pairs) == len(set(pairs))
        if output.strip():
            assert {j for _, j in pairs} == set(range(len(output.split())))  # every word


@pytest.mark.parametrize(("options", "compiled"), [
    ([], False),  # the run's beam of 2: a beam search repays compiling later
    (["--beam-size", "1"], True),
    (["--beam-size", "1", "--no-compile"], False),
    (["--beam-size", "1", "--device", "cpu", "--dtype", "bfloat16"], False),
    (["--beam-size", "1", "--engine", "ctranslate2", "--length-normalization", "power"], False),
])
def test_translate_compiles_where_that_pays(run_dir, tmp_path, monkeypatch, options, compiled):
    """Without --compile or --no-compile an input compiles once it is long enough to repay it
    (a threshold lowered here: 5 words for greedy search, 6 for beams), in float32 on a CPU."""
    from transduce.decoding import compiled as module

    monkeypatch.setattr(module, "PAYS_AFTER_WORDS", {"greedy": 5, "beam": 6})
    chosen = []  # each time translate compiled; the search then runs eagerly all the same
    monkeypatch.setattr(Translator, "compiled", lambda self: chosen.append(True) or self)
    source = tmp_path / "in.txt"
    for text in ("seven\none hundred and two\n", "seven\none hundred\n"):  # 5 words, 3
        source.write_text(text)
        assert main(["translate", "--model", str(run_dir), "-i", str(source),
                     "-o", str(tmp_path / "out.txt"), *options]) == 0
    assert chosen == ([True] if compiled else [])


@pytest.mark.slow  # compiles: tens of seconds
def test_where_it_pays_translate_compiles_and_translates_the_same(run_dir, tmp_path,
                                                                  monkeypatch):
    from transduce.decoding import compiled as module

    monkeypatch.setattr(module, "PAYS_AFTER_WORDS", {"greedy": 1, "beam": 1})
    made = []
    monkeypatch.setattr(module.Compiled, "__init__", lambda self, model, init=module.Compiled
                        .__init__: made.append(model) or init(self, model))
    source = tmp_path / "in.txt"
    source.write_text("seven\none hundred and two\nforty-one\nthree thousand and nine\n")
    outputs = []
    for options in ([], ["--no-compile"]):
        out = tmp_path / f"out{len(outputs)}.txt"
        assert main(["translate", "--model", str(run_dir), "-i", str(source), "-o", str(out),
                     "--device", "cpu", *options]) == 0
        outputs.append(out.read_text())
    assert len(made) == 1 and outputs[0] == outputs[1]


def test_translate_without_compiling_does_not_import_dynamo(run_dir, text):
    """Dynamo is imported when a search compiles, not before: ~2 s of a 6 s `translate`."""
    code = ("import sys\nfrom transduce.cli import main\n"
            f"assert main(['translate', '--model', {str(run_dir)!r}, '-i', {str(text)!r}, "
            "'--no-compile']) == 0\nprint('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"
