import torch

from transduce.model.masks import causal_mask, padding_mask


def test_padding_mask_marks_real_tokens_broadcastable_to_attention_scores():
    tokens = torch.tensor([[5, 6, 1, 1], [7, 8, 9, 10]])
    mask = padding_mask(tokens, pad_id=1)
    assert mask.shape == (2, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [[True, True, False, False], [True, True, True, True]]


def test_causal_mask_square_is_lower_triangular():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_mask_with_cached_keys_aligns_queries_to_the_newest_positions():
    # 2 new queries after 3 cached positions: query i (absolute 3+i) sees keys 0..3+i
    full = causal_mask(5)
    assert torch.equal(causal_mask(2, 5), full[3:])
