"""Sentences of a paragraph, found by spaCy's rule-based sentencizer over the language's own
tokenizer: its abbreviations ("Dr.", "z. B.") do not end a sentence, and every sentence is a
span of the text, so what lies between sentences is kept exactly (docs/serving.md says why this
one). A sentence too long for the model is cut where it pauses, never truncated."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

_PAUSES = (re.compile(r"[;:]\s"), re.compile(r"[,)\]–—]\s"), re.compile(r"\s"))


@functools.cache
def _pipeline(language: str):
    import spacy

    try:
        nlp = spacy.blank(language)
    except ImportError:  # a language spaCy has no rules for: its multi-language ones
        nlp = spacy.blank("xx")
    nlp.add_pipe("sentencizer")
    return nlp


def sentence_spans(text: str, language: str) -> list[tuple[int, int]]:
    """The (start, end) of each sentence of `text`, in order, without surrounding space."""
    spans: list[tuple[int, int]] = []
    for sentence in _pipeline(language.lower())(text).sents:
        start, end = sentence.start_char, sentence.end_char
        core = text[start:end]
        start += len(core) - len(core.lstrip())
        end -= len(core) - len(core.rstrip())
        if start < end:
            spans.append((start, end))
    return spans


def cut_to_fit(sentence: str, fits: Callable[[str], bool]) -> list[tuple[int, int]]:
    """`sentence` as (start, end) parts that each `fits`: whole if it fits, else cut at the
    pause nearest its middle (a semicolon or colon, else a comma, dash or bracket, else a space,
    else anywhere), and each half likewise."""
    if fits(sentence) or len(sentence) < 2:
        return [(0, len(sentence))]
    middle = len(sentence) // 2
    cut = middle
    for pause in _PAUSES:
        ends = [m.end() for m in pause.finditer(sentence) if 0 < m.end() < len(sentence)]
        if ends:
            cut = min(ends, key=lambda end: abs(end - middle))
            break
    head, tail = sentence[:cut].rstrip(), sentence[cut:]
    parts = cut_to_fit(head, fits)
    skipped = len(tail) - len(tail.lstrip())
    parts += [(cut + skipped + a, cut + skipped + b)
              for a, b in cut_to_fit(tail.strip(), fits)]
    return parts
