"""`--engine ctranslate2`: CTranslate2's search over the run's export, behind the Translator,
the commands and the server; compared with transduce's own search and scores."""

import os
import time

import pytest

from transduce.cli import main
from transduce.decoding.config import Sampling
from transduce.decoding.translator import Translator
from transduce.engines import engine
from transduce.errors import UserError

from ..decoding.test_translator import run_dir  # noqa: F401 (a module-scoped trained run)

pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

SENTENCES = ["seven", "ninety-nine", "one hundred and two", "forty-two", "", "three thousand",
             "eighty-one", "five hundred and six", "twelve", "sixty-six"]
POWER = dict(length_normalization="power", length_penalty=1.0, stopping="finished")  # its rules


@pytest.fixture(scope="module")
def both(run_dir):  # noqa: F811
    return Translator.load(run_dir), engine.load(run_dir, engine="ctranslate2")


def test_greedy_finds_what_our_greedy_finds(both):
    ours, theirs = both
    assert theirs.translate(SENTENCES, beam_size=1) == ours.translate(SENTENCES, beam_size=1)


def test_beam_scores_are_the_models_and_most_translations_ours(both):
    ours, theirs = both
    found = theirs.translate_detailed(SENTENCES, beam_size=3, nbest=3, **POWER)
    mine = ours.translate_detailed(SENTENCES, beam_size=3, nbest=3, **POWER)
    same = sum(a.text == b.text for a, b in zip(found, mine, strict=True))
    # this model's outputs run to the length limit, which CTranslate2 takes per batch and
    # reaches without <eos>: tests/export/test_ctranslate2.py has outputs that end
    assert same >= len(SENTENCES) - 1
    for t in found:
        assert len(t.nbest) == (3 if t.source else 1)
        assert [s for _, s in t.nbest] == sorted((s for _, s in t.nbest), reverse=True)
    texts = [t.text for t in found if t.source]
    # the model's scores, as CTranslate2 computes them: it never outputs <pad> or <bos> (their
    # bias is -inf in its export), so its probabilities are renormalised without them, and
    # <eos> keeps its share at the first step; ours, teacher-forced, with every token (a model
    # trained for long gives the two to 1e-4: those tokens' probabilities are tiny)
    scored = ours.score([t.source for t in found if t.source], texts, beam_size=3, **POWER)
    assert [t.nbest[0][1] for t in found if t.source] == pytest.approx(
        [s.score for s in scored], abs=0.1)


def test_prefixes_attention_and_scores_as_ours(both):
    ours, theirs = both
    prefixes = ["sie", "", "hundert", "", "", "", "", "", "", ""]
    got = theirs.translate_detailed(SENTENCES, beam_size=1, prefixes=prefixes, attention=True,
                                    scores=True)
    want = ours.translate_detailed(SENTENCES, beam_size=1, prefixes=prefixes, attention=True,
                                   scores=True)
    assert [t.text for t in got] == [t.text for t in want]
    assert got[0].text.startswith("sie") and got[2].text.startswith("hundert")
    for a, b in zip(got, want, strict=True):  # teacher-forced on the run's own model
        if a.attention is not None:
            assert a.attention.allclose(b.attention) and a.scores == b.scores
    assert theirs.alignments(got[0]) == ours.alignments(want[0])


def test_sampling_and_int8(run_dir, both):  # noqa: F811
    _, theirs = both
    drawn = theirs.translate(SENTENCES, sampling=Sampling(top_k=0, temperature=1.5))
    assert len(drawn) == len(SENTENCES) and drawn[4] == ""
    with pytest.raises(UserError, match="a seed cannot set"):
        theirs.translate(SENTENCES, sampling=Sampling(seed=1))
    int8 = engine.load(run_dir, engine="ctranslate2", dtype="int8")
    assert len(int8.translate(SENTENCES, beam_size=2, **POWER)) == len(SENTENCES)


@pytest.mark.parametrize(("settings", "message"), [
    (dict(beam_size=3), "finished hypotheses: pass --length-normalization power (and a "
     "--length-penalty for it; the run's is 0.6 for gnmt) or --length-penalty 0 and --stopping "
     "finished (--stopping early is transduce's)"),
    (dict(beam_size=3, stopping="finished"), "pass --length-normalization power"),
    (dict(beam_size=3, renormalize=True, **POWER), "cannot renormalize"),
    (dict(POWER, beam_size=3, stopping="exact"), "pass --stopping finished (--stopping exact is "
     "transduce's)"),
    (dict(POWER, beam_size=3, stopping="early"), "--stopping early is transduce's"),
    (dict(beam_size=3, terms=[["x"]] * 10, **POWER), "takes no glossary"),
])
def test_what_ctranslate2_cannot_do_is_refused_in_one_line(both, settings, message):
    _, theirs = both
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("^", r"\^").replace("+", r"\+")):
        theirs.translate(SENTENCES, **settings)
    # a search without a length penalty needs no normalisation; one of one beam, neither
    assert theirs.translate(SENTENCES[:2], beam_size=3, length_penalty=0.0, stopping="finished")
    assert theirs.translate(SENTENCES[:2], beam_size=1, stopping="exact")


def test_the_export_is_made_once_beside_the_checkpoint_and_again_for_new_weights(run_dir):  # noqa: F811
    translator = engine.load(run_dir, engine="ctranslate2")
    weights = next(run_dir.glob("checkpoints/*/model.safetensors"))
    exported = weights.with_name("ctranslate2")
    made = exported.stat().st_mtime_ns
    engine.load(run_dir, engine="ctranslate2")
    assert exported.stat().st_mtime_ns == made  # read, not made again
    later = time.time() + 5
    os.utime(weights, (later, later))  # the weights changed (averaged again, say)
    again = engine.load(run_dir, engine="ctranslate2")
    assert exported.stat().st_mtime_ns != made
    assert again.translate(SENTENCES, beam_size=1) == translator.translate(SENTENCES, beam_size=1)


def test_the_command_line_engine(run_dir, tmp_path, capsys):  # noqa: F811
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "out.txt"
    assert main(["translate", "--model", str(run_dir), "--engine", "ctranslate2", "-i",
                 str(source), "-o", str(out), "--beam-size", "2", "--length-normalization",
                 "power", "--stopping", "finished", "--nbest", "2"]) == 0
    want = engine.load(run_dir, engine="ctranslate2").translate_detailed(
        SENTENCES, beam_size=2, nbest=2, **POWER)
    assert len(out.read_text().splitlines()) == sum(len(t.nbest) for t in want)
    for options, message in [
        (["--beam-size", "2"], "pass --length-normalization power"),
        (["--beam-size", "2", "--length-normalization", "power"], "pass --stopping finished"),
        (["--compile"], "--engine ctranslate2 takes no --compile"),
        (["--glossary", str(source)], "--engine ctranslate2 takes no --glossary"),
        (["--sample", "--seed", "3"], "no --seed"),
    ]:
        assert main(["translate", "--model", str(run_dir), "--engine", "ctranslate2", "-i",
                     str(source), "-o", str(out), *options]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_searches_at_once_are_its_inter_threads(run_dir, both):  # noqa: F811
    ours, theirs = both
    at_once = engine.load(run_dir, engine="ctranslate2", searches=2)
    assert at_once.engine.num_translators == 2 and theirs.engine.num_translators == 1
    assert at_once.translate(SENTENCES, beam_size=2, max_tokens=4, **POWER) == \
        theirs.translate(SENTENCES, beam_size=2, max_tokens=4, **POWER)
