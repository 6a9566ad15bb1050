import pytest
import torch

from transduce.errors import UserError
from transduce.export.marian import residual_permutation, to_huggingface, to_marian
from transduce.model.embeddings import sinusoidal_encoding

from ..conftest import beam_with, greedy_with, random_tokens, small_model
from ..decoding.test_greedy import _model_that_stops

pytest.importorskip("transformers")

PAD, BOS, EOS = 1, 2, 3


def test_the_permutation_maps_our_positions_onto_marians():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding
    theirs = MarianSinusoidalPositionalEmbedding(30, 16).create_weight()
    ours = sinusoidal_encoding(30, 16)
    torch.testing.assert_close(ours[:, residual_permutation(16)], theirs)


@pytest.mark.parametrize("norm_first", [False, True], ids=["marian", "pegasus"])
def test_huggingface_model_gives_the_same_logits(norm_first):
    model = small_model(dropout=0.0, tie_output=True, norm_first=norm_first)
    marian = to_huggingface(model)
    assert type(marian).__name__ == ("PegasusForConditionalGeneration" if norm_first
                                     else "MarianMTModel")
    src, tgt = random_tokens(3, 7), random_tokens(3, 5)
    src[1, 4:] = PAD
    tgt[:, 0] = BOS
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = marian(input_ids=src, attention_mask=(src != PAD).long(),
                        decoder_input_ids=tgt).logits
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)


def test_pre_norm_models_do_not_pass_for_marian():
    with pytest.raises(UserError, match="Pegasus"):
        to_marian(small_model(tie_output=True, norm_first=True))


@pytest.mark.parametrize("norm_first", [False, True], ids=["marian", "pegasus"])
def test_generate_agrees_with_our_greedy_and_beam_search(norm_first):
    # Marian and Pegasus tie their output to the embeddings
    model = _model_that_stops(tie_output=True, norm_first=norm_first)
    marian = to_huggingface(model)
    src = random_tokens(5, 8)
    src[2, 5:] = PAD
    mask = (src != PAD).long()
    kw = dict(max_new_tokens=10, min_new_tokens=1, suppress_tokens=[PAD, BOS],
              decoder_start_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    with torch.no_grad():
        hf_greedy = marian.generate(input_ids=src, attention_mask=mask, num_beams=1,
                                    do_sample=False, **kw)
        hf_beam = marian.generate(input_ids=src, attention_mask=mask, num_beams=4,
                                  do_sample=False, length_penalty=0.6, early_stopping="never",
                                  **kw)

    def strip(row):
        return [t for t in row.tolist()[1:] if t not in (PAD, EOS)]

    ours_greedy = greedy_with(model, src, max_len_a=0, max_len_b=10)
    ours_beam = [h[0].tokens for h in beam_with(
        model, src, beam_size=4, max_len_a=0, max_len_b=10, length_penalty=0.6,
        length_normalization="power", stopping="exact")]  # as early_stopping="never"
    assert [strip(r) for r in hf_greedy] == ours_greedy
    assert [tuple(strip(r)) for r in hf_beam] == ours_beam


@pytest.mark.parametrize("alpha", [0.0, 1.0, 2.0])
def test_generate_stopping_early_is_our_stopping_finished(alpha):
    """generate(early_stopping=True) stops a sentence once it holds as many finished hypotheses
    as beams, as our `stopping: finished` does (and CTranslate2)."""
    model = _model_that_stops(tie_output=True)
    marian = to_huggingface(model)
    src = random_tokens(8, 8)
    src[2, 5:] = PAD
    with torch.no_grad():
        hf = marian.generate(input_ids=src, attention_mask=(src != PAD).long(), num_beams=4,
                             num_return_sequences=2, do_sample=False, length_penalty=alpha,
                             early_stopping=True, max_new_tokens=12, min_new_tokens=1,
                             renormalize_logits=True,  # at the limit </s> is forced for free
                             suppress_tokens=[PAD, BOS], decoder_start_token_id=BOS,
                             eos_token_id=EOS, pad_token_id=PAD)
    ours = beam_with(model, src, beam_size=4, nbest=2, max_len_a=0, max_len_b=12,
                     length_penalty=alpha, length_normalization="power", stopping="finished",
                     renormalize=True)
    theirs = [tuple(t for t in row.tolist()[1:] if t not in (PAD, EOS)) for row in hf]
    assert theirs == [h.tokens for hypotheses in ours for h in hypotheses]
    assert len({len(t) for t in theirs}) > 2  # finished at different lengths


def test_models_hugging_face_cannot_express_are_refused():
    with pytest.raises(UserError, match="layer_norm_eps"):
        to_huggingface(small_model(tie_output=True, layer_norm_eps=1e-6))
    with pytest.raises(UserError, match="tied"):
        to_huggingface(small_model(tie_output=False))
