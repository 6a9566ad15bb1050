"""The page at /, in a real browser: Debian's Chromium driven by Playwright."""

import math
import shutil

import pytest

from .test_server import server  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow  # drives a real browser

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page():
    """A new page in a headless Chromium, closed after the test."""
    if CHROMIUM is None:
        pytest.skip("no Chromium here (apt-get install -y chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_type_translate_and_see_the_attention(server, translator, tmp_path, page):  # noqa: F811
    _, url = server()
    [expected] = translator.translate_detailed(["forty-two"], attention=True)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url + "/")
    sync_api.expect(page.locator("#pair option")).to_have_text(["English → German"])
    sync_api.expect(page.locator("#translate")).to_be_enabled()
    page.fill("#source", "forty-two")
    page.click("#translate")
    sync_api.expect(page.locator("#translation li")).to_have_text([expected.text])
    sync_api.expect(page.locator("#text")).to_have_text(expected.text)
    # each word's probability (its least probable piece's), the unsure ones marked, and
    # the sentence's confidence: the model's, as /v1/translate "scores" gives them
    [scored] = translator.translate_detailed(["forty-two"], scores=True)
    least, pieces = [], scored.tgt_pieces[:-1]
    for piece, log_prob in zip(pieces, scored.scores.token_log_probs, strict=False):
        p = math.exp(log_prob)
        if piece.startswith("▁") or not least:
            least.append(p)
        else:
            least[-1] = min(least[-1], p)
    words = page.locator("#translation li .word")
    sync_api.expect(words).to_have_count(len(expected.text.split(" ")))
    shown = [float(p) for p in words.evaluate_all(
        "ws => ws.map(w => w.dataset.probability)")]
    assert shown == pytest.approx(least, abs=1e-3)
    unsure = words.evaluate_all("ws => ws.map(w => w.classList.contains('unsure'))")
    assert unsure == [p < 0.5 for p in least]
    confidence = page.locator("#translation li").first.get_attribute("data-confidence")
    assert confidence == f"confidence {round(100 * scored.scores.confidence)}%"
    labels = page.locator("#heatmap .piece").all_text_contents()
    assert labels and not any("▁" in label for label in labels)  # pieces as words
    assert page.locator("#legend").is_visible()
    cells = page.locator("#heatmap .cell")
    rows, columns = len(expected.tgt_pieces), len(expected.src_pieces)
    sync_api.expect(cells).to_have_count(rows * columns)
    # each cell's weight is the model's, averaged over heads and layers
    mean = expected.attention.mean(dim=(0, 1))
    weights = [float(w) for w in cells.evaluate_all(
        "cells => cells.map(c => c.dataset.weight)")]
    assert weights == pytest.approx(mean.flatten().tolist(), abs=1e-4)
    cells.first.hover()
    sync_api.expect(page.locator("#cell")).to_contain_text(
        expected.tgt_pieces[0].lstrip("▁"))
    # the colour scale is absolute: a cell's opacity is its weight
    alpha = cells.first.evaluate("c => getComputedStyle(c).backgroundColor")
    assert float(alpha.rsplit(",", 1)[1].rstrip(")")) == pytest.approx(
        float(mean[0, 0]), abs=2e-3)
    page.select_option("#layer", "0")  # one layer: its own weights
    first_layer = [float(w) for w in cells.evaluate_all(
        "cells => cells.map(c => c.dataset.weight)")]
    assert first_layer == pytest.approx(
        expected.attention[0].mean(0).flatten().tolist(), abs=1e-4)
    # a paragraph: the translation of each sentence, in the text's layout; the hover
    # line of the previous translation gone
    page.fill("#source", "seven. twelve!\nforty-two.")
    page.click("#translate")
    t = dict(zip(["seven.", "twelve!", "forty-two."], translator.translate(
        ["seven.", "twelve!", "forty-two."]), strict=True))
    sync_api.expect(page.locator("#text")).to_have_text(
        f"{t['seven.']} {t['twelve!']}\n{t['forty-two.']}")
    sync_api.expect(page.locator("#cell")).to_contain_text("Hover a cell")
    # a file, picked and translated from the page, downloaded from its link
    source = tmp_path / "notes.txt"
    source.write_text("seven. twelve!\n", encoding="utf-8")
    page.set_input_files("#file", str(source))
    page.click("#translate-file")
    sync_api.expect(page.locator("#download")).to_be_visible()
    with page.expect_download() as download:
        page.click("#download")
    saved = tmp_path / "downloaded.txt"
    download.value.save_as(saved)
    assert download.value.suggested_filename == "notes.txt"
    assert saved.read_text(encoding="utf-8") == f"{t['seven.']} {t['twelve!']}\n"
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert (tmp_path / "page.png").stat().st_size > 0
    assert errors == []


def test_the_page_shows_an_error_from_the_server(server, page):  # noqa: F811
    _, url = server("--max-chars", "5")
    page.goto(url + "/")
    sync_api.expect(page.locator("#translate")).to_be_enabled()  # the models are known
    page.fill("#source", "one hundred and two")
    page.click("#translate")
    sync_api.expect(page.locator("#error")).to_have_text(
        "Invalid request: request (19) exceeds text limit (5)")
    sync_api.expect(page.locator("#translate")).to_be_enabled()


def test_the_glossary_box_holds_its_terms_in_the_translation(server, translator, page):  # noqa: F811
    from transduce.decoding.glossary import Glossary

    _, url = server()
    glossary = Glossary.of({"seven": "SIEBEN", "twelve": "ZWOELF"})
    expected = translator.translate(["seven.", "twelve"], glossary=glossary)
    page.goto(url + "/")
    sync_api.expect(page.locator("#translate")).to_be_enabled()
    page.click("#glossary-box summary")
    page.fill("#glossary", "seven = SIEBEN\ntwelve\tZWOELF\n")
    page.fill("#source", "seven.\ntwelve")
    page.click("#translate")
    sync_api.expect(page.locator("#text")).to_have_text("\n".join(expected))
    sync_api.expect(page.locator("#translation li")).to_have_count(2)
    listed = page.locator("#translation li").all_text_contents()
    assert "SIEBEN" in listed[0] and "ZWOELF" in listed[1]
    page.fill("#glossary", "seven SIEBEN")
    page.click("#translate")
    sync_api.expect(page.locator("#error")).to_contain_text("Glossary line 1")
