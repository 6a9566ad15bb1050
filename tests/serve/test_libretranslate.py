
"""LibreTranslate's API, with the assertions of LibreTranslate's own tests
(libretranslate/tests/test_api/) and every error the issue names."""

import re

import pytest
from fastapi.testclient import TestClient

from transduce.decoding.glossary import Glossary
from transduce.documents.layout import html_text

from .conftest import SENTENCES, make_app


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(make_app(translator, max_chars=200, max_texts=10)) as client:
        yield client


def test_languages(client):
    response = client.get("/languages")
    assert response.status_code == 200
    assert response.json() == [{"code": "de", "name": "German", "targets": []},
                               {"code": "en", "name": "English", "targets": ["de"]}]
    assert client.post("/languages").status_code == 405


def test_translate_form_json_and_multipart_equal_the_translator(client, translator):
    expected = translator.translate(["forty-two"])[0]
    fields = {"q": "forty-two", "source": "en", "target": "de", "format": "text"}
    for kind in ("data", "json", "files"):
        if kind == "files":
            response = client.post("/translate", files={k: (None, v) for k, v in fields.items()})
        else:
            response = client.post("/translate", **{kind: fields})
        assert response.status_code == 200, response.text
        assert response.json() == {"translatedText": expected}


def test_translate_batch(client, translator):
    response = client.post("/translate", json={"q": SENTENCES[:2], "source": "en",
                                               "target": "de", "format": "text"})
    assert response.status_code == 200
    assert response.json() == {"translatedText": translator.translate(SENTENCES[:2])}


def test_lines_are_translated_one_by_one(client, translator):
    response = client.post("/translate", json={"q": "seven\n\ntwelve", "source": "en",
                                               "target": "de"})
    seven, twelve = translator.translate(["seven", "twelve"])
    assert response.json()["translatedText"] == f"{seven}\n\n{twelve}"


def _html(translator, markup: str, **options) -> str:
    """`markup` translated as the server should: each sentence (here: the text between block
    tags) translated whole, its inline elements put back by the translation's alignments."""
    pieces = html_text(markup)
    found = translator.translate_detailed(list(pieces.sentences.values()), attention=True,
                                          **options)
    return pieces.join([t.text for t in found], [translator.alignments(t) for t in found])


def test_html_keeps_the_markup(client, translator):
    """Block tags kept, inline ones put back around the words aligned with theirs."""
    markup = "<div><p>seven <b>twelve</b></p><p>forty-two</p></div>"
    response = client.post("/translate", json={"q": markup, "source": "en", "target": "de",
                                               "format": "html"})
    got = response.json()["translatedText"]
    assert got == _html(translator, markup)
    seven_twelve, forty_two = translator.translate(["seven twelve", "forty-two"])
    assert got.startswith("<div><p>") and f"<p>{forty_two}</p></div>" in got
    assert got.count("<b>") == got.count("</b>") == 1
    assert got.replace("<b>", "").replace("</b>", "") == \
        f"<div><p>{seven_twelve}</p><p>{forty_two}</p></div>"


def test_alternatives_are_the_other_hypotheses(client, translator):
    response = client.post("/translate", json={"q": "forty-two", "source": "en", "target": "de",
                                               "alternatives": 2})
    [t] = translator.translate_detailed(["forty-two"], beam_size=3, nbest=3)
    body = response.json()
    assert body["translatedText"] == t.text
    assert body["alternatives"] == [text for text, _ in t.nbest[1:] if text != t.text]


def test_a_glossary_of_our_own_beside_libretranslates_fields(client, translator):
    """JSON gives it as an object, a form as lines of source<TAB>target; every sentence of the
    text, plain or HTML, holds the terms of its source terms."""
    glossary = {"seven": "SIEBEN", "twelve": "ZWOELF"}
    seven, twelve = translator.translate(["seven", "twelve"],
                                         glossary=Glossary.of(glossary))
    assert "SIEBEN" in seven and "ZWOELF" in twelve
    fields = {"q": "seven\n\ntwelve", "source": "en", "target": "de"}
    as_json = client.post("/translate", json={**fields, "glossary": glossary})
    assert as_json.json() == {"translatedText": f"{seven}\n\n{twelve}"}
    as_form = client.post("/translate", data={**fields, "glossary": "seven\tSIEBEN\n"
                                                                     "twelve\tZWOELF\n"})
    assert as_form.json() == {"translatedText": f"{seven}\n\n{twelve}"}
    html = client.post("/translate", json={"q": "<p>seven</p><b>twelve</b>", "source": "en",
                                           "target": "de", "format": "html",
                                           "glossary": glossary})
    assert html.json()["translatedText"] == \
        _html(translator, "<p>seven</p><b>twelve</b>", glossary=Glossary.of(glossary))
    assert "SIEBEN" in html.json()["translatedText"]


@pytest.mark.parametrize(("glossary", "error"), [
    (["seven", "7"], "glossary must be an object of source term: target term"),
    ({"seven": ""}, "glossary: a term must be a string of 1 to 200 characters, got ''"),
    ({"seven": 7}, "glossary: a term must be a string of 1 to 200 characters, got 7"),
    ({"x" * 201: "y"}, "glossary: a term must be a string of 1 to 200 characters"),
    ({str(i): "x" for i in range(1001)}, "glossary: at most 1000 entries, got 1001"),
    ({"seven": "7", "seven ": "8"}, "glossary: 'seven ' has two target terms, '7' and '8'"),
    ("seven 7", "glossary: each line is source term<TAB>target term"),
])
def test_a_bad_glossary_is_a_400_naming_it(client, glossary, error):
    response = client.post("/translate", json={"q": "seven", "source": "en", "target": "de",
                                               "glossary": glossary})
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"Invalid request: {error}")


def test_auto_source_with_one_source_language(client, translator):
    response = client.post("/translate", json={"q": ["seven", "twelve"], "source": "auto",
                                               "target": "de"})
    assert response.json() == {"translatedText": translator.translate(["seven", "twelve"]),
                               "detectedLanguage": [{"confidence": 100.0, "language": "en"}] * 2}
    single = client.post("/translate", data={"q": "seven", "source": "auto", "target": "de"})
    assert single.json()["detectedLanguage"] == {"confidence": 100.0, "language": "en"}


@pytest.mark.parametrize("fields, error", [
    ({"source": "en", "target": "de"}, "Invalid request: missing q parameter"),
    ({"q": "", "source": "en", "target": "de"}, "Invalid request: missing q parameter"),
    ({"q": "seven", "target": "de"}, "Invalid request: missing source parameter"),
    ({"q": "seven", "source": "en"}, "Invalid request: missing target parameter"),
    ({"q": "seven", "source": "en", "target": "zz"}, "zz is not supported"),
    ({"q": "seven", "source": "zz", "target": "de"}, "zz is not supported"),
    ({"q": "seven", "source": "de", "target": "en"},
     "English (en) is not available as a target language from German (de)"),
    ({"q": "x" * 201, "source": "en", "target": "de"},
     "Invalid request: request (201) exceeds text limit (200)"),
    ({"q": ["x" * 150, "x" * 201], "source": "en", "target": "de"},  # each text, as LibreTranslate
     "Invalid request: request (201) exceeds text limit (200)"),
    ({"q": "seven", "source": "en", "target": "de", "alternatives": "many"},
     "Invalid request: alternatives parameter is not a number"),
    ({"q": "seven", "source": "en", "target": "de", "alternatives": 10**9},
     "Invalid request: alternatives parameter must be <= 3"),
    ({"q": "seven", "source": "en", "target": "de", "format": "pdf"},
     "pdf format is not supported"),
    ({"q": "seven", "source": "auto", "target": "en"},
     "Invalid request: nothing is translated into English (en) here"),
])
def test_translate_errors(client, fields, error):
    for kind in ("data", "json"):
        response = client.post("/translate", **{kind: fields})
        assert response.status_code == 400
        assert response.json() == {"error": error}


def test_detect(client):
    response = client.post("/detect", data={"q": "Hello"})
    assert response.status_code == 200
    assert response.json() == [{"confidence": 100.0, "language": "en"}]
    missing = client.post("/detect")
    assert missing.status_code == 400 and "error" in missing.json()
    assert client.get("/detect").status_code == 405


def test_health_settings_spec_and_docs(client):
    assert client.get("/health").json() == {"status": "ok"}
    assert client.post("/health").status_code == 405
    settings = client.get("/frontend/settings").json()
    assert settings == {"charLimit": 200, "frontendTimeout": 500, "apiKeys": False,
                        "keyRequired": False, "suggestions": False, "filesTranslation": True,
                        "supportedFilesFormat": [".txt", ".html", ".htm", ".docx", ".odt"],
                        "language": {"source": {"code": "en", "name": "English"},
                                     "target": {"code": "de", "name": "German"}}}
    spec = client.get("/spec")
    assert spec.status_code == 200 and "/translate" in spec.json()["paths"]
    assert client.post("/spec").status_code == 405
    assert client.get("/docs").status_code == 200


def test_the_limit_of_characters_is_per_text(client, translator):
    texts = ["seven " * 30, "twelve " * 25]  # 180 and 175 characters: 355 in all
    response = client.post("/translate", json={"q": texts, "source": "en", "target": "de"})
    assert response.status_code == 200
    assert len(response.json()["translatedText"]) == 2


def test_cors_headers_are_libretranslates(client):
    expected = {"access-control-allow-origin": "*",
                "access-control-allow-headers": "Authorization, Content-Type",
                "access-control-expose-headers": "Authorization",
                "access-control-allow-methods": "GET, POST",
                "access-control-allow-credentials": "true",
                "access-control-max-age": "1728000"}
    preflight = client.options("/translate", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    for response in (preflight, client.get("/languages", headers={"Origin": "https://a.b"}),
                     client.post("/translate", json={"q": "seven", "source": "en",
                                                     "target": "de"}),
                     client.post("/translate", json={})):  # errors too
        assert {k: response.headers.get(k) for k in expected} == expected, response.request
    assert preflight.status_code == 200


def test_api_keys_are_optional_unless_required_and_limits_go_by_key(translator, tmp_path):
    """As LibreTranslate: with --api-keys a request without a key is served (at the limits of
    its address), one with a wrong key gets a 403; with --require-api-key one without a key
    gets LibreTranslate's 400. The rate limit counts by key, else by address."""
    keys = tmp_path / "keys"
    keys.write_text("secret\nother\n")
    fields = {"q": "seven", "source": "en", "target": "de"}
    with TestClient(make_app(translator, api_keys=keys, rate_limit="3/minute")) as client:
        settings = client.get("/frontend/settings").json()
        assert settings["apiKeys"] is True and settings["keyRequired"] is False
        wrong = client.post("/translate", json={**fields, "api_key": "wrong"})
        assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
        assert client.post("/translate", json=fields).status_code == 200  # no key: by address
        assert client.post("/translate", data={**fields, "api_key": "secret"}).status_code == 200
        assert client.post("/translate", json={**fields, "api_key": "secret"}).status_code == 200
        assert client.post("/translate", json={**fields, "api_key": "secret"}).status_code == 200
        limited = client.post("/translate", json={**fields, "api_key": "secret"})
        assert limited.status_code == 429
        assert limited.json() == {"error": "Slowdown: 3 per 1 minute"}
        assert int(limited.headers["retry-after"]) >= 1
        assert client.post("/translate", json={**fields, "api_key": "other"}).status_code == 200
        assert client.get("/languages").status_code == 200  # not limited
    with TestClient(make_app(translator, api_keys=keys, require_api_key=True)) as client:
        assert client.get("/frontend/settings").json()["keyRequired"] is True
        for missing in ({}, {"api_key": ""}):
            response = client.post("/translate", json={**fields, **missing})
            assert response.status_code == 400
            assert response.json() == {
                "error": "Please contact the server operator to get an API key"}
        assert client.post("/translate", json={**fields, "api_key": "wrong"}).status_code == 403
        assert client.post("/translate", json={**fields, "api_key": "other"}).status_code == 200
        assert client.post("/v1/translate", json={"text": ["seven"]}).status_code == 400
        assert client.post("/v1/translate", json={"text": ["seven"], "api_key": "secret"}
                           ).status_code == 200


def test_suggest_is_disabled_as_libretranslate_says(client):
    response = client.post("/suggest", json={"q": "seven", "s": "sieben", "source": "en",
                                             "target": "de"})
    assert response.status_code == 403
    assert response.json() == {"error": "Suggestions are disabled on this server."}


def test_html_with_alternatives_has_the_key_and_none_in_it(client):
    one = client.post("/translate", json={"q": "<p>seven</p>", "source": "en", "target": "de",
                                          "format": "html", "alternatives": 2}).json()
    assert one["alternatives"] == []
    many = client.post("/translate", json={"q": ["<p>seven</p>", "<b>twelve</b>"],
                                           "source": "en", "target": "de", "format": "html",
                                           "alternatives": 2}).json()
    assert many["alternatives"] == [[], []]


def test_docs_are_served_without_a_cdn(client):
    page = client.get("/docs").text
    scripts = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', page)
    assert scripts and all(s.startswith("/") for s in scripts), scripts  # from this server
    for asset in scripts:
        assert client.get(asset).status_code == 200
    assert "cdn" not in page.lower()


def test_favicon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"


def test_a_bug_is_a_500_with_a_request_id_and_one_log_line(translator, monkeypatch, caplog):
    """The last-resort handler: a 500 naming the request id (also in X-Request-ID), one line in
    the log, the 500 counted in the metrics, and the next request answered."""
    app = make_app(translator)
    service = app.state.service

    async def broken(*args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(service, "translate", broken)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"},
                               headers={"X-Request-ID": "req-42"})
        assert response.status_code == 500
        assert response.json() == {"error": "Internal error (RuntimeError); request id req-42"}
        assert response.headers["x-request-id"] == "req-42"
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and not errors[0].exc_info
        assert "request req-42: POST /translate failed: RuntimeError: a bug" in errors[0].message
        assert client.get("/health").status_code == 200
        assert 'transduce_requests_total{endpoint="/translate",status="500"} 1.0' in \
            client.get("/metrics").text
        fresh = client.get("/health", headers={"X-Request-ID": "no spaces allowed"})
        assert re.fullmatch(r"[0-9a-f]{16}", fresh.headers["x-request-id"])


def test_access_log_lines_have_time_latency_and_request_id(client, caplog):
    with caplog.at_level("INFO", logger="transduce.serve.access"):
        client.post("/translate", json={"q": "seven", "source": "en", "target": "de"},
                    headers={"X-Request-ID": "abc"})
    line = [r for r in caplog.records if r.name == "transduce.serve.access"][-1]
    assert re.fullmatch(r'\S+ "POST /translate" 200 \d+\.\d ms id=abc', line.getMessage())


def test_metrics_may_need_a_token(translator):
    with TestClient(make_app(translator, metrics_auth_token="s3cret")) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}
                          ).status_code == 401
        allowed = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert allowed.status_code == 200 and "transduce_requests_total" in allowed.text


def test_a_request_over_the_timeout_gets_a_503_and_the_server_goes_on(translator):
    with TestClient(make_app(translator, timeout=1e-6)) as client:
        response = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"})
        assert response.status_code == 503
        assert response.json() == {"error": "Translation took longer than 1e-06 s; try again "
                                            "later"}
        assert client.get("/health").status_code == 200
