import math

import torch

from transduce.model.embeddings import (
    SinusoidalPositions,
    TransformerEmbedding,
    sinusoidal_encoding,
    token_embedding,
)
from transduce.model.transformer import Transformer

from ..conftest import small_config


def test_sinusoidal_encoding_matches_the_papers_formula():
    d_model = 16
    table = sinusoidal_encoding(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert math.isclose(table[pos, 2 * i], math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[pos, 2 * i + 1], math.cos(angle), abs_tol=1e-6)


def test_positions_with_offset_are_a_window_of_the_table():
    positions = SinusoidalPositions(20, 8)
    torch.testing.assert_close(positions(3, offset=5), sinusoidal_encoding(20, 8)[5:8])


def test_embedding_is_scaled_token_vector_plus_position():
    d_model = 16
    tokens = token_embedding(30, d_model, pad_id=1)
    embed = TransformerEmbedding(tokens, SinusoidalPositions(10, d_model), dropout=0.0)
    ids = torch.tensor([[5, 9, 1]])
    expected = tokens.weight[ids] * math.sqrt(d_model) + sinusoidal_encoding(10, d_model)[:3]
    torch.testing.assert_close(embed(ids), expected)


def test_token_embedding_initialisation_and_zero_pad_row():
    d_model = 256
    weight = token_embedding(4000, d_model, pad_id=1).weight
    assert (weight[1] == 0).all()
    assert math.isclose(weight.std().item(), d_model**-0.5, rel_tol=0.02)


def test_tied_and_shared_embeddings_share_storage():
    model = Transformer(small_config())
    src = model.encoder.embedding.tokens.weight
    assert model.decoder.embedding.tokens.weight is src
    assert model.output.weight is src
    assert model.output.weight.data_ptr() == src.data_ptr()


def test_separate_vocabularies_keep_separate_matrices_but_tie_the_output():
    model = Transformer(small_config(tgt_vocab_size=60, share_embeddings=False))
    tgt = model.decoder.embedding.tokens.weight
    assert model.encoder.embedding.tokens.weight.data_ptr() != tgt.data_ptr()
    assert model.output.weight.data_ptr() == tgt.data_ptr()
    untied = Transformer(small_config(tie_output=False))
    assert untied.output.weight.data_ptr() != untied.decoder.embedding.tokens.weight.data_ptr()


def test_tied_gradient_flows_from_output_into_the_embedding():
    model = Transformer(small_config(dropout=0.0))
    weight = model.output.weight
    logits = model.output(torch.randn(1, 1, 32))
    logits[0, 0, 7].backward()
    assert weight.grad[7].abs().sum() > 0
    assert model.encoder.embedding.tokens.weight.grad is weight.grad


def test_word_dropout_zeroes_whole_token_vectors_and_rescales_the_rest():
    torch.manual_seed(0)
    d_model, p = 16, 0.25
    tokens = token_embedding(30, d_model, pad_id=1)
    embed = TransformerEmbedding(tokens, SinusoidalPositions(64, d_model), dropout=0.0,
                                 word_dropout=p)
    ids = torch.randint(2, 30, (64, 64))
    positions = sinusoidal_encoding(64, d_model)
    words = embed(ids) - positions  # training mode: what is left of each token's vector
    full = tokens.weight[ids] * math.sqrt(d_model)
    dropped = (words == 0).all(-1)
    torch.testing.assert_close(words[~dropped], full[~dropped] / (1 - p))
    assert abs(dropped.float().mean().item() - p) < 0.02  # 4,096 tokens: 0.02 is ~3 sigma
    embed.eval()
    torch.testing.assert_close(embed(ids), full + positions)


def test_word_dropout_reaches_each_side_of_the_model_only():
    ids = torch.randint(4, 50, (8, 12))
    for side in ("source", "target"):
        model = Transformer(small_config(dropout=0.0, **{f"{side}_word_dropout": 0.5}))
        model.train()
        changed = {name: not torch.equal(module(ids), module(ids))
                   for name, module in (("source", model.encoder.embedding),
                                        ("target", model.decoder.embedding))}
        assert changed == {"source": side == "source", "target": side == "target"}
