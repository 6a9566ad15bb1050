import torch

from transduce.model.cache import KVCache


def test_append_returns_everything_so_far_across_growth():
    cache = KVCache()
    keys = torch.randn(2, 3, 40, 4)
    values = torch.randn(2, 3, 40, 4)
    for start in range(0, 40, 5):  # crosses the initial capacity of 16 and doubles twice
        k, v = cache.append(keys[:, :, start : start + 5], values[:, :, start : start + 5])
        torch.testing.assert_close(k, keys[:, :, : start + 5])
        torch.testing.assert_close(v, values[:, :, : start + 5])
    assert len(cache) == 40


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
