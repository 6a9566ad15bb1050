"""`transduce score`: the scores of given pairs, as Translator.score gives them; the search's own
translations score the search's scores; bad input is one line."""

import pytest

from transduce.cli import main
from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.training.start import start_run

from .test_translate_command import _run, run_dir  # noqa: F401 (a module-scoped trained run)
from .training.test_trainer import FAST

SOURCES = ["seven", "ninety-nine", "one hundred and two", "forty"]


def _canonical(translator, translation) -> bool:
    """Whether the translation's text encodes back to the pieces the search chose."""
    pieces = translator.tokenizers.tgt.pieces(translator.tokenizers.tgt.encode(translation.text))
    return pieces == translation.tgt_pieces[:-1]  # without <eos>


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Trained long enough to write words (a model of 4 updates writes stray bytes, whose text
    does not encode back to the pieces it chose)."""
    run = tmp_path_factory.mktemp("scored") / "run"
    start_run(load_config(overrides=[*FAST, "train.max_updates=150", "model.max_positions=40"]),
              run).train()
    return run


def test_the_searchs_translations_score_the_searchs_scores(trained):
    translator = Translator.load(trained)
    found = translator.translate_detailed(SOURCES, beam_size=3, nbest=2, attention=True)
    for rank in (0, 1):
        texts = [t.nbest[rank][0] for t in found]
        scores = translator.score(SOURCES, texts, beam_size=3)
        if rank == 0:
            same = [i for i, t in enumerate(found) if _canonical(translator, t)]
            assert same, "no translation re-encodes to its own pieces"
            for i in same:
                assert scores[i].score == pytest.approx(found[i].nbest[0][1], abs=1e-4)
        assert all(s.log_prob <= 0 and len(s.token_log_probs) >= 1 for s in scores)


def test_the_command_writes_what_the_api_gives(run_dir, tmp_path, capsys):  # noqa: F811
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    targets = ["sieben", "neunundneunzig", "hundertzwei", "vierzig und mehr"]
    (tmp_path / "tgt").write_text("\n".join(targets) + "\n")
    out = tmp_path / "scores.tsv"
    assert main(["score", "--model", str(run_dir), "--src", str(tmp_path / "src"), "--tgt",
                 str(tmp_path / "tgt"), "-o", str(out), "--token-scores", "--length-penalty",
                 "1.0", "--max-tokens", "5"]) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    want = Translator.load(run_dir).score(SOURCES, targets, length_penalty=1.0)
    assert len(rows) == len(want)
    for row, w in zip(rows, want, strict=True):
        assert [float(v) for v in row[:3]] == pytest.approx([w.score, w.log_prob, w.per_token],
                                                            abs=1e-5)
        assert int(row[3]) == len(w.token_log_probs)
        assert [float(v) for v in row[4].split()] == pytest.approx(list(w.token_log_probs),
                                                                   abs=1e-5)
        assert w.score == pytest.approx(w.log_prob / ((5 + int(row[3])) / 6))  # GNMT, alpha 1
    assert main(["score", "--model", str(run_dir), "--src", str(tmp_path / "src"), "--tgt",
                 str(tmp_path / "tgt")]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(printed) == 4 and all(len(p) == 4 for p in printed)


@pytest.mark.parametrize("extra, message", [
    (["--src", "missing.txt", "--tgt", "TGT"], "--src missing.txt: no such file"),
    (["--src", "SRC", "--tgt", "SHORT"], "line counts differ: "),
    (["--src", "SRC", "--tgt", "TGT", "--max-tokens", "0"], "--max-tokens must be >= 1, got 0"),
    (["--src", "SRC", "--tgt", "TGT", "-o", "SRC"], "-o"),
    (["--src", "SRC", "--tgt", "TGT", "--dtype", "int8", "--compile"],
     "--compile and --dtype int8 do not go together"),
])
def test_bad_input_is_one_line(run_dir, tmp_path, capsys, extra, message):  # noqa: F811
    files = {"SRC": tmp_path / "src", "TGT": tmp_path / "tgt", "SHORT": tmp_path / "short"}
    files["SRC"].write_text("seven\neight\n")
    files["TGT"].write_text("sieben\nacht\n")
    files["SHORT"].write_text("sieben\n")
    extra = [str(files[a]) if a in files else a for a in extra]
    code, err = _run(["score", "--model", str(run_dir), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("option", [
    ["--checkpoint", "latest"], ["--tgt-lang", "de"], ["--device", "cpu"],
    ["--dtype", "int8"], ["--dtype", "bfloat16"],
    pytest.param(["--compile"], marks=pytest.mark.slow)])  # compiling: tens of seconds
def test_each_option_scores(run_dir, tmp_path, capsys, option):  # noqa: F811
    """Every option `score --help` lists runs (the others are run above)."""
    (tmp_path / "src").write_text("seven\neight\n")
    (tmp_path / "tgt").write_text("sieben\nacht\n")
    assert main(["score", "--model", str(run_dir), "--src", str(tmp_path / "src"), "--tgt",
                 str(tmp_path / "tgt"), *option]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and all(float(r[1]) < 0 for r in rows)
    if option[0] in ("--checkpoint", "--tgt-lang", "--device", "--compile"):  # the same model
        want = Translator.load(run_dir).score(["seven", "eight"], ["sieben", "acht"])
        assert [float(r[1]) for r in rows] == pytest.approx([w.log_prob for w in want],
                                                            abs=1e-4)


def test_score_compiles_where_a_greedy_search_would(run_dir, tmp_path, monkeypatch):  # noqa: F811
    """Teacher forcing runs one row a pair: the threshold of greedy search, whatever the run's
    beam (2 here; a threshold lowered to 5 words, with 7 given)."""
    from transduce.decoding import compiled as module

    monkeypatch.setattr(module, "PAYS_AFTER_WORDS", {"greedy": 5, "beam": 100})
    chosen = []  # the search then runs eagerly all the same
    monkeypatch.setattr(Translator, "compiled", lambda self: chosen.append(True) or self)
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "tgt").write_text("sieben\nneunundneunzig\nhundertzwei\nvierzig\n")
    for options in ([], ["--no-compile"]):
        assert main(["score", "--model", str(run_dir), "--src", str(tmp_path / "src"),
                     "--tgt", str(tmp_path / "tgt"), *options]) == 0
    assert chosen == [True]
