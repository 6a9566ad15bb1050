"""What of a text is translated and how the translations are put back: plain text line by line,
HTML the text between block tags (inline elements, `<b>`, `<a>`, ..., inside the text: put back
by word alignments, transduce.documents.inline), the markup kept as it was; within a line (or
between tags), sentence by sentence when a `Splitter` is given, with the text's own spacing
between them."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from transduce.documents.inline import Mark, render
from transduce.documents.sentences import cut_to_fit, sentence_spans

_MARKUP = re.compile(r"(<!--.*?-->|<![^>]*>|<\?[^>]*>|</?[A-Za-z][^>]*>)", re.S)
_TAG_NAME = re.compile(r"<\s*(/?)\s*([A-Za-z][\w:-]*)")
_UNTRANSLATED = {"script", "style", "code", "pre", "textarea", "noscript"}  # content kept
_INLINE = {"a", "abbr", "b", "bdi", "bdo", "cite", "data", "del", "dfn", "em", "font", "i", "ins",
           "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time",
           "u", "var"}  # their text is part of the sentence around them
_VOID_INLINE = {"img", "wbr"}  # ... and these stand between its words
_WORD = re.compile(r"\w", re.UNICODE)
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Splitter:
    """How a stretch of text becomes what is translated: its sentences in `language` (None:
    the stretch whole), each cut where it pauses until `fits` it (the model's length limit;
    None: no limit)."""

    language: str | None = None
    fits: Callable[[str], bool] | None = None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of each piece of `text` (stripped) to translate, in order."""
        spans = (sentence_spans(text, self.language) if self.language
                 else [(len(text) - len(text.lstrip()), len(text.rstrip()))])
        if self.fits is None:
            return spans
        return [(start + a, start + b) for start, end in spans
                for a, b in cut_to_fit(text[start:end], self.fits)]


WHOLE = Splitter()  # a line (or the text between two tags) as one sentence


@dataclass
class Pieces:
    """A text cut into pieces, some of which (`sentences`, by index) are to be translated."""

    parts: list[str]
    sentences: dict[int, str]  # part index -> the text to translate
    escape: bool = False  # the translations go into HTML
    marks: dict[int, list[Mark]] = field(default_factory=dict)  # part index -> inline markup

    def join(self, translations: list[str],
             alignments: list[list[tuple[int, int]] | None] | None = None) -> str:
        """The text with `translations` (one per sentence, in order) in place; a sentence's
        inline markup put back by its word `alignments` (one list per sentence; None: in
        proportion)."""
        parts = list(self.parts)
        for n, (i, translation) in enumerate(zip(self.sentences, translations, strict=True)):
            if i in self.marks:
                links = alignments[n] if alignments is not None else None
                parts[i] = render(self.sentences[i], translation, self.marks[i], links)
            else:
                parts[i] = html.escape(translation, quote=False) if self.escape else translation
        return "".join(parts)

    @property
    def marked(self) -> list[bool]:
        """Whether each sentence holds inline markup (its alignments are worth computing)."""
        return [i in self.marks for i in self.sentences]

    def add(self, text: str, splitter: Splitter, translated: str | None = None) -> None:
        """Append `text`, its sentences to translate (`translated`, when given: what to
        translate instead of the text itself, as HTML's unescaped text), the rest kept."""
        source = text if translated is None else translated
        if not _WORD.search(source):
            self.parts.append(text)
            return
        if translated is not None:  # HTML: the text's spacing around one whitespace-folded run
            lead, trail = text[:len(text) - len(text.lstrip())], text[len(text.rstrip()):]
            self.parts.append(lead)
            folded = " ".join(source.split())
            at = 0
            for start, end in splitter.spans(folded):
                if start > at:
                    self.parts.append(folded[at:start])
                self.sentences[len(self.parts)] = folded[start:end]
                self.parts.append("")
                at = end
            self.parts.extend([folded[at:].strip(), trail])
            return
        at = 0
        for start, end in splitter.spans(text):
            self.parts.append(text[at:start])
            self.sentences[len(self.parts)] = text[start:end]
            self.parts.append(text[start:end])
            at = end
        self.parts.append(text[at:])


def plain_text(text: str, splitter: Splitter = WHOLE) -> Pieces:
    """Each line with a word in it translated (sentence by sentence, by `splitter`); its
    surrounding spaces, the spaces between its sentences, the blank lines and the line ends
    kept. (Line ends normalised to \\n first, as LibreTranslate does.)"""
    pieces = Pieces([], {})
    for n, line in enumerate(_LINE_END.split(text)):
        if n:
            pieces.parts.append("\n")
        pieces.add(line, splitter)
    return pieces


def html_text(markup: str, splitter: Splitter = WHOLE) -> Pieces:
    """The text between block tags translated (sentence by sentence, by `splitter`), entities
    read as characters and the translations escaped; inline elements inside the text (`_INLINE`,
    `_VOID_INLINE`) put back around the words they hold (`Pieces.join`'s alignments); other
    tags, comments, and the content of script, style, code and pre kept as they are."""
    pieces = Pieces([], {}, escape=True)
    kept: str | None = None  # inside an element whose content is kept
    run: list = []  # text and inline tags since the last other tag
    carried: list[tuple[str, str]] = []  # inline elements left open by the runs before
    for n, part in enumerate(_MARKUP.split(markup)):
        if not n % 2:  # text
            if kept is not None:
                pieces.parts.append(part)
            elif part:
                run.append(part)
            continue
        tag = _TAG_NAME.match(part)
        name = tag[2].lower() if tag else ""
        if kept is None and (name in _INLINE or name in _VOID_INLINE):
            run.append(_Tag(part, name, closing=bool(tag[1]),
                            void=name in _VOID_INLINE or part.endswith("/>")))
            continue
        carried = _add_run(pieces, run, splitter, carried)
        run = []
        pieces.parts.append(part)
        if tag and not part.endswith("/>"):
            if not tag[1] and kept is None and name in _UNTRANSLATED:
                kept = name
            elif tag[1] and name == kept:
                kept = None
    _add_run(pieces, run, splitter, carried)
    return pieces


@dataclass(frozen=True)
class _Tag:
    markup: str
    name: str
    closing: bool
    void: bool


@dataclass
class _Element:
    open: str  # "" where it was opened before this run
    name: str
    start: int
    end: int | None = None
    close: str = ""  # "" where it is not closed in this run, or closed without a tag
    closed: bool = False  # in this run
    parent: int | None = None


def _add_run(pieces: Pieces, run: list, splitter: Splitter,
             carried: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Add a run of text and inline tags (a paragraph's, say) to `pieces`: its sentences, each
    with the inline elements it holds as marks. `carried`: the (opening tag, name) of elements
    left open by the runs before; returns those this run leaves open."""
    text = "".join(html.unescape(item) for item in run if isinstance(item, str))
    if not _WORD.search(text):  # nothing to translate: kept as it is
        pieces.parts.extend(item if isinstance(item, str) else item.markup for item in run)
        return _still_open(run, carried)
    # the text whitespace-folded, and where each tag stands in it
    lead, trail = len(text) - len(text.lstrip()), len(text.rstrip())
    folded, at = [], [0] * (len(text) + 1)
    for k, char in enumerate(text):
        at[k] = len(folded)
        if lead <= k < trail and not (char.isspace() and folded and folded[-1] == " "):
            folded.append(" " if char.isspace() else char)
    at[len(text)] = len(folded)
    folded = "".join(folded)
    elements = [_Element("", name, 0) for _, name in carried]
    for k in range(1, len(elements)):
        elements[k].parent = k - 1
    stack, opening = list(range(len(elements))), {k: markup for k, (markup, _) in
                                                   enumerate(carried)}
    position = 0
    for item in run:
        if isinstance(item, str):
            position += len(html.unescape(item))
            continue
        where = at[position]
        if item.void:
            elements.append(_Element(item.markup, item.name, where, where, closed=True,
                                     parent=stack[-1] if stack else None))
        elif not item.closing:
            elements.append(_Element(item.markup, item.name, where,
                                     parent=stack[-1] if stack else None))
            stack.append(len(elements) - 1)
            opening[len(elements) - 1] = item.markup
        else:
            match = next((k for k in reversed(stack) if elements[k].name == item.name), None)
            if match is None:  # closes what no run opened: kept where it is, as an empty mark
                elements.append(_Element("", item.name, where, where, item.markup, True,
                                         stack[-1] if stack else None))
                continue
            while stack[-1] != match:  # closed by its parent's closing tag, without its own
                inner = elements[stack.pop()]
                inner.end, inner.closed = where, True
            elements[stack.pop()].end, elements[match].closed = where, True
            elements[match].close = item.markup
    for k in stack:
        elements[k].end = len(folded)
    pieces.parts.append(text[:lead])
    sentences = splitter.spans(folded)
    places = [_sentences_of(e, sentences) for e in elements]
    done = 0
    for number, (start, end) in enumerate(sentences):
        if start > done:
            pieces.parts.append(folded[done:start])
        index = len(pieces.parts)
        pieces.sentences[index] = folded[start:end]
        pieces.parts.append("")
        marks, mine = [], {}
        for k, element in enumerate(elements):
            if number not in places[k]:
                continue
            a = min(max(element.start, start), end) - start
            b = max(min(element.end, end) - start, a)
            first, last = number == places[k][0], number == places[k][-1]
            parent = element.parent
            while parent is not None and parent not in mine:
                parent = elements[parent].parent
            mine[k] = len(marks)
            marks.append(Mark(a, b, element.open if first else opening[k],
                              element.close if last else f"</{element.name}>",
                              None if parent is None else mine[parent]))
        if marks:
            pieces.marks[index] = marks
        done = end
    pieces.parts.extend([folded[done:].strip(), text[trail:]])
    return [(opening[k], elements[k].name) for k in stack]


def _sentences_of(element: _Element, sentences: list[tuple[int, int]]) -> list[int]:
    """The sentences (by number) an element's characters are in; one without any (an <img>,
    or only spaces between sentences) goes with the sentence it stands before, else the last."""
    low, high = element.start, element.end
    numbers = [n for n, (start, end) in enumerate(sentences) if low < end and high > start]
    if numbers and low < high:
        return numbers
    return [next((n for n, (_, end) in enumerate(sentences) if low <= end), len(sentences) - 1)]


def _still_open(run: list, carried: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The inline elements open after a run without words: those carried in, as its tags
    open and close them."""
    open_now = list(carried)
    for item in run:
        if isinstance(item, str) or item.void:
            continue
        if not item.closing:
            open_now.append((item.markup, item.name))
        else:
            for k in range(len(open_now) - 1, -1, -1):
                if open_now[k][1] == item.name:
                    del open_now[k:]
                    break
    return open_now
