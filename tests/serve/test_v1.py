import contextlib

import pytest
import torch
from fastapi.testclient import TestClient

from transduce.decoding.glossary import Glossary

from .conftest import SENTENCES, make_app


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(make_app(translator)) as client:
        yield client


def test_models(client, translator):
    [model] = client.get("/v1/models").json()
    assert model == {"name": "en-de", "source": "en", "target": "de", "source_name": "English",
                     "target_name": "German", "beam_size": 3,
                     "parameters": translator.model.num_parameters(), "layers": 2}


def test_nbest_with_scores_equal_the_translator(client, translator):
    response = client.post("/v1/translate", json={"text": SENTENCES[:3], "beam_size": 4,
                                                  "nbest": 3})
    assert response.status_code == 200
    body = response.json()
    assert (body["model"], body["source"], body["target"]) == ("en-de", "en", "de")
    expected = translator.translate_detailed(SENTENCES[:3], beam_size=4, nbest=3)
    for got, want in zip(body["translations"], expected, strict=True):
        assert got["text"] == want.text
        assert [h["text"] for h in got["nbest"]] == [text for text, _ in want.nbest]
        assert [h["score"] for h in got["nbest"]] == pytest.approx(
            [score for _, score in want.nbest], rel=1e-5)
        assert got["attention"] is None


def test_attention_is_the_translators_averaged_over_heads(client, translator):
    response = client.post("/v1/translate", json={"text": ["forty-two"], "source": "en",
                                                  "target": "de", "attention": True})
    [got] = response.json()["translations"]
    [want] = translator.translate_detailed(["forty-two"], attention=True)
    assert got["source_pieces"] == want.src_pieces
    assert got["target_pieces"] == want.tgt_pieces
    assert got["layers"] == [0, 1]
    torch.testing.assert_close(torch.tensor(got["attention"]), want.attention.mean(dim=1))
    last = client.post("/v1/translate", json={"text": ["forty-two"], "attention": True,
                                              "layer": -1}).json()["translations"][0]
    assert last["layers"] == [1]
    torch.testing.assert_close(torch.tensor(last["attention"][0]), want.attention[-1].mean(0))


def test_a_prefix_starts_each_translation_as_the_translators(client, translator):
    prefixes = ["neun", "", "hundert"]
    body = client.post("/v1/translate", json={"text": SENTENCES[:3], "prefix": prefixes,
                                              "nbest": 2}).json()
    want = translator.translate_detailed(SENTENCES[:3], prefixes=prefixes, nbest=2)
    got = body["translations"]
    assert [t["text"] for t in got] == [t.text for t in want]
    assert all(h["text"].startswith(p) for t, p in zip(got, prefixes, strict=True)
               for h in t["nbest"])
    surrogate = client.post("/v1/translate", content=b'{"text": ["seven"], "prefix": '
                            b'["\\ud800"]}', headers={"Content-Type": "application/json"})
    assert surrogate.status_code in (400, 422) and "prefix" in surrogate.json()["error"]


@pytest.mark.parametrize("continuous", [False, True])
def test_scores_give_each_pieces_probability_and_the_confidence(client, translator,
                                                                continuous):
    """The confidence is the geometric mean of the best's token probabilities, which are the
    model's (Translator.score of the same translation); its beam score is theirs too. The same
    through continuous batching."""
    import math

    with TestClient(make_app(translator, continuous_batching=True)) if continuous else \
            contextlib.nullcontext(client) as served:
        body = served.post("/v1/translate", json={"text": SENTENCES[:4], "scores": True,
                                                   "beam_size": 3}).json()
    texts = [t["text"] for t in body["translations"]]
    want = translator.score(SENTENCES[:4], texts, beam_size=3)
    for got, w in zip(body["translations"], want, strict=True):
        assert len(got["probabilities"]) == len(got["target_pieces"]) == len(w.token_log_probs)
        assert got["target_pieces"][-1] == "<eos>"
        assert got["probabilities"] == pytest.approx([math.exp(p) for p in w.token_log_probs],
                                                     rel=1e-4)
        geometric = math.exp(sum(map(math.log, got["probabilities"])) / len(got["probabilities"]))
        assert got["confidence"] == pytest.approx(geometric, rel=1e-5)
        assert 0 < got["confidence"] <= 1
        assert got["nbest"][0]["score"] == pytest.approx(w.score, abs=1e-4)
    plain = client.post("/v1/translate", json={"text": SENTENCES[:1]}).json()["translations"][0]
    assert plain["confidence"] is None and plain["probabilities"] is None


@pytest.mark.parametrize("continuous", [False, True])
def test_a_glossary_holds_in_every_translation_as_the_translators(client, translator,
                                                                  continuous):
    glossary = {"seven": "SIEBEN", "hundred": "hundert", "Forty": "VIERZIG", "two": "ZWO"}
    with TestClient(make_app(translator, continuous_batching=True)) if continuous else \
            contextlib.nullcontext(client) as served:
        body = served.post("/v1/translate", json={"text": SENTENCES[:4], "glossary": glossary,
                                                   "beam_size": 3, "nbest": 2}).json()
    found = Glossary.of(glossary)
    want = translator.translate_detailed(SENTENCES[:4], beam_size=3, nbest=2, glossary=found)
    got = body["translations"]
    assert [t["text"] for t in got] == [t.text for t in want]
    for sentence, t in zip(SENTENCES[:4], got, strict=True):
        assert all(term in t["text"] for term in found.terms(sentence))
    assert "SIEBEN" in got[0]["text"] and "VIERZIG" not in got[2]["text"]  # "Forty" as written
    # the glossary check: each source term, where its target is, aligned or not
    checked = client.post("/v1/translate", json={
        "text": SENTENCES[:2], "glossary": glossary, "beam_size": 3,
        "alignments": True}).json()["translations"]
    for sentence, t in zip(SENTENCES[:2], checked, strict=True):
        [w] = translator.translate_detailed([sentence], beam_size=3, glossary=found,
                                            attention=True)
        want = found.check(sentence, w.text, translator.alignments(w))
        assert t["terms"] == [dict(vars(c)) for c in want]
        assert all(c["found"] for c in t["terms"]) and t["terms"]
    assert checked[0]["terms"][0]["source"] == "seven"
    assert got[0]["terms"][0]["aligned"] is None  # no alignments asked for


def test_alignments_are_the_translators(client, translator):
    body = client.post("/v1/translate", json={"text": SENTENCES[:4], "alignments": True}).json()
    want = translator.translate_detailed(SENTENCES[:4], attention=True)
    for got, w in zip(body["translations"], want, strict=True):
        assert [tuple(link) for link in got["alignments"]] == translator.alignments(w)
        assert got["attention"] is None  # not asked for
        assert all(i < len(w.source.split()) and j < len(w.text.split())
                   for i, j in got["alignments"])
    plain = client.post("/v1/translate", json={"text": SENTENCES[:1]}).json()["translations"][0]
    assert plain["alignments"] is None


def test_default_search_is_the_models_own(client, translator):
    body = client.post("/v1/translate", json={"text": SENTENCES}).json()
    assert [t["text"] for t in body["translations"]] == translator.translate(SENTENCES)


@pytest.mark.parametrize("body, status, error", [
    ({}, 422, "Invalid request: text: Field required"),
    ({"text": "seven"}, 422, "Invalid request: text: Input should be a valid list"),
    ({"text": ["seven"], "nbest": 0}, 422, "Invalid request: nbest: Input should be greater "
     "than or equal to 1"),
    ({"text": ["seven"], "beam_size": 2, "nbest": 3}, 400,
     "Invalid request: nbest 3 exceeds beam_size 2"),
    ({"text": ["seven"], "layer": 2}, 400,
     "Invalid request: layer 2: the model has 2 decoder layers"),
    ({"text": ["seven"], "source": "en", "target": "fr"}, 400, "fr is not supported"),
    ({"text": ["seven"], "source": "en"}, 400,
     "Invalid request: give source and target (this server has en-de)"),
    ({"text": ["seven"], "colour": "red"}, 422, "Invalid request: colour: Extra inputs are "
     "not permitted"),
    ({"text": ["seven", "eight"], "prefix": ["sie"]}, 400,
     "Invalid request: 1 prefixes for 2 texts (one each, \"\" for none)"),
    ({"text": ["seven"], "glossary": {"seven": " "}}, 422,
     "Invalid request: glossary: Value error, a term must have 1 to 200 characters, got ' '"),
    ({"text": ["seven"], "glossary": {"seven": "7", "Seven ": "sieben", "seven ": "8"}}, 400,
     "Invalid request: glossary: 'seven ' has two target terms, '7' and '8'"),
    ({"text": ["seven"], "glossary": ["seven", "7"]}, 422,
     "Invalid request: glossary: Input should be a valid dictionary"),
    ({"text": ["seven"], "glossary": {str(i): "x" for i in range(1001)}}, 422,
     "Invalid request: glossary: Dictionary should have at most 1000 items after validation, "
     "not more"),
])
def test_errors(client, body, status, error):
    response = client.post("/v1/translate", json=body)
    assert response.status_code == status
    assert response.json() == {"error": error}


def test_bad_json_is_a_4xx(client):
    response = client.post("/v1/translate", content=b'{"text": [', headers={
        "Content-Type": "application/json"})
    assert response.status_code == 422 and set(response.json()) == {"error"}


def test_metrics_count_requests_batches_and_tokens(client):
    client.post("/v1/translate", json={"text": SENTENCES[:2]})
    client.post("/translate", json={"q": "seven"})  # a 400
    text = client.get("/metrics").text
    assert 'transduce_requests_total{endpoint="/v1/translate",status="200"}' in text
    assert 'transduce_request_errors_total{endpoint="/translate",status="400"}' in text
    assert "transduce_request_seconds_bucket" in text
    assert 'transduce_batch_sentences_count{model="en-de"}' in text
    sentences = [line for line in text.splitlines()
                 if line.startswith('transduce_sentences_total{model="en-de"}')]
    assert sentences and float(sentences[0].split()[-1]) >= 2
    assert "transduce_target_tokens_per_second" in text


def test_the_page_and_its_files(client):
    page = client.get("/")
    assert page.status_code == 200 and "<textarea" in page.text
    assert "v1/translate" in client.get("/page/app.js").text
    assert client.get("/page/style.css").status_code == 200
    assert client.get("/page/secret.txt").status_code == 404
    assert client.get("/no/such/thing").json() == {"error": "Not Found"}
