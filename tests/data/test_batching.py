import numpy as np
import pytest

from transduce.data.batching import TokenBatches, collate
from transduce.data.binarize import KEEP_ALL, PairFilter, binarize
from transduce.data.corpus import ParallelFiles
from transduce.data.tokenizer import BOS, EOS, PAD, Tokenizers, WordTokenizer
from transduce.errors import DataError

from ..conftest import MULTI30K, needs_multi30k


def _lengths(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    tgt = rng.integers(1, 60, n)
    src = np.maximum(1, tgt + rng.integers(-5, 6, n))
    return src, tgt


def test_same_seed_and_epoch_give_the_same_batches_other_epochs_another_order():
    src, tgt = _lengths()
    a = TokenBatches(src, tgt, 1000, seed=3).epoch(4)
    b = TokenBatches(src, tgt, 1000, seed=3).epoch(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    c = TokenBatches(src, tgt, 1000, seed=3).epoch(5)
    d = TokenBatches(src, tgt, 1000, seed=4).epoch(4)
    for other in (c, d):
        assert len(other) != len(a) or any(not np.array_equal(x, y)
                                           for x, y in zip(a, other, strict=True))


@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_every_pair_exactly_once_per_epoch_within_the_token_budget(epoch):
    src, tgt = _lengths()
    batches = TokenBatches(src, tgt, 1000, seed=1).epoch(epoch)
    ids = np.concatenate(batches)
    assert np.array_equal(np.sort(ids), np.arange(len(src)))
    for b in batches:
        assert len(b) * max((src[b] + 1).max(), (tgt[b] + 1).max()) <= 1000


def test_unshuffled_batches_are_in_length_order_and_fixed():
    src, tgt = _lengths()
    batches = TokenBatches(src, tgt, 1000, shuffle=False).epoch(0)
    assert [b.tolist() for b in batches] == [
        b.tolist() for b in TokenBatches(src, tgt, 1000, shuffle=False).epoch(9)]
    longest = [int(tgt[b].max()) for b in batches]
    assert longest == sorted(longest)


def test_a_pair_longer_than_the_budget_is_a_clear_error():
    with pytest.raises(DataError, match="data.max_tokens=10 is smaller than the longest pair"):
        TokenBatches(np.array([3, 20]), np.array([4, 5]), 10)


def test_collate_places_bos_eos_and_padding(tmp_path):
    words = WordTokenizer.train(["a b c d e"])
    (tmp_path / "x.en").write_text("a b c\nd\n")
    (tmp_path / "x.de").write_text("e\nc d e a\n")
    data = binarize(ParallelFiles(tmp_path / "x.en", tmp_path / "x.de"),
                    Tokenizers(words, words), tmp_path / "bin", pair_filter=KEEP_ALL)
    batch = collate(data, np.array([1, 0]))
    a, b, c, d, e = (words.encode(w)[0] for w in "abcde")
    assert batch.src.tolist() == [[d, EOS, PAD, PAD], [a, b, c, EOS]]
    assert batch.tgt_in.tolist() == [[BOS, c, d, e, a], [BOS, e, PAD, PAD, PAD]]
    assert batch.tgt_out.tolist() == [[c, d, e, a, EOS], [e, EOS, PAD, PAD, PAD]]
    assert batch.src_lengths.tolist() == [2, 4] and batch.tgt_lengths.tolist() == [5, 2]
    assert batch.ids.tolist() == [1, 0] and batch.n_tgt_tokens == 7


@needs_multi30k
def test_multi30k_train_padding_is_at_most_ten_percent(tmp_path):
    corpus = ParallelFiles(MULTI30K / "train.en", MULTI30K / "train.de")
    tokenizers = Tokenizers.train(corpus.pairs, vocab_size=8000)
    data = binarize(corpus, tokenizers, tmp_path / "bin", pair_filter=PairFilter())
    batches = TokenBatches.of(data, 4096, seed=1)
    for epoch in (0, 1):
        assert batches.padding_fraction(epoch) <= 0.10


def _epoch_as_before(src_lengths, tgt_lengths, max_tokens, seed, epoch):
    """TokenBatches.epoch as it was written when it held int64 sizes (a run started then and
    resumed now must see the same batches)."""
    src, tgt = np.asarray(src_lengths, np.int64) + 1, np.asarray(tgt_lengths, np.int64) + 1
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(src))
    order = order[np.lexsort((src[order], tgt[order]))]
    sizes = np.maximum(src, tgt)[order].tolist()
    bounds, start, longest = [0], 0, 0
    for i, size in enumerate(sizes):
        longest = max(longest, size)
        if (i - start + 1) * longest > max_tokens:
            bounds.append(i)
            start, longest = i, size
    bounds.append(len(sizes))
    batches = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    return [batches[i] for i in rng.permutation(len(batches))]


def test_batches_hold_four_bytes_a_pair_and_are_those_of_before():
    src, tgt = _lengths(5000)
    src, tgt = src.astype(np.int32), tgt.astype(np.int32)  # as memory-mapped from a corpus
    batches = TokenBatches(src, tgt, max_tokens=300, seed=3)
    assert np.shares_memory(batches.src_lengths, src)  # no copy of the corpus's lengths
    for epoch in (0, 1):
        ours = batches.epoch(epoch)
        assert {b.dtype for b in ours} == {np.dtype(np.int32)}
        before = _epoch_as_before(src, tgt, 300, 3, epoch)
        assert [b.tolist() for b in ours] == [b.tolist() for b in before]
