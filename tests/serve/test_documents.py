"""Paragraphs and files through LibreTranslate's API: sentences translated one by one and put
back with the text's own spacing, a sentence too long for the model cut (never truncated), and
/translate_file for .txt, .html, .docx and .odt, layout kept: each the Translator's own
translations of the same sentences."""

import io

import docx
import pytest
from fastapi.testclient import TestClient
from odf import teletype, text
from odf.opendocument import OpenDocumentText, load

from .conftest import make_app

PARAGRAPH = "seven. twelve!  forty-two.\n\n  eighty-one. "
SENTENCES = ["seven.", "twelve!", "forty-two.", "eighty-one."]


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(make_app(translator)) as client:
        yield client


def _expected(translator, sentences=SENTENCES):
    return dict(zip(sentences, translator.translate(sentences), strict=True))


def test_a_paragraph_is_translated_sentence_by_sentence(client, translator):
    got = client.post("/translate", json={"q": PARAGRAPH, "source": "en", "target": "de"})
    t = _expected(translator)
    assert got.json()["translatedText"] == (
        f"{t['seven.']} {t['twelve!']}  {t['forty-two.']}\n\n  {t['eighty-one.']} ")


def test_without_splitting_each_line_is_one_sentence(translator):
    with TestClient(make_app(translator, split_sentences=False)) as client:
        got = client.post("/translate", json={"q": "seven. twelve!", "source": "en",
                                              "target": "de"})
    assert got.json()["translatedText"] == translator.translate(["seven. twelve!"])[0]


def test_a_sentence_longer_than_the_model_is_cut_not_truncated(client, translator, caplog):
    limit = translator.model.config.max_positions - 1
    long = ", ".join(["seven"] * limit)  # more tokens than the model takes
    assert not translator.fits(long)
    got = client.post("/translate", json={"q": long, "source": "en", "target": "de"}).json()
    parts = got["translatedText"].split(" ")
    assert "truncated" not in caplog.text
    assert len(got["translatedText"]) > len(translator.translate([long])[0])  # all of it
    assert len(parts) > 1
    v1 = client.post("/v1/translate", json={"text": [long]})
    assert v1.status_code == 400 and "text[0] is longer than the model's" in v1.json()["error"]


def _translate_file(client, name, content, **fields):
    response = client.post("/translate_file", data={"source": "en", "target": "de", **fields},
                           files={"file": (name, content)})
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/") and url.endswith(name)
    download = client.get(url)
    assert download.status_code == 200
    assert f'filename="{name}"' in download.headers["content-disposition"]
    return download.content


def test_text_and_html_files(client, translator):
    t = _expected(translator)
    got = _translate_file(client, "notes.txt", PARAGRAPH.replace("\n", "\r\n").encode())
    assert got.decode() == (f"{t['seven.']} {t['twelve!']}  {t['forty-two.']}\r\n\r\n  "
                            f"{t['eighty-one.']} ")
    page = b"<html><body><h1>seven.</h1><p>twelve! <b>forty-two.</b></p></body></html>"
    got = _translate_file(client, "page.html", page).decode()
    assert got == (f"<html><body><h1>{t['seven.']}</h1><p>{t['twelve!']} "
                   f"<b>{t['forty-two.']}</b></p></body></html>")
    # an inline element inside a sentence: put back by the alignments, as /translate does
    from .test_libretranslate import _html

    inline = "<p>seven <i>twelve</i> forty-two</p>"
    assert _translate_file(client, "inline.html", inline.encode()).decode() == \
        _html(translator, inline)


def test_a_word_document_keeps_its_layout(client, translator):
    source = docx.Document()
    source.add_heading("seven.", 1)
    paragraph = source.add_paragraph("twelve! ")
    paragraph.add_run("forty-two.").bold = True
    table = source.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "eighty-one.", "seven. twelve!"
    source.sections[0].header.paragraphs[0].text = "forty-two."
    buffer = io.BytesIO()
    source.save(buffer)
    got = docx.Document(io.BytesIO(_translate_file(client, "letter.docx", buffer.getvalue())))
    t = _expected(translator)
    assert [p.text for p in got.paragraphs] == [t["seven."], f"{t['twelve!']} {t['forty-two.']}"]
    assert [p.style.name for p in got.paragraphs] == ["Heading 1", "Normal"]
    assert [c.text for c in got.tables[0].rows[0].cells] == [t["eighty-one."],
                                                             f"{t['seven.']} {t['twelve!']}"]
    assert got.sections[0].header.paragraphs[0].text == t["forty-two."]


def test_an_opendocument_keeps_its_layout(client, translator):
    source = OpenDocumentText()
    heading = text.H(outlinelevel=1)
    teletype.addTextToElement(heading, "seven.")
    paragraph = text.P()
    teletype.addTextToElement(paragraph, "twelve!  ")
    span = text.Span()
    teletype.addTextToElement(span, "forty-two.")
    paragraph.addElement(span)
    source.text.addElement(heading)
    source.text.addElement(paragraph)
    buffer = io.BytesIO()
    source.save(buffer)
    result = io.BytesIO(_translate_file(client, "report.odt", buffer.getvalue()))
    got = load(result)
    t = _expected(translator)
    assert [teletype.extractText(h) for h in got.text.getElementsByType(text.H)] == [t["seven."]]
    assert [teletype.extractText(p) for p in got.text.getElementsByType(text.P)] == [
        f"{t['twelve!']}  {t['forty-two.']}"]


@pytest.mark.parametrize("files, fields, status, error", [
    ({"file": ("a.pdf", b"%PDF")}, {}, 400, "Invalid request: file format not supported"),
    ({"file": ("a.docx", b"not a zip")}, {}, 400,
     "Invalid request: a.docx: not a readable .docx file (PackageNotFoundError)"),
    ({"file": ("a.txt", b"\xff\xfe")}, {}, 400, "Invalid request: a.txt: not UTF-8 text"),
    ({"other": ("a.txt", b"seven")}, {}, 400, "Invalid request: missing file parameter"),
    ({"file": ("a.txt", b"seven")}, {"target": ""}, 400,
     "Invalid request: missing target parameter"),
    ({"file": ("a.txt", b"seven")}, {"target": "zz"}, 400, "zz is not supported"),
])
def test_file_errors(client, files, fields, status, error):
    response = client.post("/translate_file", data={"source": "en", "target": "de", **fields},
                           files=files)
    assert response.status_code == status and response.json() == {"error": error}


def test_downloads_are_only_what_was_translated(client):
    for name in ("nothing", "../../etc/passwd", "0" * 32 + ".missing.txt", ".hidden"):
        assert client.get(f"/download_file/{name}").status_code == 404


def test_files_may_be_disabled_as_libretranslate_says(translator):
    with TestClient(make_app(translator, files_translation=False)) as client:
        response = client.post("/translate_file", data={"source": "en", "target": "de"},
                               files={"file": ("a.txt", b"seven")})
        assert response.status_code == 403
        assert response.json() == {"error": "Files translation are disabled on this server."}
        settings = client.get("/frontend/settings").json()
        assert settings["filesTranslation"] is False and settings["supportedFilesFormat"] == []


def test_translate_split_sentences_gives_what_the_server_gives(client, run_dir, tmp_path):
    from transduce.cli import main

    lines = ["seven. twelve!  forty-two.", "", "  eighty-one. seven. ", ", ".join(["six"] * 45)]
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(run_dir), "--split-sentences", "-i", str(source),
                 "-o", str(output)]) == 0
    served = client.post("/translate", json={"q": lines, "source": "en", "target": "de"})
    assert output.read_text(encoding="utf-8").splitlines() == served.json()["translatedText"]
