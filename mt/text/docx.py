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
`w:t` (`xml:space="preserve"`), the others emptied (`mt.text.runs`, shared with .pptx). Field codes
(`w:instrText`), deleted text (`w:delText`), numbering and paragraph properties are not touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lxml import etree

from mt.text.limits import DocumentLimits
from mt.text.runs import RunSyntax, translate_package

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
PARTS = re.compile(r"^word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml$")
BREAKS = frozenset(f"{{{W}}}{name}"
                   for name in ("tab", "br", "cr", "drawing", "sym", "fldChar", "ptab", "noBreakHyphen"))
OFF = frozenset(("0", "false", "off", "none"))


def _tags(run: etree._Element) -> tuple[tuple[str, str], ...]:
    """A run's formatting as inline tags (`mt.text.inline.Piece.tags`)."""
    tags: list[tuple[str, str]] = []
    link = next(run.iterancestors(f"{{{W}}}hyperlink"), None)
    if link is not None:
        tags.append(("a", link.get(R_ID) or "#" + (link.get(f"{{{W}}}anchor") or "")))
    props = run.find(f"{{{W}}}rPr")
    for name, tag in (("b", "b"), ("i", "i"), ("u", "u")):
        found = props.find(f"{{{W}}}{name}") if props is not None else None
        if found is not None and (found.get(f"{{{W}}}val") or "true").lower() not in OFF:
            tags.append((tag, ""))
    return tuple(tags)


def _key(run: etree._Element) -> object:
    """What consecutive runs share to be one piece: the same properties and the same link."""
    props = run.find(f"{{{W}}}rPr")
    link = next(run.iterancestors(f"{{{W}}}hyperlink"), None)
    return etree.tostring(props) if props is not None else b"", id(link) if link is not None else None


SYNTAX = RunSyntax(paragraph=f"{{{W}}}p", run=f"{{{W}}}r", text=f"{{{W}}}t", breaks=BREAKS, key=_key,
                   tags=_tags, preserve=True)


def translate_docx(data: bytes, translate_html: Callable[[list[str]], list[str]],
                   limits: DocumentLimits) -> bytes:
    """The .docx `data` with every paragraph translated (see the module docstring)."""
    return translate_package(data, translate_html, limits, what=".docx", main="word/document.xml",
                             kind="a Word document", parts=PARTS, syntax=SYNTAX)
