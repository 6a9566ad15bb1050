"""What of a text is translated and how the translations are put back: `format=text` line by
line, `format=html` the text between the tags, the markup kept as it was."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

_MARKUP = re.compile(r"(<!--.*?-->|<![^>]*>|<\?[^>]*>|</?[A-Za-z][^>]*>)", re.S)
_TAG_NAME = re.compile(r"<\s*(/?)\s*([A-Za-z][\w:-]*)")
_UNTRANSLATED = {"script", "style", "code", "pre", "textarea", "noscript"}  # content kept
_WORD = re.compile(r"\w", re.UNICODE)
_LINE_END = re.compile(r"\r\n|\r|\n")


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


def plain_text(text: str) -> Pieces:
    """Each line with a word in it, translated on its own; its surrounding spaces, the blank
    lines and the line ends kept. (Line ends normalised to \\n first, as LibreTranslate does.)"""
    parts: list[str] = []
    sentences: dict[int, str] = {}
    for n, line in enumerate(_LINE_END.split(text)):
        if n:
            parts.append("\n")
        core = line.strip()
        if not _WORD.search(core):
            parts.append(line)
            continue
        lead, trail = line[:len(line) - len(line.lstrip())], line[len(line.rstrip()):]
        parts.append(lead)
        sentences[len(parts)] = core
        parts.extend([core, trail])
    return Pieces(parts, sentences)


def html_text(markup: str) -> Pieces:
    """The text between tags translated, entities read as characters and the translations
    escaped; tags, comments, and the content of script, style, code and pre kept as they are."""
    parts: list[str] = []
    sentences: dict[int, str] = {}
    kept: str | None = None  # inside an element whose content is kept
    for n, part in enumerate(_MARKUP.split(markup)):
        if n % 2:  # markup
            parts.append(part)
            tag = _TAG_NAME.match(part)
            if tag and not part.endswith("/>"):
                name = tag[2].lower()
                if not tag[1] and kept is None and name in _UNTRANSLATED:
                    kept = name
                elif tag[1] and name == kept:
                    kept = None
            continue
        text = html.unescape(part)
        if kept is not None or not _WORD.search(text):
            parts.append(part)
            continue
        lead, trail = part[:len(part) - len(part.lstrip())], part[len(part.rstrip()):]
        parts.append(lead)
        sentences[len(parts)] = " ".join(text.split())
        parts.extend(["", trail])
    return Pieces(parts, sentences, escape=True)

