"""A glossary: source terms and the target terms their translations must use.

A source term occurs in a sentence where it stands as whole words: not inside a longer word
("cat" is not in "cats" or "category"), with any run of whitespace where the term has a space.
Case follows the term ("smart case"): a term written in lower case matches in any case ("apple"
in "Apple pie"), a term with a capital only as written ("Apple" not in "apple pie"). Where terms
overlap, the longest that starts first wins ("New York" over "York" in "New York"). The target
term is produced exactly as written, once however often its source term occurs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from transduce.errors import UserError


@dataclass(frozen=True)
class Match:
    """A source term where a sentence holds it: as written there, its target term, and the
    characters [start, end) it spans."""

    source: str
    target: str
    start: int
    end: int


@dataclass(frozen=True)
class TermCheck:
    """Whether a translation holds a term: `found`, and `aligned` (None: not asked) with the
    source term's words; `source_words` and `target_words` (the first occurrence) by index
    over the whitespace-separated words."""

    source: str
    target: str
    found: bool
    aligned: bool | None
    source_words: list[int]
    target_words: list[int]


@dataclass(frozen=True)
class Glossary:
    """(source term, target term) entries, matched on source sentences by `terms`."""

    entries: tuple[tuple[str, str], ...]
    _pattern: re.Pattern | None = field(init=False, repr=False, compare=False)
    _exact: dict[str, str] = field(init=False, repr=False, compare=False)
    _folded: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact, folded, written = {}, {}, []
        for source, target in self.entries:
            term = " ".join(source.split())
            if not term or not target.strip():
                raise UserError(f"glossary entry {source!r} -> {target!r}: both terms must be "
                                "non-empty")
            table, key = (folded, term.casefold()) if term == term.lower() else (exact, term)
            if table.get(key, target) != target:
                raise UserError(f"glossary: {source!r} has two target terms, {table[key]!r} "
                                f"and {target!r}")
            if key not in table:
                written.append(f"(?-i:{_spaced(term)})" if table is exact else _spaced(term))
            table[key] = target
        # longest first, so that at each position the longest term matches; a term with
        # capitals is matched as written ((?-i:...)), the others in any case
        written.sort(key=len, reverse=True)
        pattern = re.compile(rf"(?<!\w)(?:{'|'.join(written)})(?!\w)", re.IGNORECASE) \
            if written else None
        object.__setattr__(self, "_pattern", pattern)
        object.__setattr__(self, "_exact", exact)
        object.__setattr__(self, "_folded", folded)

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]]) -> Glossary:
        items = entries.items() if isinstance(entries, Mapping) else entries
        return cls(tuple((str(s), str(t)) for s, t in items))

    @classmethod
    def read(cls, path: str | Path) -> Glossary:
        """A TSV file: a source term, a tab, its target term on each line; blank lines and
        lines starting with # are skipped. A bad line is a UserError naming it."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no such glossary file")
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"{path}: cannot read the glossary: {error}") from None
        entries = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise UserError(f"{path}:{number}: expected 'source term<TAB>target term', got "
                                f"{line[:80]!r}")
            entries.append((fields[0].strip(), fields[1].strip()))
        try:
            return cls(tuple(entries))
        except UserError as error:
            raise UserError(f"{path}: {error}") from None

    def __len__(self) -> int:
        return len(self.entries)

    def terms(self, sentence: str) -> list[str]:
        """The target terms of the source terms in `sentence`, in order of occurrence, each
        once."""
        return list(dict.fromkeys(m.target for m in self.matches(sentence)))

    def matches(self, sentence: str) -> list[Match]:
        """Where `sentence` holds source terms, in order."""
        if self._pattern is None:
            return []
        found = []
        for match in self._pattern.finditer(sentence):
            text = " ".join(match.group().split())
            target = self._exact.get(text) or self._folded.get(text.casefold())
            if target is not None:
                found.append(Match(match.group(), target, match.start(), match.end()))
        return found

    def check(self, sentence: str, translation: str,
              alignments: list[tuple[int, int]] | None = None) -> list[TermCheck]:
        """For each source term in `sentence`, whether its target term is in `translation`,
        and with the translation's word `alignments` (source word, target word: over the
        whitespace-separated words of both), whether an occurrence of it is aligned with the
        source term's words."""
        checks, links = [], set(alignments or ())
        for match in self.matches(sentence):
            source_words = _words_in(sentence, match.start, match.end)
            places = [_words_in(translation, at, at + len(match.target))
                      for at in _occurrences(translation, match.target)]
            aligned = None if alignments is None else any(
                (i, j) in links for words in places for j in words for i in source_words)
            checks.append(TermCheck(match.source, match.target, bool(places), aligned,
                                    source_words, places[0] if places else []))
        return checks


def _occurrences(text: str, term: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(term), text)]


def _words_in(text: str, start: int, end: int) -> list[int]:
    """The indices of the whitespace-separated words of `text` that [start, end) touches."""
    return [i for i, word in enumerate(re.finditer(r"\S+", text))
            if word.start() < end and word.end() > start]


def _spaced(term: str) -> str:
    return r"\s+".join(re.escape(word) for word in term.split())
