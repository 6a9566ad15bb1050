"""How probable a model finds given translations: each target fed to the search's own steps
(teacher forcing), so that the score of the search's best output is the search's score, for any
`Searchable` (a model, an ensemble, int8 or compiled). For filtering a crawled corpus, ranking
candidate translations, and a translation's confidence."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.decoding.beam import length_penalty
from transduce.decoding.config import DecodeConfig
from transduce.decoding.searchable import Searchable
from transduce.decoding.steps import max_output_lengths


@dataclass(frozen=True)
class PairScore:
    """A target's log-probabilities given its source: each token's (<eos> last), their sum,
    and that sum as the search ranks it (over the length penalty of `DecodeConfig`)."""

    token_log_probs: tuple[float, ...]
    score: float  # log p(y | x) / lp(|y|), |y| counting <eos>: a beam search's hypothesis score

    @property
    def log_prob(self) -> float:
        """log p(y | x), <eos> included."""
        return math.fsum(self.token_log_probs)

    @property
    def per_token(self) -> float:
        """The mean log-probability of its tokens (<eos> included)."""
        return self.log_prob / len(self.token_log_probs)

    @property
    def confidence(self) -> float:
        """exp(per_token): the geometric mean of its tokens' probabilities, in (0, 1]."""
        return math.exp(self.per_token)


@torch.no_grad()
def score(model: Searchable, src: Tensor, targets: list[list[int]],
          decode: DecodeConfig) -> list[PairScore]:
    """The scores of `targets` (token ids without <bos> and <eos>), one per source of src (B, S),
    as a search with `decode` scores them: the model's log-probabilities step by step, under the
    search's rules (no <eos> before decode.min_len tokens, only <eos> at the length limit, which
    a longer target raises as a forced prefix does), renormalised over what they allow where
    decode.renormalize asks, ranked with its length penalty."""
    if len(targets) != src.shape[0]:
        raise ValueError(f"{len(targets)} targets for {src.shape[0]} sources")
    config = model.config
    lengths = [len(t) + 1 for t in targets]  # with <eos>
    width = max(lengths)
    forced = torch.full((len(targets), width), config.eos_id, dtype=torch.long)
    for row, tokens in enumerate(targets):
        forced[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    forced = forced.to(src.device)
    steps = model.steps(src)
    steps.limit(width)  # <bos> and every token but the last
    limits = torch.maximum(max_output_lengths(steps.src_lengths, decode, config.max_positions),
                           torch.tensor(lengths, device=src.device) - 1)
    per_step = []
    for step in range(width):
        log_probs = steps.log_probs()
        if step < decode.min_len:
            log_probs[:, config.eos_id] = float("-inf")
        at_limit = step >= limits
        if at_limit.any():
            log_probs[at_limit] = log_probs[at_limit].masked_fill(
                torch.arange(log_probs.shape[1], device=src.device) != config.eos_id,
                float("-inf"))
        if decode.renormalize:
            log_probs = torch.log_softmax(log_probs, dim=-1)
        per_step.append(log_probs.gather(1, forced[:, step, None]).squeeze(1))
        if step + 1 < width:
            steps.append(forced[:, step])
    table = torch.stack(per_step, dim=1).cpu().tolist()  # (B, width)
    alpha, form = decode.length_penalty, decode.length_normalization
    results = []
    for row, length in zip(table, lengths, strict=True):
        tokens = tuple(row[:length])
        results.append(PairScore(tokens, sum(tokens) / length_penalty(length, alpha, form)))
    return results
