import pytest
import torch

from transduce.data.numbers import NumberWords
from transduce.data.tokenizer import Tokenizers
from transduce.model import ModelConfig, Transformer

from ..conftest import beam_with, greedy_with, random_tokens
from ..decoding.test_greedy import _model_that_stops
from .test_marian import EOS

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_ctranslate2_translates_like_our_search(tmp_path, norm_first):
    from transduce.export.ctranslate2 import save_ctranslate2

    corpus = NumberWords("train", sizes=(2000, 10, 10))
    tokenizers = Tokenizers.train(corpus.pairs, vocab_size=300)
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=300, tgt_vocab_size=300,
                                           d_model=32, d_ff=48, n_heads=2,
                                           n_encoder_layers=2, n_decoder_layers=2,
                                           norm_first=norm_first)).eval()
    with torch.no_grad():  # make <eos> likely somewhere, so outputs end at different lengths
        model.output.weight[EOS] = 1.01 * model.output.weight[200]
    out = save_ctranslate2(model, tokenizers, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    sources = [s for s, _ in list(corpus.pairs())[:12]]
    ids = [tokenizers.src.encode(s) + [EOS] for s in sources]
    pieces = [tokenizers.src.pieces(i) for i in ids]
    width = max(map(len, ids))
    src = torch.tensor([i + [1] * (width - len(i)) for i in ids])

    greedy = translator.translate_batch(pieces, beam_size=1, max_decoding_length=12)
    ours = greedy_with(model, src, max_len_a=0, max_len_b=12)
    assert [tokenizers.tgt.pieces(o) for o in ours] == [r.hypotheses[0] for r in greedy]

    beam = translator.translate_batch(pieces, beam_size=3, max_decoding_length=12,
                                      length_penalty=0.0)
    ours_beam = [h[0].tokens for h in beam_with(model, src, beam_size=3, max_len_a=0,
                                                  max_len_b=12, length_penalty=0.0)]
    same = sum(tokenizers.tgt.pieces(o) == r.hypotheses[0] for o, r in zip(ours_beam, beam,
                                                                           strict=True))
    assert same >= 11  # CTranslate2's own stopping rule may rarely pick another hypothesis


def test_ctranslate2s_beam_search_is_ours_with_its_stopping_rule(tmp_path):
    """`stopping: finished` is CTranslate2's rule: the same n-best, scored the same, where
    `early` parts from it (renormalize: CTranslate2 never outputs <pad> or <bos>, whose
    probabilities the export sets to 0, so its log-probabilities are over the other tokens)."""
    from transduce.export.ctranslate2 import save_ctranslate2

    tokenizers = Tokenizers.train(NumberWords("train", sizes=(2000, 10, 10)).pairs,
                                  vocab_size=300)
    model = _model_that_stops(tie_output=True, src_vocab_size=300, tgt_vocab_size=300,
                              max_positions=128)
    translator = ctranslate2.Translator(str(save_ctranslate2(model, tokenizers, tmp_path)),
                                        device="cpu", intra_threads=1)
    src = random_tokens(24, 8)
    src[:, -1] = EOS
    pieces = [tokenizers.src.pieces(row.tolist()) for row in src]
    parted = 0
    for alpha in (0.6, 1.0, 2.0):
        theirs = translator.translate_batch(pieces, beam_size=4, num_hypotheses=2,
                                            length_penalty=alpha, max_decoding_length=100,
                                            min_decoding_length=1, return_scores=True)
        settings = dict(beam_size=4, nbest=2, max_len_a=0, max_len_b=100, length_penalty=alpha,
                        length_normalization="power", renormalize=True)
        ours = beam_with(model, src, stopping="finished", **settings)
        assert [[tokenizers.tgt.pieces(h.tokens) for h in hyps] for hyps in ours] == \
            [r.hypotheses for r in theirs]
        assert [h.score for hyps in ours for h in hyps] == pytest.approx(
            [s for r in theirs for s in r.scores], abs=1e-4)
        assert max(len(hyps[0].tokens) for hyps in ours) < 100  # all ended before the limit
        early = beam_with(model, src, stopping="early", **settings)
        parted += sum(a != b for a, b in zip(early, ours, strict=True))
    assert parted > 0  # the rules differ here
