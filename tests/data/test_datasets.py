import functools
import gzip
import http.server
import threading

import pytest

from transduce.data.datasets import known_corpus, multi30k
from transduce.data.numbers import NumberWords
from transduce.errors import DataError

from ..conftest import MULTI30K, needs_multi30k

LINES = {"en": ["A dog.", "Two cats."], "de": ["Ein Hund.", "Zwei Katzen."]}


@pytest.fixture
def server(tmp_path):
    """A local web server with gzipped files laid out like the dataset's repository."""
    root = tmp_path / "www"
    raw = root / "data" / "task1" / "raw"
    raw.mkdir(parents=True)
    for lang, lines in LINES.items():
        (raw / f"val.{lang}.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/data/task1/raw", requests
    httpd.shutdown()


def test_download_unpacks_into_the_cache_once(server, tmp_path):
    url, requests = server
    corpus = multi30k("val", "en", "de", cache_dir=tmp_path / "cache", base_url=url)
    assert list(corpus.pairs()) == list(zip(LINES["en"], LINES["de"], strict=True))
    assert corpus.src == tmp_path / "cache" / "multi30k" / "val.en"
    n = len(requests)
    again = multi30k("val", "en", "de", cache_dir=tmp_path / "cache", base_url=url)
    assert list(again.pairs()) == list(corpus.pairs()) and len(requests) == n


def test_failed_download_says_how_to_use_local_files_and_leaves_nothing(server, tmp_path):
    url, _ = server
    with pytest.raises(DataError, match=r"could not download .*train\.en\.gz.*--data-dir"):
        multi30k("train", "en", "de", cache_dir=tmp_path / "cache", base_url=url)  # 404
    with pytest.raises(DataError, match="could not download"):
        multi30k("val", cache_dir=tmp_path / "c2", base_url="http://127.0.0.1:9/nothing")
    assert not any((tmp_path / "cache" / "multi30k").iterdir())


def test_local_directory_with_plain_or_gzip_files(tmp_path):
    (tmp_path / "val.en").write_text("one\n")
    (tmp_path / "val.de.gz").write_bytes(gzip.compress(b"eins\n"))
    assert list(multi30k("val", data_dir=tmp_path).pairs()) == [("one", "eins")]
    with pytest.raises(DataError, match=r"neither train\.en nor train\.en\.gz"):
        multi30k("train", data_dir=tmp_path)


def test_unknown_names_are_clear_errors():
    with pytest.raises(DataError, match="no split 'dev'"):
        multi30k("dev")
    with pytest.raises(DataError, match="no language 'es'"):
        multi30k("val", "en", "es")
    with pytest.raises(DataError, match="unknown dataset 'wmt99'"):
        known_corpus("wmt99", "train", "en", "de")


def test_known_corpus_names():
    assert known_corpus("numbers", "valid", "en", "fr", seed=3) == NumberWords("valid", "en", "fr",
                                                                               seed=3)


@needs_multi30k
def test_multi30k_from_the_shared_copy():
    corpus = known_corpus("multi30k", "valid", "en", "de", data_dir=MULTI30K)
    pairs = list(corpus.pairs())
    assert len(pairs) == 1014
    assert pairs[0][0] == (MULTI30K / "val.en").read_text().splitlines()[0]
