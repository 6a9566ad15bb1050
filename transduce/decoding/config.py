"""The `decode` section of a configuration: how to search for translations."""

from __future__ import annotations

from dataclasses import dataclass, fields

from transduce.errors import UserError
from transduce.fields import setting

STOPPING = ("early", "exact", "finished")  # beam search's stopping rules (decoding.beam)
DTYPES = ("float32", "bfloat16", "float16", "int8")  # what a Translator may decode in
LENGTH_NORMALIZATIONS = ("gnmt", "power")


@dataclass(frozen=True)
class DecodeConfig:
    """How to search for translations (validation BLEU, translate, evaluate)."""

    beam_size: int = setting(4, "hypotheses kept per sentence (1: greedy search)")
    length_penalty: float = setting(0.6,
        "GNMT's alpha: scores are divided by ((5 + |y|) / 6)^alpha")
    length_normalization: str = setting("gnmt",
        "'gnmt' as above, or 'power': scores divided by |y|^alpha (Hugging Face, "
        "CTranslate2)")
    stopping: str = setting("early",
        "when a sentence's beam search ends, once it holds its n-best finished hypotheses: "
        "'early' when no live beam scores better than the worst of them at its current length "
        "(close to Hugging Face generate()'s default); 'exact' only when no live beam could beat "
        "it even at the maximum length (provably the best under the length penalty; about "
        "twice as long); 'finished' once beam_size hypotheses have finished, whatever their "
        "scores (CTranslate2's rule, fairseq's, generate(early_stopping=True))")
    max_len_a: float = setting(1.0, "an output has at most a * source length + b tokens")
    max_len_b: int = setting(50, "... (b of the limit above)")
    min_len: int = setting(1, "tokens before <eos> is allowed")
    renormalize: bool = setting(False,
        "beam scores from log-probabilities renormalised over the tokens each step allows (never "
        "<pad> or <bos>; not <eos> before min_len; only <eos> at the length limit), as Hugging "
        "Face with renormalize_logits (OPUS-MT's setting); false: the model's own "
        "log-probabilities")
    max_tokens: int = setting(8192, "source tokens per translation batch")

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise UserError(f"decode.beam_size must be >= 1, got {self.beam_size}")
        if self.max_len_a < 0 or self.max_len_b < 0 or self.min_len < 0:
            raise UserError("decode.max_len_a, decode.max_len_b and decode.min_len must be >= 0")
        if self.max_tokens < 1:
            raise UserError(f"decode.max_tokens must be >= 1, got {self.max_tokens}")
        if self.length_normalization not in LENGTH_NORMALIZATIONS:
            raise UserError(f"decode.length_normalization must be 'gnmt' or 'power', got "
                            f"{self.length_normalization!r}")
        if self.stopping not in STOPPING:
            raise UserError(f"decode.stopping must be one of {', '.join(STOPPING)}, got "
                            f"{self.stopping!r}")


FIELDS = tuple(f.name for f in fields(DecodeConfig))  # each a search setting, by its name


@dataclass(frozen=True)
class Sampling:
    """Draw each next token instead of searching (e.g. for back-translation)."""

    temperature: float = setting(1.0, "divides the logits")
    top_k: int = setting(0, "draw from the k likeliest tokens (0: all)")
    top_p: float = setting(1.0,
        "... or from the likeliest tokens holding this much probability (nucleus)")
    seed: int | None = setting(None, "the random seed, for the same draws again")

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise UserError(f"sampling.temperature must be positive, got {self.temperature}")
        if self.top_k < 0:
            raise UserError(f"sampling.top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise UserError(f"sampling.top_p must be in (0, 1], got {self.top_p}")


SAMPLING_FIELDS = tuple(f.name for f in fields(Sampling))
