import os

import numpy as np
import pytest

from transduce.data.binarize import KEEP_ALL, PairFilter, TokenizedCorpus, binarize
from transduce.data.corpus import ParallelFiles
from transduce.data.numbers import NumberWords
from transduce.data.tokenizer import Tokenizers, WordTokenizer


@pytest.fixture(scope="module")
def numbers_tokenizers():
    corpus = NumberWords("train", sizes=(2000, 10, 10))
    return Tokenizers.train(corpus.pairs, vocab_size=350)


def _files(tmp_path, src, tgt):
    (tmp_path / "c.en").write_text("\n".join(src) + "\n")
    (tmp_path / "c.de").write_text("\n".join(tgt) + "\n")
    return ParallelFiles(tmp_path / "c.en", tmp_path / "c.de")


def test_binarized_pairs_decode_to_the_original_text(tmp_path, numbers_tokenizers):
    corpus = NumberWords("valid", sizes=(2000, 300, 10))
    data = binarize(corpus, numbers_tokenizers, tmp_path / "bin", pair_filter=KEEP_ALL,
                    chunk_pairs=64)  # several chunks
    pairs = list(corpus.pairs())
    assert len(data) == len(pairs) == 300
    for i in range(len(data)):
        assert numbers_tokenizers.src.decode(data.src(i)) == pairs[i][0]
        assert numbers_tokenizers.tgt.decode(data.tgt(i)) == pairs[i][1]
    assert data.src(0).dtype == np.uint16


def test_skips_are_counted_by_reason_and_pair_numbers_kept(tmp_path):
    words = WordTokenizer.train(["a b c d e f g h i j"])
    tokenizers = Tokenizers(words, words)
    src = ["a b", "", "a b c d e f g h", "a", "c d", "   ", "e f"]
    tgt = ["c d", "x", "a", "a b c d e f", "e", "a", "g h"]
    data = binarize(_files(tmp_path, src, tgt), tokenizers, tmp_path / "bin",
                    pair_filter=PairFilter(max_length=6, max_length_ratio=3.0))
    skips = data.skips
    assert (skips.kept, skips.empty, skips.too_long, skips.length_ratio) == (3, 2, 1, 1)
    assert skips.examples == {"empty": 2, "too_long": 3, "length_ratio": 4}
    assert data.pair_ids.tolist() == [0, 4, 6]
    assert "c: kept 3 of 7 pairs; skipped 2 empty (first: pair 2), 1 too long (first: pair 3), " \
           "1 length ratio (first: pair 4)" == skips.report("c")


def test_the_cache_is_reused_and_rebuilt_when_data_or_tokenizer_change(tmp_path):
    words = WordTokenizer.train(["a b c d"])
    corpus = _files(tmp_path, ["a b", "c"], ["d", "a b"])
    first = binarize(corpus, Tokenizers(words, words), tmp_path / "bin")
    built = os.stat(tmp_path / "bin" / "meta.json").st_mtime_ns
    same = binarize(corpus, Tokenizers(words, words), tmp_path / "bin")
    assert os.stat(tmp_path / "bin" / "meta.json").st_mtime_ns == built
    assert same.meta == first.meta

    (tmp_path / "c.de").write_text("d\nc d\n")  # the data change
    changed = binarize(corpus, Tokenizers(words, words), tmp_path / "bin")
    assert changed.tgt(1).tolist() == words.encode("c d")

    other = WordTokenizer.train(["d d d c c b"])  # the tokenizer changes
    retokenized = binarize(corpus, Tokenizers(other, other), tmp_path / "bin")
    assert retokenized.src(0).tolist() == other.encode("a b") != words.encode("a b")
    assert retokenized.meta["fingerprint"] != changed.meta["fingerprint"]


def test_an_interrupted_build_leaves_the_previous_cache_intact(tmp_path):
    words = WordTokenizer.train(["a b c d"])
    tokenizers = Tokenizers(words, words)
    good = binarize(_files(tmp_path, ["a", "b"], ["c", "d"]), tokenizers, tmp_path / "bin")

    class Broken:
        files = ()

        def pairs(self):
            yield "a", "b"
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        binarize(Broken(), tokenizers, tmp_path / "bin")
    assert TokenizedCorpus(tmp_path / "bin").meta == good.meta
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bin")] == []


def test_a_corpus_is_held_memory_mapped_offsets_too(tmp_path, numbers_tokenizers,
                                                    monkeypatch):
    """Nothing a pair needs is copied into memory: its tokens, lengths and offsets are
    memory-mapped, so a training process does not grow with its corpus. A cache without the
    offsets (made before they were written) gets them the first time it is opened, and a cache
    that cannot be written to is read all the same."""
    corpus = NumberWords("valid", sizes=(2000, 300, 10))
    data = binarize(corpus, numbers_tokenizers, tmp_path / "bin", pair_filter=KEEP_ALL)
    arrays = (data.src_lengths, data.tgt_lengths, data.pair_ids, data._src, data._tgt,
              data._src_start, data._tgt_start)
    assert all(isinstance(a, np.memmap) for a in arrays)
    expected = [data.src(i).tolist() for i in range(len(data))]
    for side in ("src", "tgt"):
        (tmp_path / "bin" / f"{side}.off").unlink()
    again = TokenizedCorpus(tmp_path / "bin")
    assert (tmp_path / "bin" / "src.off").is_file() and isinstance(again._src_start, np.memmap)
    assert [again.src(i).tolist() for i in range(len(again))] == expected
    for side in ("src", "tgt"):
        (tmp_path / "bin" / f"{side}.off").unlink()

    def refused(*args):  # as on a read-only copy (chmod does not stop root, who runs CI)
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr("transduce.data.binarize.os.replace", refused)
    read_only = TokenizedCorpus(tmp_path / "bin")
    assert [read_only.src(i).tolist() for i in range(len(read_only))] == expected
    assert sorted(p.name for p in (tmp_path / "bin").iterdir() if "off" in p.name) == []
