"""Every option `transduce translate` and `transduce evaluate` list in their --help, run once on a
tiny model: the next option that is listed but broken fails here. A new option must be added to
the tables below (the first test of each command says which are missing)."""

import argparse
import io
import sys

import pytest

from transduce.cli import build_parser, main
from transduce.decoding.translator import Translator

from .test_translate_command import run_dir  # noqa: F401 (a module-scoped trained run)

SENTENCES = ["seven", "ninety-nine", "one hundred and two"]

# option -> (the arguments that run it, with what it needs), and for a search setting the
# DecodeConfig field and value it sets: the command's output must equal the API's with it
SEARCH = {
    "--beam-size": (["--beam-size", "3"], ("beam_size", 3)),
    "--length-penalty": (["--length-penalty", "1.2"], ("length_penalty", 1.2)),
    "--length-normalization": (["--length-normalization", "power"],
                               ("length_normalization", "power")),
    "--stopping": (["--stopping", "exact"], ("stopping", "exact")),
    "--max-len-a": (["--max-len-a", "0.5"], ("max_len_a", 0.5)),
    "--max-len-b": (["--max-len-b", "2"], ("max_len_b", 2)),
    "--min-len": (["--min-len", "6"], ("min_len", 6)),
    "--renormalize": (["--renormalize"], ("renormalize", True)),
    "--max-tokens": (["--max-tokens", "3"], ("max_tokens", 3)),
}
COMMON = {
    "--help": None,  # argparse's own
    "--model": ([], None),  # every run gives it
    "--checkpoint": (["--checkpoint", "latest"], None),
    "--tgt-lang": (["--tgt-lang", "de"], None),  # its own: a model of one target language
    "--device": (["--device", "cpu"], None),
    "--dtype": (["--dtype", "int8"], None),
    "--compile": (["--compile"], None),
    "--engine": (["--engine", "ctranslate2", "--length-normalization", "power", "--stopping",
                  "finished"], None),
    "--searches": (["--searches", "2", "--max-tokens", "3"], ("max_tokens", 3)),
}
TRANSLATE = {
    **COMMON, **SEARCH,
    "--input": ([], None),  # every run but --interactive reads -i
    "--output": ([], None),  # ... and writes -o
    "--nbest": (["--nbest", "2", "--beam-size", "2"], None),
    "--interactive": (["--interactive"], None),
    "--split-sentences": (["--split-sentences"], None),
    "--sample": (["--sample"], None),
    "--temperature": (["--sample", "--temperature", "0.7"], None),
    "--top-k": (["--sample", "--top-k", "3"], None),
    "--top-p": (["--sample", "--top-p", "0.8"], None),
    "--seed": (["--sample", "--seed", "3"], None),
    "--attention": (["--attention", "MAPS"], None),
    "--layer": (["--attention", "MAPS", "--layer", "0"], None),
    "--heads": (["--attention", "MAPS", "--heads"], None),
    "--prefix-file": (["--prefix-file", "PREFIXES"], None),
    "--alignments": (["--alignments", "LINKS"], None),
    "--glossary": (["--glossary", "GLOSSARY"], None),
}
EVALUATE = {**COMMON, **SEARCH, "--src": ([], None), "--ref": ([], None),
            "--lowercase": (["--lowercase"], None), "--output": (["-o", "OUT"], None),
            "--glossary": (["--glossary", "GLOSSARY", "-o", "OUT"], None)}
# the dtypes beside --dtype's value above
DTYPES = ["float32", "bfloat16", "float16"]


def listed(command: str) -> set[str]:
    """The options `transduce COMMAND --help` lists, each by its first long name."""
    subparsers = next(a for a in build_parser()._actions
                      if isinstance(a, argparse._SubParsersAction))
    return {next(o for o in action.option_strings if o.startswith("--"))
            for action in subparsers.choices[command]._actions if action.option_strings}


@pytest.mark.parametrize(("command", "table"), [("translate", TRANSLATE),
                                                ("evaluate", EVALUATE)])
def test_the_tables_hold_every_listed_option(command, table):
    assert listed(command) == set(table), "add the missing options to the tables above"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("every-option") / "src.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


def _fill(args: list[str], tmp_path) -> list[str]:
    if "PREFIXES" in args:  # a prefix for the first sentence, none for the others
        (tmp_path / "PREFIXES").write_text("sie\n\n\n")
    if "GLOSSARY" in args:  # a term of the second sentence only
        (tmp_path / "GLOSSARY").write_text("ninety-nine\tQQ\n")
    return [str(tmp_path / a) if a in ("MAPS", "OUT", "PREFIXES", "LINKS", "GLOSSARY") else a
            for a in args]


def _marked(options):
    """--compile compiles (tens of seconds): slow."""
    return [pytest.param(o, marks=pytest.mark.slow) if o == "--compile" else o for o in options]


@pytest.mark.parametrize("option", _marked(sorted(o for o, v in TRANSLATE.items() if v)))
def test_translate_runs_with_each_option(option, run_dir, source, tmp_path, monkeypatch,  # noqa: F811
                                         capsys):
    args, setting = TRANSLATE[option]
    out = tmp_path / "out.txt"
    argv = ["translate", "--model", str(run_dir), *_fill(args, tmp_path)]
    if option == "--interactive":
        monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(SENTENCES) + "\n"))
    else:
        argv += ["-i", str(source), "-o", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    lines = (capsys.readouterr().out if option == "--interactive" else out.read_text()
             ).splitlines()
    assert len(lines) == len(SENTENCES) * (2 if option == "--nbest" else 1)
    if setting is not None:
        field, value = setting
        assert lines == Translator.load(run_dir).translate(SENTENCES, **{field: value})
    if "MAPS" in args:
        assert len(list((tmp_path / "MAPS").glob("*.png"))) == len(SENTENCES)
    if "LINKS" in args:
        translator = Translator.load(run_dir)
        want = [translator.alignments(t)
                for t in translator.translate_detailed(SENTENCES, attention=True)]
        got = (tmp_path / "LINKS").read_text().splitlines()
        assert got == [" ".join(f"{i}-{j}" for i, j in links) for links in want]
    if "PREFIXES" in args:
        assert lines == Translator.load(run_dir).translate(SENTENCES, prefixes=["sie", "", ""])
        assert lines[0].startswith("sie")
    if option == "--engine":
        from transduce.engines import engine

        assert lines == engine.load(run_dir, engine="ctranslate2").translate(
            SENTENCES, length_normalization="power", stopping="finished")
    if "GLOSSARY" in args:
        assert lines == Translator.load(run_dir).translate(SENTENCES, terms=[[], ["QQ"], []])
        assert "QQ" in lines[1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_translate_runs_in_each_dtype(dtype, run_dir, source, tmp_path):  # noqa: F811
    out = tmp_path / "out.txt"
    assert main(["translate", "--model", str(run_dir), "--dtype", dtype, "-i", str(source),
                 "-o", str(out)]) == 0
    assert len(out.read_text().splitlines()) == len(SENTENCES)


@pytest.mark.parametrize("option", _marked(sorted(o for o, v in EVALUATE.items() if v)))
def test_evaluate_runs_with_each_option(option, run_dir, source, tmp_path, capsys):  # noqa: F811
    args, setting = EVALUATE[option]
    references = tmp_path / "ref.txt"
    references.write_text("sieben\nneunundneunzig\nhundertzwei\n")
    assert main(["evaluate", "--model", str(run_dir), "--src", str(source), "--ref",
                 str(references), *_fill(args, tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed
    if option == "--output":
        hypotheses = (tmp_path / "OUT").read_text().splitlines()
        assert hypotheses == Translator.load(run_dir).translate(SENTENCES)
    if option == "--glossary":
        hypotheses = (tmp_path / "OUT").read_text().splitlines()
        assert "QQ" in hypotheses[1] and hypotheses == \
            Translator.load(run_dir).translate(SENTENCES, terms=[[], ["QQ"], []])
    if setting is not None:
        field, value = setting
        expected = Translator.load(run_dir).translate(SENTENCES, **{field: value})
        out = tmp_path / "with.txt"
        assert main(["evaluate", "--model", str(run_dir), "--src", str(source), "--ref",
                     str(references), *args, "-o", str(out)]) == 0
        assert out.read_text().splitlines() == expected


@pytest.mark.parametrize(("alias", "name"), [("--beam", "--beam-size"),
                                             ("--lenpen", "--length-penalty")])
@pytest.mark.parametrize("command", ["translate", "evaluate", "serve"])
def test_the_older_spellings_of_search_options_still_work(command, alias, name):
    """Each search option is named after its DecodeConfig field; its older flag stays."""
    parser = build_parser()
    required = {"translate": ["--model", "M"], "evaluate": ["--model", "M", "--src", "S",
                                                             "--ref", "R"],
                "serve": ["--model", "M"]}[command]
    old = parser.parse_args([command, *required, alias, "3"])
    new = parser.parse_args([command, *required, name, "3"])
    field = name[2:].replace("-", "_")
    assert getattr(old, field) == getattr(new, field) == (3 if field == "beam_size" else 3.0)
