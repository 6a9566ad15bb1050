"""The page at /, in a real browser: Debian's Chromium driven by Playwright."""

import shutil

import pytest

from .test_server import server  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow  # drives a real browser

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install -y chromium)")
def test_type_translate_and_see_the_attention(server, translator, tmp_path):  # noqa: F811
    _, url = server()
    [expected] = translator.translate_detailed(["forty-two"], attention=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(url + "/")
            sync_api.expect(page.locator("#pair option")).to_have_text(["English → German"])
            sync_api.expect(page.locator("#translate")).to_be_enabled()
            page.fill("#source", "forty-two")
            page.click("#translate")
            sync_api.expect(page.locator("#translation li")).to_have_text([expected.text])
            cells = page.locator("#heatmap .cell")
            rows, columns = len(expected.tgt_pieces), len(expected.src_pieces)
            sync_api.expect(cells).to_have_count(rows * columns)
            # each cell's weight is the model's, averaged over heads and layers
            mean = expected.attention.mean(dim=(0, 1))
            weights = [float(w) for w in cells.evaluate_all(
                "cells => cells.map(c => c.dataset.weight)")]
            assert weights == pytest.approx(mean.flatten().tolist(), abs=1e-4)
            cells.first.hover()
            sync_api.expect(page.locator("#cell")).to_contain_text(expected.tgt_pieces[0])
            page.select_option("#layer", "0")  # one layer: its own weights
            first_layer = [float(w) for w in cells.evaluate_all(
                "cells => cells.map(c => c.dataset.weight)")]
            assert first_layer == pytest.approx(
                expected.attention[0].mean(0).flatten().tolist(), abs=1e-4)
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            assert (tmp_path / "page.png").stat().st_size > 0
            assert errors == []
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install -y chromium)")
def test_the_page_shows_an_error_from_the_server(server):  # noqa: F811
    _, url = server("--max-chars", "5")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(url + "/")
            sync_api.expect(page.locator("#translate")).to_be_enabled()  # the models are known
            page.fill("#source", "one hundred and two")
            page.click("#translate")
            sync_api.expect(page.locator("#error")).to_have_text(
                "Invalid request: request (19) exceeds text limit (5)")
            sync_api.expect(page.locator("#translate")).to_be_enabled()
        finally:
            browser.close()
