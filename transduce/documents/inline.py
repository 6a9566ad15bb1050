"""Inline markup carried into a translation by word alignments.

A sentence of HTML may hold inline elements (`<b>`, `<a href=...>`, `<em>`, an `<img>`): the
sentence is translated as one text, without them, and each element is put back around the
words of the translation that the word alignments (transduce.decoding.alignment) link to the
words it held. Elements stay well nested: a child within its parent's words, siblings in order
without crossing; one holding the start (or the end) of its sentence holds the start (the end)
of the translation. An element whose words are aligned with none is put back empty where its
first word would go; an element without words (an `<img>`) before the translation of the word it
stood before. Without alignments, words are mapped in proportion (the i-th of n source words to
the (i * m / n)-th of m).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

_WORDS = re.compile(r"\S+")


@dataclass(frozen=True)
class Mark:
    """An inline element within a sentence: the characters [start, end) it holds (start ==
    end: none, as an <img>), its opening and closing markup ("" where the source has none here:
    opened before the sentence, or closed after it), and the index among the sentence's marks of
    the one it is inside (None: none). Marks come parents first."""

    start: int
    end: int
    open: str
    close: str
    parent: int | None = None


def render(source: str, translation: str, marks: list[Mark],
           alignments: list[tuple[int, int]] | None) -> str:
    """`translation` (of `source`) as HTML: its words escaped, single-spaced, with `marks` put
    around the words aligned with theirs (`alignments`: source word, target word pairs over
    the whitespace-separated words; None: in proportion)."""
    source_words = [(m.start(), m.end()) for m in _WORDS.finditer(source)]
    words = translation.split()
    n, m = len(source_words), len(words)
    if alignments is None:
        alignments = [(i, i * m // n) for i in range(n)] if n and m else []
    targets: dict[int, set[int]] = {}
    for i, j in alignments:
        if 0 <= j < m:
            targets.setdefault(i, set()).add(j)
    spans: list[tuple[int, int]] = []  # each mark's target words [a, b); a == b: empty, at a
    for mark in marks:
        held = [i for i, (s, e) in enumerate(source_words) if s < mark.end and e > mark.start]
        linked = sorted(j for i in held for j in targets.get(i, ()))
        if linked:
            a, b = linked[0], linked[-1] + 1
        else:  # where the first word at or after it goes
            after = [i for i, (s, _) in enumerate(source_words) if s >= mark.start]
            a = b = min((j for i in after for j in targets.get(i, ())), default=m)
        if held and held[0] == 0 and held[-1] == n - 1:  # the whole sentence: all of it
            a, b = 0, m
        if held and not mark.open:  # opened before the sentence: from its start
            a = 0
        if held and not mark.close:  # closed after it (or without a tag): to its end
            b = max(b, m)
        a, b = _within(spans, marks, mark, a, b)
        spans.append((a, b))
    return _html(words, marks, spans, None, 0, m)


def _within(spans: list[tuple[int, int]], marks: list[Mark], mark: Mark, a: int, b: int
            ) -> tuple[int, int]:
    """[a, b) made to nest: inside the parent's span, after the siblings placed before it."""
    low, high = spans[mark.parent] if mark.parent is not None else (0, 1 << 30)
    a, b = min(max(a, low), high), max(min(b, high), low)
    for other, (c, d) in zip(marks, spans, strict=False):  # the siblings placed so far
        if other.parent == mark.parent and c < d and a < b and c < b and a < d:
            a = d
            b = max(a, b)
    return min(a, high), min(b, high)


def _html(words: list[str], marks: list[Mark], spans: list[tuple[int, int]],
          parent: int | None, a: int, b: int) -> str:
    """Words [a, b) with the marks inside `parent` (None: all at the top) as HTML."""
    children = sorted((spans[k][0], spans[k][1] > spans[k][0], k) for k, mark in enumerate(marks)
                      if mark.parent == parent)
    out, at, pending = [], a, ""
    for start, has_words, k in children:
        while at < start:
            out.append(pending + html.escape(words[at], quote=False))
            pending, at = "", at + 1
        end = spans[k][1]
        inner = marks[k].open + _html(words, marks, spans, k, start, end) + marks[k].close
        if has_words:
            out.append(pending + inner)
            pending, at = "", end
        else:  # no words: before the next word
            pending += inner
    while at < b:
        out.append(pending + html.escape(words[at], quote=False))
        pending, at = "", at + 1
    text = " ".join(out)
    return text + pending
