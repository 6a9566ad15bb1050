"""What of a text is translated and how the translations are put back: plain text line by line,
HTML the text between the tags, the markup kept as it was; within a line (or between tags),
sentence by sentence when a `Splitter` is given, with the text's own spacing between them."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass

from transduce.documents.sentences import cut_to_fit, sentence_spans

_MARKUP = re.compile(r"(<!--.*?-->|<![^>]*>|<\?[^>]*>|</?[A-Za-z][^>]*>)", re.S)
_TAG_NAME = re.compile(r"<\s*(/?)\s*([A-Za-z][\w:-]*)")
_UNTRANSLATED = {"script", "style", "code", "pre", "textarea", "noscript"}  # content kept
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

    def join(self, translations: list[str]) -> str:
        """The text with `translations` (one per sentence, in order) in place."""
        parts = list(self.parts)
        for i, translation in zip(self.sentences, translations, strict=True):
            parts[i] = html.escape(translation, quote=False) if self.escape else translation
        return "".join(parts)

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
    """The text between tags translated (sentence by sentence, by `splitter`), entities read as
    characters and the translations escaped; tags, comments, and the content of script, style,
    code and pre kept as they are."""
    pieces = Pieces([], {}, escape=True)
    kept: str | None = None  # inside an element whose content is kept
    for n, part in enumerate(_MARKUP.split(markup)):
        if n % 2:  # markup
            pieces.parts.append(part)
            tag = _TAG_NAME.match(part)
            if tag and not part.endswith("/>"):
                name = tag[2].lower()
                if not tag[1] and kept is None and name in _UNTRANSLATED:
                    kept = name
                elif tag[1] and name == kept:
                    kept = None
            continue
        if kept is not None:
            pieces.parts.append(part)
            continue
        pieces.add(part, splitter, translated=html.unescape(part))
    return pieces
