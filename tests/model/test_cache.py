import pytest
import torch

from transduce.model.cache import KVCache, SourceKVCache


def test_append_returns_everything_so_far_across_growth():
    cache = KVCache()
    keys = torch.randn(2, 3, 40, 4)
    values = torch.randn(2, 3, 40, 4)
    for start in range(0, 40, 5):  # crosses the initial capacity of 16 and doubles twice
        k, v = cache.append(keys[:, :, start : start + 5], values[:, :, start : start + 5])
        torch.testing.assert_close(k, keys[:, :, : start + 5])
        torch.testing.assert_close(v, values[:, :, : start + 5])
    assert len(cache) == 40


def test_a_known_length_limit_bounds_the_storage_and_spares_late_growth():
    keys = torch.randn(2, 3, 100, 4)
    # limit -> capacities seen while appending one position at a time up to the limit: straight
    # to the limit when doubling would pass it anyway (17: no copy at the 17th position)
    for limit, capacities in ((5, [5]), (17, [17]), (40, [16, 40]), (100, [16, 32, 100])):
        cache, seen = KVCache(max_length=limit), []
        for t in range(limit):
            k, v = cache.append(keys[:, :, t : t + 1], -keys[:, :, t : t + 1])
            seen += [cache.capacity] if cache.capacity not in seen else []
        assert seen == capacities
        torch.testing.assert_close(k, keys[:, :, :limit])
        torch.testing.assert_close(v, -keys[:, :, :limit])
    # a limit passed after all (a caller's mistake) costs a copy, not the contents
    cache = KVCache(max_length=3)
    for t in range(5):
        k, _ = cache.append(keys[:, :, t : t + 1], keys[:, :, t : t + 1])
    torch.testing.assert_close(k, keys[:, :, :5])


def test_select_reorders_and_drops_batch_rows_then_appends_continue():
    cache = KVCache()
    keys = torch.randn(3, 2, 4, 4)
    cache.append(keys, keys + 1)
    index = torch.tensor([2, 2, 0])
    cache.select(index)
    torch.testing.assert_close(cache.keys, keys[index])
    torch.testing.assert_close(cache.values, keys[index] + 1)
    new = torch.randn(3, 2, 1, 4)
    k, _ = cache.append(new, new)
    torch.testing.assert_close(k, torch.cat([keys[index], new], dim=2))


def test_many_reorders_and_appends_equal_a_plain_gather():
    # the cache swaps between two buffers: its contents must equal gathering the full history
    torch.manual_seed(0)
    cache, keys, values = KVCache(), torch.zeros(6, 2, 0, 4), torch.zeros(6, 2, 0, 4)
    for step in range(40):  # past the first capacity (16) and 32: grows in between
        k, v = torch.randn(len(keys), 2, 1, 4), torch.randn(len(keys), 2, 1, 4)
        keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        out_k, out_v = cache.append(k, v)
        assert torch.equal(out_k, keys) and torch.equal(out_v, values)
        # now and then a row leaves, or rows are repeated (a source's row becomes its beams)
        rows = max(1, len(keys) - (step % 7 == 6)) + 3 * (step % 11 == 3)
        index = torch.randint(0, len(keys), (rows,))
        cache.select(index)
        keys, values = keys[index], values[index]
        assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)


def test_move_copies_rows_in_place_reading_all_before_writing():
    cache = KVCache()
    keys = torch.randn(5, 2, 3, 4)
    cache.append(keys, -keys)
    src, dst = torch.tensor([0, 3, 1]), torch.tensor([3, 4, 0])  # row 3 is read and written
    cache.move(src, dst)
    expected = keys.index_copy(0, dst, keys[src])
    torch.testing.assert_close(cache.keys, expected)
    torch.testing.assert_close(cache.values, -expected)


def test_decoder_cache_selections_in_place_and_not_equal_a_plain_gather():
    # beams staying in their parents' rows and sentences leaving with the last ones taking their
    # places are copied in place; other selections into the spare buffers: the same contents
    from transduce.decoding.steps import compacting_order
    from transduce.model.cache import DecoderCache

    torch.manual_seed(0)
    cache = DecoderCache.empty(2)
    keys = torch.zeros(24, 2, 0, 4)
    for step in range(30):
        k = torch.randn(len(keys), 2, 1, 4)
        keys = torch.cat([keys, k], 2)
        for layer in cache.layers:
            layer.self_attention.append(k, 2 * k)
        if step % 3 == 0 and len(keys) > 1:  # some leave: in place
            index = compacting_order(torch.rand(len(keys)) < 0.2)
        elif step % 3 == 1:  # a few rows change: in place
            index = torch.arange(len(keys))
            index[torch.randint(0, len(keys), (2,))] = torch.randint(0, len(keys), (2,))
        else:  # shuffled: into the spare buffer
            index = torch.randperm(len(keys))
        cache.select_rows(index)
        keys = keys[index]
        for layer in cache.layers:
            assert torch.equal(layer.self_attention.keys, keys)
            assert torch.equal(layer.self_attention.values, 2 * keys)


def test_compacting_order_moves_only_the_last_sentences_into_the_places_of_finished_ones():
    from transduce.decoding.steps import compacting_order

    torch.manual_seed(0)
    for _ in range(100):
        done = torch.rand(int(torch.randint(1, 30, ()))) < 0.3
        order = compacting_order(done)
        kept = (~done).nonzero().squeeze(1)
        assert sorted(order.tolist()) == kept.tolist()  # every kept sentence, once
        moved = order != torch.arange(len(order))
        assert int(moved.sum()) == int(done[: len(kept)].sum())  # one per place left
        assert bool((order[moved] >= len(kept)).all())  # only those from beyond the kept length


def test_a_static_cache_holds_what_the_growing_one_holds_through_reorders():
    """Written at its position, read through its mask: the positions written equal the growing
    cache's, through rows repeated (beams split), reordered in place and dropped."""
    from transduce.model.cache import _select
    from transduce.model.static_cache import StaticKVCache

    position = torch.zeros((), dtype=torch.long)
    static, growing = StaticKVCache(position, capacity=6), KVCache()
    steps = torch.randn(5, 6, 2, 1, 4)  # (step, rows, H, 1, Dh)
    for t, index in enumerate([None, torch.tensor([0, 0, 1, 1, 2, 2]),
                               torch.tensor([1, 0, 2, 3, 4, 5]), torch.tensor([0, 2, 1]),
                               None]):
        if index is not None:
            _select([static], index)  # in place where few rows move, else into the spare
            growing.select(index)
        rows = len(growing.keys) if growing.rows else 3
        k = steps[t, :rows]
        held_k, held_v = static.append(k, -k)
        want_k, want_v = growing.append(k, -k)
        seen = static.mask[0]
        assert seen.sum() == t + 1 and seen[: t + 1].all()
        torch.testing.assert_close(held_k[:, :, seen], want_k)
        torch.testing.assert_close(held_v[:, :, seen], want_v)
        position += 1


def test_a_fitted_static_cache_keeps_its_positions_as_its_buffers_grow():
    """Buffers one position longer than the window (`StaticKVCache.fit`), moved to longer ones
    as the positions fill: the positions written are still the growing cache's, through beams
    reordered in place and into the spare buffers before and after each move."""
    from transduce.model.cache import _select
    from transduce.model.static_cache import StaticKVCache

    position = torch.zeros((), dtype=torch.long)
    static, growing = StaticKVCache(position, capacity=3), KVCache()
    steps = torch.randn(7, 6, 2, 1, 4)  # (step, rows, H, 1, Dh)
    selections = [None, [0, 0, 1, 1, 2, 2], [1, 0, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], None,
                  [0, 2, 1], [2, 1, 0]]
    for t, index in enumerate(selections):
        capacity = next(c for c in (3, 5, 9) if t + 2 <= c)  # the window (t + 1) and one more
        static.fit(capacity)
        if index is not None:
            _select([static], torch.tensor(index))
            growing.select(torch.tensor(index))
        rows = len(growing.keys) if growing.rows else 3
        k = steps[t, :rows]
        held_k, held_v = static.append(k, -k)
        want_k, want_v = growing.append(k, -k)
        assert held_k.shape[2] == capacity
        seen = static.mask[0]
        torch.testing.assert_close(held_k[:, :, seen], want_k)
        torch.testing.assert_close(held_v[:, :, seen], want_v)
        position += 1


def test_the_decoder_over_a_static_cache_gives_the_growing_caches_logits():
    from transduce.model.static_cache import StaticDecoderCache

    from ..conftest import random_tokens, small_model

    model = small_model().eval()
    src = random_tokens(3, 7)
    src[1, 4:] = 1
    memory, mask = model.encode(src), model.src_mask(src)
    tokens = random_tokens(3, 5)
    static = StaticDecoderCache.empty(len(model.decoder.layers), max_length=8)
    growing = model.new_cache()
    with torch.no_grad():
        for t in range(5):
            want = model.decode_next(tokens[:, t : t + 1], memory, mask, cache=growing)
            got = model.decode_next(tokens[:, t : t + 1], memory, mask, cache=static)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert int(static.length) == growing.length == 5


@pytest.mark.parametrize("window", ["written", "bucket"])
def test_searches_sharing_a_storage_through_windows_give_the_growing_caches_logits(window):
    """The compiled step's way: buffers kept from earlier searches (their stale keys masked),
    of more rows or positions than this search's or fewer, and each step reading a window of
    the positions, not all of them: those written (a CPU's compiled step) or the least power
    of two above (CUDA graphs', the positions not written masked)."""
    from transduce.model.static_cache import StaticDecoderCache, StaticStorage, bucket

    read = (lambda t: t + 1) if window == "written" else bucket

    from ..conftest import random_tokens, small_model

    model = small_model().eval()
    storage = StaticStorage()
    for rows, length in ((2, 20), (3, 5), (4, 18)):
        src = random_tokens(rows, 7)
        src[1, 4:] = 1
        memory, mask = model.encode(src), model.src_mask(src)
        tokens = random_tokens(rows, length)
        static = StaticDecoderCache.empty(len(model.decoder.layers), storage=storage)
        static.limit(length)
        growing = model.new_cache()
        with torch.no_grad():
            for t in range(length):
                if t:
                    static.read(torch.arange(read(t)))
                want = model.decode_next(tokens[:, t : t + 1], memory, mask, cache=growing)
                got = model.decode_next(tokens[:, t : t + 1], memory, mask, cache=static)
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert static.layers[0].self_attention.keys.shape[2] == bucket(length - 1) + 1


def test_the_cross_attention_cache_holds_its_keys_contiguous():
    """Keys and values that are views of the packed projection would be copied by every step's
    matrix products (their heads are not one batch dimension with their rows)."""
    packed = torch.randn(3, 7, 2, 2, 8)  # (sources, S, k|v, H, Dh)
    k, v = packed.permute(2, 0, 3, 1, 4).unbind(0)
    cache = SourceKVCache()
    held = cache.append(k, v)
    assert all(x.is_contiguous() for x in held + (cache.keys, cache.values))
    torch.testing.assert_close(held, (k, v))
