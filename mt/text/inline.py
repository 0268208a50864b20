"""A paragraph of formatted runs as one HTML fragment, and back: how .docx and .odt keep bold,
italics, underline and links through `translate_html`.

A paragraph is a list of `Piece`s (a run's text with its formatting as inline tags, outermost
first: `a`, `b`, `i`, `u`). `to_html` writes each piece as its tags around
`<span data-piece="k">text</span>`; the HTML path translates the text and keeps the markup, so
`from_html` reads the translated fragment back: the text inside span k is piece k's new text
(the span, not the tags, carries the piece back, so every run keeps its own full formatting,
fonts and colours included, whatever the tags say). A tab or line break between runs stands in
the HTML as a space before the next span (`Piece.before`), so the words on either side stay
apart; whitespace outside every span is dropped on the way back (the tab itself is still in the
document), other text there joins the piece before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser


@dataclass(frozen=True)
class Piece:
    """One run's text and its formatting as inline HTML tags, outermost first: ("a", href) or (tag, "")."""

    text: str
    tags: tuple[tuple[str, str], ...] = ()
    before: str = ""  # what stands between this run and the one before it that is not text (a tab: " ")


def to_html(pieces: list[Piece]) -> str:
    """The paragraph as an HTML fragment (see the module docstring)."""
    out = []
    for k, piece in enumerate(pieces):
        out.append(escape(piece.before, quote=False))
        for tag, href in piece.tags:
            out.append(f'<a href="{escape(href, quote=True)}">' if tag == "a" else f"<{tag}>")
        out.append(f'<span data-piece="{k}">{escape(piece.text, quote=False)}</span>')
        out.extend(f"</{tag}>" for tag, _ in reversed(piece.tags))
    return "".join(out)


class _Reader(HTMLParser):
    def __init__(self, count: int) -> None:
        super().__init__(convert_charrefs=True)
        self.texts = [""] * count
        self.open: list[int | None] = []  # per open element: its piece number, None for other tags
        self.last = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs).get("data-piece")
        number = int(found) if tag == "span" and found is not None and found.isdigit() else None
        self.open.append(number if number is not None and number < len(self.texts) else None)

    def handle_endtag(self, tag: str) -> None:
        if self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        inside = next((k for k in reversed(self.open) if k is not None), None)
        if inside is not None:
            self.last = inside
        elif not data.strip():  # a tab's or break's stand-in between runs: the run itself keeps it
            return
        if self.texts:
            self.texts[self.last] += data


# What XML 1.0 cannot hold: the C0 controls but tab, line feed and carriage return. A model with byte
# pieces can emit them (a random or barely trained one does), and lxml refuses to write them.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")


def from_html(markup: str, count: int) -> list[str]:
    """The text of pieces 0..count-1 in a translated `to_html` fragment, without the characters
    XML cannot hold (`NOT_XML`): the text goes back into a document's XML."""
    reader = _Reader(count)
    reader.feed(markup)
    reader.close()
    return [NOT_XML.sub("", text) for text in reader.texts]


def pieces_back(markup: str, pieces: list[Piece]) -> list[str]:
    """`from_html` for `pieces`, each translation ending as its source did before a tab or line
    break: the HTML path leaves the space it stood for at the end of the words before it."""
    texts = from_html(markup, len(pieces))
    for k in range(len(pieces) - 1):
        if pieces[k + 1].before and not pieces[k].text[-1:].isspace():
            texts[k] = texts[k].rstrip()
    return texts
