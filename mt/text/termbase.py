"""Glossary files beside TSV: CSV and TBX (TermBase eXchange, ISO 30042), as Weblate, memoQ,
Trados and most terminology tools export them. mt.text.glossary turns what is read here into terms.

- **CSV** (`csv_rows`): one term a row, comma-separated with the usual quoting. A first row naming
  its columns (`source`, `target`, in any order among others: Weblate's export adds `context`,
  `developer_comments`...) says which columns hold the terms; without one, the first two columns
  are source and target, a row of one column a term kept as it is.
- **TBX** (`tbx_entries`): TBX-Basic / TBX 2 (`<martif>`, `<termEntry>`, `<langSet>`, `<tig>` or
  `<ntig>`) and TBX 3 (`<tbx>`, `<conceptEntry>`, `<langSec>`, `<termSec>`), with or without XML
  namespaces. An entry is one concept and holds its terms by language; which languages are source
  and target is chosen later, by the model's pair (`Glossary.for_pair`). A term whose
  `administrativeStatus` is deprecated, superseded or not recommended (`deprecatedTerm-admn-sts`,
  `supersededTerm-admn-sts`, `notRecommended`...) is one the translation must avoid. A file that
  is not well-formed XML, or whose root is neither `<martif>` nor `<tbx>`, is refused in one line.
  Read with the standard library's expat (no external entity or DTD is ever fetched).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from xml.parsers import expat

from mt.errors import MTError

DEPRECATED = ("deprecated", "superseded", "notrecommended", "forbidden", "obsolete")
ENTRY, LANG, TERM_GROUP = {"termEntry", "conceptEntry"}, {"langSet", "langSec"}, {"tig", "ntig", "termSec"}


@dataclass(frozen=True)
class TbxTerm:
    """One `<term>` of an entry: its text, line, and whether the entry marks it as one to avoid."""

    text: str
    line: int
    avoid: bool


@dataclass(frozen=True)
class Entry:
    """A TBX concept entry: its terms by language code (as written in `xml:lang`), and its line."""

    line: int
    terms: dict[str, tuple[TbxTerm, ...]]


def csv_rows(text: str, name: str) -> list[tuple[int, str, str | None]]:
    """A CSV glossary's text -> (line, source column, target column) rows, the target None for a
    row without that column; MTError naming `glossary name:line` for a header without `source`."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    lines, at = [], 1
    for row in rows:  # the line each row starts on (a quoted field may span lines)
        lines.append(at)
        at += sum(field.count("\n") for field in row) + 1
    if not rows:
        return []
    header = [cell.strip().casefold() for cell in rows[0]]
    src, tgt, start = 0, 1, 0
    if "source" in header or "target" in header:
        if "source" not in header:
            raise MTError(f"glossary {name}:1: a header row without a 'source' column")
        src, tgt, start = header.index("source"), header.index("target") if "target" in header else -1, 1
    out = []
    for line, row in zip(lines[start:], rows[start:]):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= src:
            raise MTError(f"glossary {name}:{line}: no column {src + 1} (source)")
        target = row[tgt] if 0 <= tgt < len(row) else None
        out.append((line, row[src], target))
    return out


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1].rsplit(" ", 1)[-1]  # expat's namespace separator is ' ' here


class _TbxReader:
    """expat callbacks gathering entries (a hand-written walk: ElementTree keeps no line numbers)."""

    def __init__(self) -> None:
        self.parser = expat.ParserCreate(namespace_separator=" ")
        self.parser.StartElementHandler, self.parser.EndElementHandler = self.start, self.end
        self.parser.CharacterDataHandler = self.text
        self.root = ""
        self.entries: list[Entry] = []
        self.entry: dict[str, list[TbxTerm]] | None = None
        self.entry_line, self.lang = 0, ""
        self.term: list[str] | None = None
        self.note: list[str] | None = None
        self.group: list[tuple[str, int, bool]] = []  # the current <tig>'s term(s)
        self.status = False

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        tag = _local(tag)
        line = self.parser.CurrentLineNumber
        if not self.root:
            self.root = tag
        lang = next((v for k, v in attrs.items() if _local(k) == "lang"), "")
        if tag in ENTRY:
            self.entry, self.entry_line = {}, line
        elif tag in LANG:
            self.lang = lang
        elif tag in TERM_GROUP:
            self.group, self.status = [], False
        elif tag == "term" and self.entry is not None:
            self.term, self.term_line = [], line
        elif tag in {"termNote", "descrip"} and attrs.get("type") == "administrativeStatus":
            self.note = []

    def text(self, data: str) -> None:
        for buffer in (self.term, self.note):
            if buffer is not None:
                buffer.append(data)

    def end(self, tag: str) -> None:
        tag = _local(tag)
        if tag == "term" and self.term is not None:
            self.group.append(("".join(self.term).strip(), self.term_line, False))
            self.term = None
        elif tag in {"termNote", "descrip"} and self.note is not None:
            value = "".join(self.note).replace("-", "").replace(" ", "").casefold()
            self.status = self.status or any(value.startswith(word) for word in DEPRECATED)
            self.note = None
        elif (tag in TERM_GROUP or tag in LANG) and self.entry is not None:
            for text, line, _ in self.group:  # a <term> straight inside <langSet> is flushed at its end
                if text:
                    self.entry.setdefault(self.lang, []).append(TbxTerm(text, line, self.status))
            self.group, self.status = [], False
        elif tag in ENTRY and self.entry is not None:
            if self.entry:
                self.entries.append(Entry(self.entry_line, {k: tuple(v) for k, v in self.entry.items()}))
            self.entry = None


def tbx_entries(data: bytes, name: str) -> list[Entry]:
    """A TBX file's bytes -> its concept entries with at least one term; MTError naming
    `glossary name:line` for a file that is not TBX."""
    reader = _TbxReader()
    try:
        reader.parser.Parse(data, True)
    except expat.ExpatError as e:
        raise MTError(f"glossary {name}:{e.lineno}: not TBX "
                      f"(XML error: {expat.ErrorString(e.code)})") from None
    if reader.root not in {"martif", "tbx"}:
        raise MTError(f"glossary {name}:1: not TBX (the root element is <{reader.root or '?'}>, "
                      "expected <martif> or <tbx>)")
    return reader.entries
