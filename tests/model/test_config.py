import pytest

from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer

PAPER = {"base": (512, 2048, 8, 6, 0.1), "big": (1024, 4096, 16, 6, 0.3),
         "iwslt": (512, 1024, 4, 6, 0.3), "tiny": (128, 256, 4, 4, 0.3)}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_presets_have_the_published_shapes(name):
    c = ModelConfig.preset(name, src_vocab_size=100, tgt_vocab_size=100)
    assert (c.d_model, c.d_ff, c.n_heads, c.n_encoder_layers, c.dropout) == PAPER[name]
    assert c.n_decoder_layers == c.n_encoder_layers
    assert not c.norm_first and c.share_embeddings and c.tie_output


def _expected_parameters(c: ModelConfig) -> int:
    """Counted by hand from section 3: shared embedding, 4 projections per attention, 2 per FFN."""
    d = c.d_model
    attention = 4 * (d * d + d)
    ffn = d * c.d_ff + c.d_ff + c.d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return (c.src_vocab_size * d + c.n_encoder_layers * encoder_layer
            + c.n_decoder_layers * decoder_layer)


@pytest.mark.parametrize("name, paper_millions", [("base", 65), ("big", 213)])
def test_parameter_counts_reproduce_the_paper(name, paper_millions):
    config = ModelConfig.preset(name, src_vocab_size=37000, tgt_vocab_size=37000)
    count = Transformer(config).num_parameters()
    assert count == _expected_parameters(config)
    assert abs(count / 1e6 - paper_millions) / paper_millions < 0.04


@pytest.mark.parametrize("overrides, message", [
    (dict(d_model=100, n_heads=8), "divisible"),
    (dict(tgt_vocab_size=99), "share_embeddings"),
    (dict(dropout=1.5), "model.dropout"),
    (dict(target_word_dropout=1.0), "model.target_word_dropout"),
    (dict(activation="tanh"), "model.activation"),
    (dict(pad_id=500), "model.pad_id"),
])
def test_bad_values_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.preset("tiny", **{"src_vocab_size": 100, "tgt_vocab_size": 100, **overrides})


def test_unknown_preset_and_field_are_rejected():
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        ModelConfig.preset("huge", src_vocab_size=10, tgt_vocab_size=10)
    with pytest.raises(ValueError, match="d_modle"):
        ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=10, d_modle=3)
