import math

import pytest
import torch

from transduce.decoding.beam import _in_parents_rows, length_penalty

from ..conftest import beam_with, draw_with, greedy_with, random_tokens, small_model
from .test_greedy import _model_that_stops

PAD, BOS, EOS = 1, 2, 3


def _batch(n=6, length=8):
    src = random_tokens(n, length)
    for i in range(1, n, 2):
        src[i, length // 2 + i % 3 :] = PAD
    return src


def test_beam_size_one_equals_greedy():
    model = _model_that_stops()
    src = _batch()
    greedy = greedy_with(model, src, max_len_a=0, max_len_b=12)
    beam = beam_with(model, src, beam_size=1, length_penalty=0.6, max_len_a=0,
                       max_len_b=12)
    assert [h[0].tokens for h in beam] == [tuple(g) for g in greedy]


@pytest.mark.parametrize("k", [2, 4])
def test_cached_equals_uncached(k):
    model = _model_that_stops()
    src = _batch()
    kw = dict(beam_size=k, max_len_a=0, max_len_b=10, nbest=k)
    cached = beam_with(model, src, **kw)
    uncached = beam_with(model, src, use_cache=False, **kw)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]
    for a, b in zip(cached, uncached, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-4)


def test_batch_invariance_alone_in_64_and_with_other_neighbours():
    model = _model_that_stops()
    src = _batch(64, 10)
    kw = dict(beam_size=4, max_len_a=0, max_len_b=10)
    in_64 = [h[0].tokens for h in beam_with(model, src, **kw)]
    alone = [beam_with(model, src[i : i + 1, : int((src[i] != PAD).sum())], **kw)[0][0].tokens
             for i in range(0, 64, 7)]
    assert alone == in_64[::7]
    shuffled = torch.randperm(64)
    wider = torch.cat([src[shuffled[:16]], torch.full((16, 5), PAD)], dim=1)  # more padding
    other = [h[0].tokens for h in beam_with(model, wider, **kw)]
    assert other == [in_64[i] for i in shuffled[:16].tolist()]


def test_scores_are_length_normalised_log_probabilities_sorted_best_first():
    model = _model_that_stops()
    src = _batch(3)
    results = beam_with(model, src, beam_size=4, nbest=4, max_len_a=0, max_len_b=10,
                          length_penalty=0.6)
    for row, hyps in enumerate(results):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:  # rescore each hypothesis with teacher forcing
            tgt = torch.tensor([[BOS, *h.tokens]])
            gold = torch.tensor([[*h.tokens, EOS]])
            src_row = src[row : row + 1, : int((src[row] != PAD).sum())]
            log_p = model(src_row, tgt).log_softmax(-1).gather(2, gold[..., None]).sum().item()
            assert h.log_prob == pytest.approx(log_p, abs=1e-4)
            assert h.score == pytest.approx(log_p / length_penalty(len(h.tokens) + 1, 0.6),
                                            abs=1e-4)


class ScriptedModel(torch.nn.Module):
    """A stand-in for the decoder whose next-token probabilities are a fixed table of the
    prefix, so that the best translation is known by hand."""

    def __init__(self, table, vocab=8):
        super().__init__()
        from transduce.model.config import ModelConfig
        self.config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=8,
                                  n_heads=2, d_ff=8, n_encoder_layers=1, n_decoder_layers=1)
        self.table, self.vocab = table, vocab

    def src_mask(self, src):
        return (src != PAD)[:, None, None, :]

    def encode(self, src, src_mask=None):
        return torch.zeros(src.shape[0], src.shape[1], 8)

    def new_cache(self):
        return None

    def decode(self, tgt, memory, src_mask, cache=None):
        rows = []
        for prefix in tgt.tolist():
            probs = dict(self.table.get(tuple(prefix[1:]), {EOS: 1.0}))
            p = torch.full((self.vocab,), 1e-9)
            for token, value in probs.items():
                p[token] = value
            rows.append(p.log())
        return torch.stack(rows)[:, None, :]

    def decode_next(self, tgt, memory, src_mask, cache=None, out=None):
        logits = self.decode(tgt, memory, src_mask, cache)[:, -1]
        return logits if out is None else out.copy_(logits)

    def steps(self, src, *, use_cache=True):  # a Searchable: the model's steps over the table
        from transduce.model.steps import DecoderSteps

        return DecoderSteps(self, src, use_cache=use_cache)


A, B, C = 4, 5, 6
# greedy takes A (0.6) then must end badly; the best sentence starts with B (0.4)
TABLE = {(): {A: 0.6, B: 0.4}, (A,): {C: 0.3, EOS: 0.3, A: 0.4}, (A, A): {EOS: 0.5, C: 0.5},
         (B,): {EOS: 0.95, C: 0.05}, (A, C): {EOS: 1.0}, (B, C): {EOS: 1.0},
         (A, A, C): {EOS: 1.0}}


def test_the_best_hypothesis_is_returned_not_the_greedy_one():
    model = ScriptedModel(TABLE)
    src = torch.tensor([[A, B]])
    best = beam_with(model, src, beam_size=2, length_penalty=0.0, max_len_a=0,
                       max_len_b=5, use_cache=False)[0][0]
    assert best.tokens == (B,) and best.log_prob == pytest.approx(math.log(0.4 * 0.95))
    assert greedy_with(model, src, max_len_a=0, max_len_b=5, use_cache=False)[0] != [B]


def test_a_beam_wider_than_half_the_vocabulary():
    # each step ranks 2k extensions: with 2k > V some of them do not exist
    model = ScriptedModel(TABLE)
    src = torch.tensor([[A, B]])
    kw = dict(length_penalty=0.0, max_len_a=0, max_len_b=5, use_cache=False)
    wide = beam_with(model, src, beam_size=7, nbest=3, **kw)[0]
    # the three best: (B), then (A) and (A, C), which tie
    assert [h.score for h in wide] == pytest.approx([math.log(0.38)] + 2 * [math.log(0.18)])
    assert wide[0].tokens == (B,) and wide[0].log_prob == pytest.approx(math.log(0.4 * 0.95))


def test_a_longer_hypothesis_that_finishes_later_wins_when_it_is_better():
    # (A, A, C, <eos>) has p = 0.6*0.4*0.5*1 = 0.12 vs (A, <eos>) 0.18 and (B, <eos>) 0.38;
    # with a strong length penalty the long one's normalised score is best
    model = ScriptedModel(TABLE)
    src = torch.tensor([[A, B]])
    plain = beam_with(model, src, beam_size=3, nbest=3, length_penalty=0.0,
                        max_len_a=0, max_len_b=5, use_cache=False)[0]
    assert plain[0].tokens == (B,)
    favour_long = beam_with(model, src, beam_size=3, nbest=3, length_penalty=4.0,
                              max_len_a=0, max_len_b=5, use_cache=False)[0]
    assert favour_long[0].tokens == (A, A, C)
    expected = math.log(0.12) / length_penalty(4, 4.0)
    assert favour_long[0].score == pytest.approx(expected, rel=1e-5)
    assert [h.score for h in favour_long] == sorted((h.score for h in favour_long), reverse=True)


def test_exact_stopping_waits_for_a_beam_that_only_the_length_penalty_can_lift():
    # after one step (B, <eos>) is finished with lp-normalised score -0.276 and (A, C) is live
    # with log p = log 0.4 that can only stay or fall; at its current length it scores -0.290,
    # so early stopping ends there; but (A, C, C, <eos>) keeps p = 0.4 and with alpha = 4 its
    # longer length lifts it to -0.181: exact stopping must wait for it
    table = {(): {B: 0.6, A: 0.4}, (B,): {EOS: 1.0}, (A,): {C: 1.0}, (A, C): {C: 1.0},
             (A, C, C): {EOS: 1.0}}
    model, src = ScriptedModel(table), torch.tensor([[A, B]])
    kw = dict(beam_size=2, length_penalty=4.0, max_len_a=0, max_len_b=5, use_cache=False)
    early = beam_with(model, src, stopping="early", **kw)[0][0]
    exact = beam_with(model, src, stopping="exact", **kw)[0][0]
    assert early.tokens == (B,) and exact.tokens == (A, C, C)
    assert exact.score == pytest.approx(math.log(0.4) / length_penalty(4, 4.0), rel=1e-5)
    assert exact.score > early.score


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_exact_stopping_is_never_worse_than_early_stopping(alpha):
    model = _model_that_stops()
    src = _batch(16, 8)
    kw = dict(beam_size=4, max_len_a=0, max_len_b=12, length_penalty=alpha)
    early = beam_with(model, src, stopping="early", **kw)
    exact = beam_with(model, src, stopping="exact", **kw)
    for e, x in zip(early, exact, strict=True):
        assert x[0].score >= e[0].score - 1e-6


def test_forced_prefix_and_length_limits():
    model = _model_that_stops()
    src = _batch(3)
    prefixes = [[7, 8], [], [9]]
    out = beam_with(model, src, beam_size=3, prefixes=prefixes, max_len_a=0, max_len_b=6)
    for hyps, prefix in zip(out, prefixes, strict=True):
        assert list(hyps[0].tokens[: len(prefix)]) == prefix
        assert len(hyps[0].tokens) <= 6
    greedy = greedy_with(model, src, prefixes=prefixes, max_len_a=0, max_len_b=6)
    for g, prefix in zip(greedy, prefixes, strict=True):
        assert g[: len(prefix)] == prefix
    minimum = beam_with(model, src, beam_size=2, min_len=4, max_len_a=0, max_len_b=6)
    assert all(len(h[0].tokens) >= 4 for h in minimum)


def test_sampling_respects_top_k_and_is_reproducible():
    model = small_model()
    src = random_tokens(4, 6)
    g = torch.Generator().manual_seed(3)
    a = draw_with(model, src, top_k=1, generator=g, max_len_a=0, max_len_b=6)
    assert a == greedy_with(model, src, max_len_a=0, max_len_b=6)  # top-1 sampling is greedy
    b1 = draw_with(model, src, top_p=0.9, generator=torch.Generator().manual_seed(5),
                max_len_a=0, max_len_b=6)
    b2 = draw_with(model, src, top_p=0.9, generator=torch.Generator().manual_seed(5),
                max_len_a=0, max_len_b=6)
    assert b1 == b2


def test_new_beams_stay_in_their_parents_rows_where_they_can():
    torch.manual_seed(0)
    k = 5
    parent = torch.randint(0, k, (200, k))
    order = _in_parents_rows(parent)
    assert torch.equal(order.sort(1).values, torch.arange(k).expand(200, k))  # a permutation
    placed = parent.gather(1, order)  # the parent of the beam in each row
    for sentence in range(200):
        parents = parent[sentence].tolist()
        for child, p in enumerate(parents):
            row = order[sentence].tolist().index(child)
            if p not in parents[:child]:  # the first child of p is in p's row
                assert row == p
        # only the other children move: one row each, in rows of parents without children
        moved = [r for r in range(k) if placed[sentence, r] != r]
        assert len(moved) == k - len(set(parents))
        assert not set(moved) & set(parents)
