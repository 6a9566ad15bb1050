"""`serve --engine ctranslate2`: the same API, batching and limits, CTranslate2 searching."""

import pytest
from fastapi.testclient import TestClient

from transduce.engines import engine
from transduce.errors import UserError

from .conftest import SENTENCES, make_app

pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

POWER = {"length_normalization": "power", "length_penalty": 1.0, "stopping": "finished"}


@pytest.fixture(scope="module")
def ct2(run_dir):
    return engine.load(run_dir, device="cpu", engine="ctranslate2")


def test_the_api_answers_with_ctranslate2s_translations(ct2):
    with TestClient(make_app(ct2, engine="ctranslate2", decode=POWER)) as client:
        body = client.post("/v1/translate", json={"text": SENTENCES, "nbest": 2,
                                                  "beam_size": 3}).json()
        want = ct2.translate_detailed(SENTENCES, nbest=2, beam_size=3, **POWER)
        assert [t["text"] for t in body["translations"]] == [t.text for t in want]
        assert [h["score"] for t in body["translations"] for h in t["nbest"]] == \
            pytest.approx([s for t in want for _, s in t.nbest], abs=1e-5)
        libre = client.post("/translate", json={"q": SENTENCES[:3], "source": "en",
                                                "target": "de"}).json()
        assert libre["translatedText"] == ct2.translate(SENTENCES[:3], **POWER)
        refused = client.post("/v1/translate", json={"text": ["seven"],
                                                     "glossary": {"seven": "7"}})
        assert refused.status_code == 400 and "takes no glossary" in refused.json()["error"]
        alive = client.post("/v1/translate", json={"text": ["seven"]})
        assert alive.status_code == 200


def test_a_search_ctranslate2_cannot_make_is_refused_before_serving(ct2):
    with pytest.raises(UserError, match="pass --length-normalization power"):
        make_app(ct2, engine="ctranslate2")  # the run's beam 3 with gnmt's length penalty


def test_two_searches_at_once_are_ctranslate2s_inter_threads(run_dir):
    """`serve --engine ctranslate2 --searches 2`: CTranslate2 with two translators, searching
    the requests of two search threads at once; each request gets what it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from transduce.serve import ServeSettings, create_app

    app = create_app([str(run_dir)], ServeSettings(engine="ctranslate2", searches=2, threads=2,
                                                   decode=POWER))
    [model] = app.state.service.models.values()
    assert model.translator.engine.num_translators == 2
    lines = SENTENCES * 4
    with TestClient(app) as client, ThreadPoolExecutor(8) as clients:
        bodies = list(clients.map(lambda line: client.post(
            "/translate", json={"q": line, "source": "en", "target": "de"}).json(), lines))
    assert [b["translatedText"] for b in bodies] == model.translator.translate(lines, **POWER)
