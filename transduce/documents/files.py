"""Files translated in their own format: .txt and .html as `layout` reads text and HTML, .docx
(python-docx) and .odt (odfpy) paragraph by paragraph, every paragraph of the body, tables,
headers and footers. Styles, tables, lists, images and the paragraphs' own formatting stay; a
paragraph's text, translated whole (its sentences one by one), takes the formatting of its first
run, since the words of a translation do not map one to one onto the source's runs.

`read_document(path, splitter)` gives the sentences to translate; `Document.write(translations,
path)` the translated file."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from transduce.documents.layout import WHOLE, Pieces, Splitter, html_text, plain_text
from transduce.errors import UserError

FORMATS = (".txt", ".html", ".htm", ".docx", ".odt")  # what read_document reads


@dataclass
class Document:
    """A file's texts as pieces, and how to save them translated."""

    pieces: list[Pieces]
    save: Callable[[list[str], Path], None] = field(repr=False)  # translated texts, where

    @property
    def sentences(self) -> list[str]:
        return [s for p in self.pieces for s in p.sentences.values()]

    @property
    def marked(self) -> list[bool]:
        """Whether each sentence holds inline markup, which its word alignments put back."""
        return [m for p in self.pieces for m in p.marked]

    def write(self, translations: list[str], path: Path,
              alignments: list[list[tuple[int, int]] | None] | None = None) -> None:
        """The file with `translations` (one per sentence, in order) in place, at `path`; the
        inline markup of a sentence put back by its word `alignments` (None: in proportion)."""
        texts, at = [], 0
        for p in self.pieces:
            texts.append(p.join(translations[at:at + len(p.sentences)],
                                alignments[at:at + len(p.sentences)] if alignments else None))
            at += len(p.sentences)
        if at != len(translations):
            raise ValueError(f"{len(translations)} translations for {at} sentences")
        self.save(texts, path)


def read_document(path: Path, splitter: Splitter = WHOLE) -> Document:
    """The document at `path`, by its extension (FORMATS); a file that is not what its name
    says is a UserError naming it."""
    kind = path.suffix.lower()
    readers = {".txt": _text, ".html": _html, ".htm": _html, ".docx": _docx, ".odt": _odt}
    if kind not in readers:
        raise UserError(f"{path.name}: not a file this server translates ({', '.join(FORMATS)})")
    try:
        return readers[kind](path, splitter)
    except UnicodeDecodeError:
        raise UserError(f"{path.name}: not UTF-8 text") from None
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - a damaged or mislabelled file, in any library
        raise UserError(f"{path.name}: not a readable {kind} file ({type(error).__name__})"
                        ) from None


def _text(path: Path, splitter: Splitter) -> Document:
    raw = path.read_bytes()
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = raw.decode("utf-8-sig")
    newline = "\r\n" if "\r\n" in text else "\n"  # the file's own line ends, written back

    def save(texts: list[str], out: Path) -> None:
        out.write_bytes((b"\xef\xbb\xbf" if bom else b"") +
                        texts[0].replace("\n", newline).encode("utf-8"))
    return Document([plain_text(text, splitter)], save)


def _html(path: Path, splitter: Splitter) -> Document:
    def save(texts: list[str], out: Path) -> None:
        out.write_text(texts[0], encoding="utf-8")
    return Document([html_text(path.read_bytes().decode("utf-8-sig"), splitter)], save)


# -- .docx: WordprocessingML through python-docx ------------------------------------------------

def _docx(path: Path, splitter: Splitter) -> Document:
    import docx
    from docx.oxml.ns import qn

    document = docx.Document(str(path))
    parts, seen = [document.part], {id(document.part)}
    for section in document.sections:
        for story in (section.header, section.footer, section.first_page_header,
                      section.first_page_footer, section.even_page_header,
                      section.even_page_footer):
            if not story.is_linked_to_previous and id(story.part) not in seen:
                seen.add(id(story.part))
                parts.append(story.part)
    paragraph, text_tag = qn("w:p"), qn("w:t")
    units = []  # each paragraph's own w:t elements (not those of a text box inside it)
    for part in parts:
        for p in part.element.iter(paragraph):
            runs = [t for t in p.iter(text_tag) if next(t.iterancestors(paragraph)) is p]
            if runs:
                units.append(runs)
    pieces = [plain_text("".join(t.text or "" for t in runs), splitter) for runs in units]

    def save(texts: list[str], out: Path) -> None:
        for runs, text in zip(units, texts, strict=True):
            runs[0].text = text
            runs[0].set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
            for t in runs[1:]:
                t.text = ""
        document.save(str(out))
    return Document(pieces, save)


# -- .odt: OpenDocument text through odfpy ------------------------------------------------------

_TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_INLINE = {"span", "a"}  # their text is the paragraph's
_CHARACTERS = {"s": " ", "tab": "\t", "line-break": "\n"}


def _odt_text(element) -> tuple[str, list]:
    """A paragraph's own text, and the child nodes that hold it (text, spans, links, spaces)."""
    text, holders = [], []
    for node in element.childNodes:
        if node.nodeType == node.TEXT_NODE:
            text.append(node.data)
            holders.append(node)
        elif node.qname[0] == _TEXT_NS and node.qname[1] in _CHARACTERS:
            count = int(node.getAttrNS(_TEXT_NS, "c") or 1) if node.qname[1] == "s" else 1
            text.append(_CHARACTERS[node.qname[1]] * count)
            holders.append(node)
        elif node.qname[0] == _TEXT_NS and node.qname[1] in _INLINE:
            text.append(_odt_text(node)[0])
            holders.append(node)
    return "".join(text), holders


def _odt(path: Path, splitter: Splitter) -> Document:
    from odf import teletype, text
    from odf.opendocument import load

    document = load(str(path))
    units = []
    for kind in (text.P, text.H):  # body, tables, lists, headers and footers (styles.xml)
        for root in (document.text, document.masterstyles):
            for element in root.getElementsByType(kind):
                content, holders = _odt_text(element)
                if re.search(r"\w", content):
                    units.append((element, holders, content))
    pieces = [plain_text(content.replace("\n", " "), splitter) for _, _, content in units]

    def save(texts: list[str], out: Path) -> None:
        for (element, holders, _), translated in zip(units, texts, strict=True):
            after = holders[-1].nextSibling
            for node in holders:
                _detach(element, node)
            carrier = text.Span()
            teletype.addTextToElement(carrier, translated)  # runs of spaces as text:s
            for node in list(carrier.childNodes):
                _detach(carrier, node)
                if after is not None:
                    element.insertBefore(node, after)
                else:
                    element.appendChild(node)
        document.save(str(out))
    return Document(pieces, save)


def _detach(parent, node) -> None:
    """parent.removeChild(node), for text nodes too (odfpy's asserts an element)."""
    if node.nodeType == node.ELEMENT_NODE:
        parent.removeChild(node)
        return
    parent.childNodes.remove(node)
    if node.nextSibling is not None:
        node.nextSibling.previousSibling = node.previousSibling
    if node.previousSibling is not None:
        node.previousSibling.nextSibling = node.nextSibling
    node.nextSibling = node.previousSibling = node.parentNode = None
