"""Paragraphs of runs, the shape WordprocessingML (.docx: `w:p` > `w:r` > `w:t`) and DrawingML
(.pptx: `a:p` > `a:r` > `a:t`) share, as `mt.text.inline` pieces and back.

A `RunSyntax` names a dialect's elements and how a run's formatting reads as inline tags.
`paragraph_pieces` reads a paragraph's texts in order: consecutive texts of runs with the same
`key` (run properties, link), not parted by a break element (tab, line break, field), are one
piece, since Word and PowerPoint split runs for spell-checking and revision ids.
`translate_package` reads an Office Open XML zip and writes back only the parts it changed;
`translate_paragraphs` sends every paragraph with words through `translate_html` once and puts
each piece's translation into its first text element, the piece's other texts emptied, so every
run keeps its own properties (fonts, colours, sizes) and no element is added or removed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lxml import etree

from mt.text.inline import Piece, pieces_back, to_html
from mt.text.limits import DocumentError, DocumentLimits, check_units
from mt.text.zipparts import parse_xml, read_zip, write_zip, xml_bytes

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
Tags = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RunSyntax:
    """One dialect of paragraphs of runs (Clark-notation tag names)."""

    paragraph: str
    run: str
    text: str  # a text element directly inside `run` (a field's text, elsewhere, is never a piece)
    breaks: frozenset[str]  # elements that part two pieces (and stand as a space between their words)
    key: Callable[[etree._Element], object]  # a run -> what consecutive runs share to be one piece
    tags: Callable[[etree._Element], Tags]  # a run -> its formatting as inline tags, outermost first
    preserve: bool = False  # mark a written text xml:space="preserve" (WordprocessingML trims otherwise)


def paragraph_pieces(paragraph: etree._Element,
                     syntax: RunSyntax) -> list[tuple[Piece, list[etree._Element]]]:
    """The paragraph's pieces, each with its text elements (see the module docstring)."""
    found: list[tuple[Piece, list[etree._Element]]] = []
    key: object = None
    before = ""
    for node in paragraph.iter():
        if node.tag in syntax.breaks:
            key, before = None, " " if found else ""
        if node.tag != syntax.text or next(node.iterancestors(syntax.paragraph), None) is not paragraph:
            continue
        run = node.getparent()
        if run is None or run.tag != syntax.run:
            continue
        this = syntax.key(run)
        if this == key and found:
            piece, nodes = found[-1]
            found[-1] = (Piece(piece.text + (node.text or ""), piece.tags, piece.before), [*nodes, node])
        else:
            found.append((Piece(node.text or "", syntax.tags(run), before), [node]))
            before = ""
        key = this
    return found


def translate_paragraphs(roots: dict[str, etree._Element], syntax: RunSyntax,
                         translate_html: Callable[[list[str]], list[str]],
                         limits: DocumentLimits) -> set[str]:
    """Every paragraph with words in the parts `roots` (name -> root) translated in place (see
    the module docstring); the names of the parts that held one (the others are left as they were)."""
    paragraphs = [(name, pieces) for name, root in roots.items() for p in root.iter(syntax.paragraph)
                  if (pieces := paragraph_pieces(p, syntax))
                  and any(piece.text.strip() for piece, _ in pieces)]
    check_units(len(paragraphs), "paragraphs", limits)
    translated = translate_html([to_html([piece for piece, _ in pieces]) for _, pieces in paragraphs])
    for (_, pieces), markup in zip(paragraphs, translated):
        for (_, nodes), text in zip(pieces, pieces_back(markup, [piece for piece, _ in pieces])):
            nodes[0].text = text
            if syntax.preserve:
                nodes[0].set(XML_SPACE, "preserve")
            for node in nodes[1:]:
                node.text = ""
    return {name for name, _ in paragraphs}


def translate_package(data: bytes, translate_html: Callable[[list[str]], list[str]],
                      limits: DocumentLimits, *, what: str, main: str, kind: str,
                      parts: re.Pattern[str], syntax: RunSyntax) -> bytes:
    """An Office Open XML package (`what`: ".docx", ".pptx") with the paragraphs of its members
    named by `parts` translated; a DocumentError when it has no `main` part (it is not `kind`)."""
    members = read_zip(data, what, limits)
    if main not in members:
        raise DocumentError(f"{what}: no {main} inside (not {kind})")
    roots = {name: parse_xml(members[name], name) for name in members if parts.match(name)}
    touched = translate_paragraphs(roots, syntax, translate_html, limits)
    return write_zip(data, {name: xml_bytes(roots[name]) for name in touched})
