import gzip

import pytest

from transduce.data.corpus import ParallelFiles, TsvFile, read_lines
from transduce.errors import DataError

SRC = ["A dog runs.", "Zwei Männer", "", "last one"]
TGT = ["Ein Hund rennt.", "Two men", "nothing on the left", "der letzte"]


def _write(path, lines, compress=False):
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_parallel_files_plain_and_gzip(tmp_path, compress):
    corpus = ParallelFiles(_write(tmp_path / "a.en", SRC, compress),
                           _write(tmp_path / "a.de", TGT, compress))
    assert list(corpus.pairs()) == list(zip(SRC, TGT, strict=True))


@pytest.mark.parametrize("compress", [False, True])
def test_tsv_plain_and_gzip(tmp_path, compress):
    lines = [f"{s}\t{t}" for s, t in zip(SRC, TGT, strict=True)]
    corpus = TsvFile(_write(tmp_path / "a.tsv", lines, compress))
    assert list(corpus.pairs()) == list(zip(SRC, TGT, strict=True))


def test_windows_line_endings_are_removed(tmp_path):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\ntwo\r\n")
    assert list(read_lines(path)) == ["one", "two"]


@pytest.mark.parametrize("longer", ["src", "tgt"])
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, longer):
    src = _write(tmp_path / "x.en", SRC + (["extra"] if longer == "src" else []))
    tgt = _write(tmp_path / "x.de", TGT + (["extra"] if longer == "tgt" else []))
    with pytest.raises(DataError) as error:
        list(ParallelFiles(src, tgt).pairs())
    message = str(error.value)
    n_src, n_tgt = (5, 4) if longer == "src" else (4, 5)
    assert f"{src} has {n_src} lines" in message and f"{tgt} has {n_tgt}" in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"gut\nauch gut\n" + b"schlecht \xff\xfe hier\n")
    with pytest.raises(DataError, match=rf"{path}:3: invalid UTF-8"):
        list(read_lines(path))


def test_invalid_utf8_inside_gzip_names_the_line(tmp_path):
    path = tmp_path / "bad.de.gz"
    path.write_bytes(gzip.compress(b"ok\n\xc3\x28\n"))
    with pytest.raises(DataError, match=rf"{path}:2: invalid UTF-8"):
        list(read_lines(path))


def test_missing_and_empty_files_are_named(tmp_path):
    with pytest.raises(DataError, match=rf"{tmp_path / 'nope.en'}: no such file"):
        list(read_lines(tmp_path / "nope.en"))
    (tmp_path / "empty.en").write_bytes(b"")
    with pytest.raises(DataError, match=rf"{tmp_path / 'empty.en'}: file is empty"):
        list(read_lines(tmp_path / "empty.en"))
    (tmp_path / "empty.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(DataError, match="file is empty"):
        list(read_lines(tmp_path / "empty.gz"))


def test_tsv_line_without_exactly_one_tab_is_named(tmp_path):
    path = _write(tmp_path / "c.tsv", ["a\tb", "no tab here", "x\ty"])
    with pytest.raises(DataError, match=rf"{path}:2: expected source<TAB>target, found 0 tab"):
        list(TsvFile(path).pairs())
