"""Validation: loss and perplexity under teacher forcing, BLEU of searched translations."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sacrebleu
import torch

from transduce.data.batching import TokenBatches, collate
from transduce.data.binarize import TokenizedCorpus
from transduce.data.tokenizer import Tokenizers
from transduce.decoding.config import DecodeConfig
from transduce.decoding.search import search
from transduce.model.transformer import Transformer
from transduce.training.loss import label_smoothed_cross_entropy, nll_loss

# sacreBLEU's metrics as validation computes them (cased, detokenized output). force: an early
# model's "word ." is no tokenized test set, which sacreBLEU would warn about at every validation
METRICS = (sacrebleu.BLEU(force=True), sacrebleu.CHRF(), sacrebleu.TER(case_sensitive=True))


def signatures() -> str:
    """The metrics' sacreBLEU signatures, to reproduce validation's scores with sacrebleu."""
    return ", ".join(f"{name} {m.get_signature()}"
                     for name, m in zip(("BLEU", "chrF", "TER"), METRICS, strict=True))


@dataclass
class Validation:
    loss: float  # label-smoothed, per target token
    nll: float  # per target token
    bleu: float | None  # sacreBLEU on detokenized output
    chrf: float | None = None  # sacreBLEU's chrF: character n-grams, meaningful for one word
    exact: float | None = None  # share of translations equal to their reference
    ter: float | None = None  # sacreBLEU's TER: edits per reference word, %; lower is better
    hypotheses: list[str] | None = None
    pairs: dict[str, Validation] | None = None  # data.valid_corpora: each pair's own

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.nll, 100.0))

    @classmethod
    def mean(cls, pairs: dict[str, Validation]) -> Validation:
        """The validation of several language pairs: the mean of each of their measures."""
        def mean(name: str) -> float | None:
            values = [getattr(result, name) for result in pairs.values()]
            return None if None in values else sum(values) / len(values)
        return cls(mean("loss"), mean("nll"), mean("bleu"), mean("chrf"), mean("exact"),
                   mean("ter"), pairs=pairs)


@torch.no_grad()
def validate(model: Transformer, data: TokenizedCorpus, references: list[str] | None,
             tokenizers: Tokenizers, *, max_tokens: int, label_smoothing: float,
             decode: DecodeConfig, device: torch.device, autocast) -> Validation:
    """Loss on every validation pair; BLEU against `references` (one per pair) when given."""
    was_training = model.training
    model.eval()
    batches = TokenBatches.of(data, max_tokens, shuffle=False).epoch(0)
    loss = nll = tokens = 0.0
    for ids in batches:
        batch = collate(data, ids, tokenizers.specials).to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in)
        loss += label_smoothed_cross_entropy(logits, batch.tgt_out, epsilon=label_smoothing,
                                             ignore_index=model.config.pad_id).item()
        nll += nll_loss(logits, batch.tgt_out, ignore_index=model.config.pad_id).item()
        tokens += batch.n_tgt_tokens
    result = Validation(loss / tokens, nll / tokens, None)
    if references is not None:
        hypotheses = translate_corpus(model, data, tokenizers, decode=decode, device=device,
                                      autocast=autocast)
        result.hypotheses = hypotheses
        result.bleu, result.chrf, result.ter = (metric.corpus_score(hypotheses, [references]).score
                                                for metric in METRICS)
        result.exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / max(
            len(references), 1)
    model.train(was_training)
    return result


def translate_corpus(model: Transformer, data: TokenizedCorpus, tokenizers: Tokenizers, *,
                     decode: DecodeConfig, device: torch.device, autocast) -> list[str]:
    """Detokenized translations of every source of `data`, searched as `decode` says (greedy
    when decode.beam_size is 1, as for the usual validation BLEU), in corpus order."""
    out: list[str | None] = [None] * len(data)
    batches = TokenBatches(data.src_lengths, np.zeros_like(data.src_lengths), decode.max_tokens,
                           shuffle=False).epoch(0)
    for ids in batches:
        batch = collate(data, ids, tokenizers.specials).to(device)
        with autocast():
            outputs = [hyps[0].tokens for hyps in search(model, batch.src, decode)]
        for i, tokens in zip(ids.tolist(), outputs, strict=True):
            out[i] = tokenizers.tgt.decode(tokens)
    return out
