"""Hostile and malformed requests to LibreTranslate's API (and /v1): wrong types, bodies that
are not JSON or not Unicode, nesting without end, bodies over the limit. Each is a 4xx naming
what is wrong, never a 500, and the server (the same connection) goes on."""

import json

import pytest
from fastapi.testclient import TestClient

from .conftest import make_app


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(make_app(translator, max_chars=200, max_texts=10)) as client:
        yield client


@pytest.mark.parametrize("body", [
    {"q": 7, "source": "en", "target": "de"}, {"q": ["seven", None], "source": "en",
                                               "target": "de"},
    {"q": ["x"] * 11, "source": "en", "target": "de"}, {"q": "a", "source": ["en"], "target": "de"},
])
def test_wrong_types_and_too_many_texts_are_400(client, body):
    response = client.post("/translate", json=body)
    assert response.status_code == 400 and response.json()["error"].startswith("Invalid request")


@pytest.mark.parametrize("content, kind", [
    (b"{not json", "application/json"), (b"[1, 2]", "application/json"),
    (b'{"q": "\xff\xfe"}', "application/json"),
    (b"q=\xff&source=en", "application/x-www-form-urlencoded"),
])
def test_malformed_bodies_are_400_and_the_server_goes_on(client, content, kind):
    response = client.post("/translate", content=content, headers={"Content-Type": kind})
    assert response.status_code == 400 and set(response.json()) == {"error"}
    assert client.get("/health").json() == {"status": "ok"}


def test_too_many_texts_is_named_as_such(client):
    response = client.post("/translate", json={"q": ["seven"] * 11, "source": "en",
                                               "target": "de"})
    assert response.status_code == 400
    assert response.json()["error"] == ("Invalid request: request (11 texts) exceeds the limit "
                                        "of texts per request (10)")


DEEP = b'{"q": ' + b"[" * 1000 + b"]" * 1000 + b', "source": "en", "target": "de"}'
SURROGATE = b'{"q": "\\ud800 seven", "source": "en", "target": "de"}'
@pytest.mark.parametrize("path, content, message", [
    ("/translate", DEEP, "JSON nested deeper than 32 levels"),
    ("/detect", DEEP, "JSON nested deeper than 32 levels"),
    ("/translate", SURROGATE, "q is not valid Unicode (a lone surrogate)"),
    ("/translate", SURROGATE.replace(b"}", b', "format": "html"}'), "q is not valid Unicode"),
    ("/v1/translate", b'{"text": [' + b"[" * 1000 + b"]" * 1000 + b"]}",
     "JSON nested deeper than 32 levels"),
    ("/translate", b'{"q": "[[[[' + b"[" * 100 + b'", "source": "en", "target": "de"}',
     None),  # brackets in a string are text
    ("/v1/translate", b'{"text": ["\\ud800 seven"]}', "text: Value error, not valid Unicode"),
])
def test_hostile_json_is_a_400_naming_what_and_the_connection_goes_on(client, path, content,
                                                                      message):
    """Depth bounded before parsing, text that is not Unicode refused: never a 500, and the
    same client's next request on the connection is answered."""
    response = client.post(path, content=content, headers={"Content-Type": "application/json"})
    if message is None:
        assert response.status_code == 200
    else:
        assert response.status_code in (400, 422) and message in response.json()["error"]
    again = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"})
    assert again.status_code == 200


def test_a_json_body_may_begin_with_a_byte_order_mark(client, translator):
    body = "\ufeff" + '{"q": "seven", "source": "en", "target": "de"}'
    response = client.post("/translate", content=body.encode("utf-8"),
                           headers={"Content-Type": "application/json"})
    assert response.json() == {"translatedText": translator.translate(["seven"])[0]}


def test_a_body_over_the_limit_is_a_413_whether_declared_or_streamed(translator):
    """--max-body-bytes: refused from the Content-Length, or while the body streams in (no
    Content-Length: chunked), for JSON, forms and multipart, on every route; then the server
    goes on."""
    big = "seven " * 400  # 2,400 bytes
    with TestClient(make_app(translator, max_body_bytes=1000)) as client:
        fields = {"q": big, "source": "en", "target": "de"}
        for response in (
                client.post("/translate", json=fields),
                client.post("/translate", data=fields),
                client.post("/translate", files={"q": (None, big)}),
                client.post("/v1/translate", json={"text": [big]}),
                client.post("/translate", headers={"Content-Type": "application/json"},
                            content=(part.encode() for part in json.dumps(fields))),
                client.post("/v1/translate", headers={"Content-Type": "application/json"},
                            content=(part.encode() for part in json.dumps({"text": [big]})))):
            assert response.status_code == 413, (response.request.url, response.text)
            assert response.json() == {
                "error": "Request body larger than 1,000 bytes (--max-body-bytes)"}
        small = client.post("/translate", json={"q": "seven", "source": "en", "target": "de"})
        assert small.status_code == 200


def test_a_content_length_that_is_not_a_number_is_a_400(translator):
    with TestClient(make_app(translator)) as client:
        response = client.post("/translate", content=b"{}",
                               headers={"Content-Type": "application/json",
                                        "Content-Length": "lots"})
        assert response.status_code == 400
