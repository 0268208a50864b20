"""Word documents (.docx): every paragraph of the body, tables, headers, footers, footnotes,
endnotes and comments translated, each run keeping its formatting.

Built on lxml over the package's XML parts (`mt.text.zipparts`), not python-docx: python-docx
reads the body, tables, headers and footers but has no footnotes, endnotes, comments or text
boxes, and writing a paragraph's text through it drops its runs' formatting; on the XML every
member of the zip but the translated parts is copied byte for byte, and every run keeps its own
`w:rPr` (fonts, colours, sizes, styles) unchanged. (argos-translate-files, LibreTranslate's, also
works on the XML, with BeautifulSoup, on word/document.xml only.)

A paragraph (`w:p`, wherever it is: a table cell, a text box, a footnote) is its `w:t` texts in
order; consecutive texts with the same run properties and link, not parted by a tab, break,
drawing or field character, are one piece (Word splits runs for spell-checking and revision ids).
The pieces go through `translate_html` as inline HTML (`mt.text.inline`: bold `w:b`, italics
`w:i`, underline `w:u`, links `w:hyperlink`), and each piece's translation goes into its first
`w:t` (`xml:space="preserve"`), the others emptied. Field codes (`w:instrText`), deleted text
(`w:delText`), numbering and paragraph properties are not touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lxml import etree

from mt.text.inline import Piece, from_html, to_html
from mt.text.limits import DocumentError, DocumentLimits, check_units
from mt.text.zipparts import parse_xml, read_zip, write_zip, xml_bytes

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
PARTS = re.compile(r"^word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml$")
BREAKS = frozenset(f"{{{W}}}{name}" for name in ("tab", "br", "cr", "drawing", "sym", "fldChar", "ptab", "noBreakHyphen"))
OFF = frozenset(("0", "false", "off", "none"))


def _tags(run: etree._Element, link: etree._Element | None) -> tuple[tuple[str, str], ...]:
    """A run's formatting as inline tags (`mt.text.inline.Piece.tags`)."""
    tags: list[tuple[str, str]] = []
    if link is not None:
        tags.append(("a", link.get(R_ID) or "#" + (link.get(f"{{{W}}}anchor") or "")))
    props = run.find(f"{{{W}}}rPr")
    for name, tag in (("b", "b"), ("i", "i"), ("u", "u")):
        found = props.find(f"{{{W}}}{name}") if props is not None else None
        if found is not None and (found.get(f"{{{W}}}val") or "true").lower() not in OFF:
            tags.append((tag, ""))
    return tuple(tags)


def _pieces(paragraph: etree._Element) -> list[tuple[Piece, list[etree._Element]]]:
    """The paragraph's pieces, each with its `w:t` elements (see the module docstring)."""
    found: list[tuple[Piece, list[etree._Element]]] = []
    key: object = None
    before = ""
    for node in paragraph.iter():
        if node.tag in BREAKS:
            key, before = None, " " if found else ""
        if node.tag != f"{{{W}}}t" or next(node.iterancestors(f"{{{W}}}p"), None) is not paragraph:
            continue
        run = node.getparent()
        link = next(run.iterancestors(f"{{{W}}}hyperlink"), None)
        props = run.find(f"{{{W}}}rPr")
        this = (etree.tostring(props) if props is not None else b"", id(link) if link is not None else None)
        if this == key and found:
            piece, nodes = found[-1]
            found[-1] = (Piece(piece.text + (node.text or ""), piece.tags), [*nodes, node])
        else:
            found.append((Piece(node.text or "", _tags(run, link), before), [node]))
            before = ""
        key = this
    return found


def translate_docx(data: bytes, translate_html: Callable[[list[str]], list[str]], limits: DocumentLimits) -> bytes:
    """The .docx `data` with every paragraph translated (see the module docstring)."""
    members = read_zip(data, ".docx", limits)
    if "word/document.xml" not in members:
        raise DocumentError(".docx: no word/document.xml inside (not a Word document)")
    roots = {name: parse_xml(members[name], name) for name in members if PARTS.match(name)}
    paragraphs = [pieces for root in roots.values() for p in root.iter(f"{{{W}}}p")
                  if (pieces := _pieces(p)) and any(piece.text.strip() for piece, _ in pieces)]
    check_units(len(paragraphs), "paragraphs", limits)
    translated = translate_html([to_html([piece for piece, _ in pieces]) for pieces in paragraphs])
    for pieces, markup in zip(paragraphs, translated):
        for (_, nodes), text in zip(pieces, from_html(markup, len(pieces))):
            nodes[0].text = text
            nodes[0].set(XML_SPACE, "preserve")
            for node in nodes[1:]:
                node.text = ""
    return write_zip(data, {name: xml_bytes(root) for name, root in roots.items()})
