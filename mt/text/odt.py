"""OpenDocument text (.odt) and presentations (.odp): every paragraph and heading of the body,
tables, frames, headers, footers and footnotes translated, each span keeping its style; in a
presentation, every slide's frames and shapes (groups and tables included), its speaker notes
(`presentation:notes`) and the footer and header texts its slides show.

Built on lxml over `content.xml` (the body, footnotes, tables, frames) and `styles.xml` (the
master pages' headers and footers) (`mt.text.zipparts`), not odfpy: odfpy loads the whole
package into its own object tree and writes every part back re-serialised, and its text API
(`teletype`) flattens a paragraph's spans; on the XML every other member is copied byte for byte
and every `text:span` keeps its `text:style-name`. (argos-translate-files also works on the XML,
with BeautifulSoup.)

ODF text is mixed content: a paragraph (`text:p`, `text:h`) holds text and spans, links and
notes. Each run of text (an element's text or a child's tail) whose nearest paragraph is this
one is a piece (`mt.text.inline`), with its formatting read from the style it is in (bold
`fo:font-weight`, italics `fo:font-style`, underline `style:text-underline-style`, from the
automatic and common styles) and `text:a` links. A footnote's body is its own paragraphs; its
citation (the number) is never sent to the model.

A presentation is the same XML: its slides (`draw:page`) hold frames, shapes and tables whose
text is `text:p` and `text:span` as in a text document, so it goes through the same code. Only
the parts holding a translated paragraph are written back (a document without a header keeps
its styles.xml byte for byte).
"""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree

from mt.text.inline import Piece, pieces_back, to_html
from mt.text.limits import DocumentError, DocumentLimits, check_units
from mt.text.zipparts import parse_xml, read_zip, write_zip, xml_bytes

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
XLINK = "http://www.w3.org/1999/xlink"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
# Paragraphs, and the text a presentation's slides show in their footers and headers.
PARAGRAPHS = frozenset((f"{{{TEXT}}}p", f"{{{TEXT}}}h", f"{{{PRESENTATION}}}footer-decl",
                        f"{{{PRESENTATION}}}header-decl"))
SKIPPED = frozenset((f"{{{TEXT}}}note-citation", f"{{{TEXT}}}tracked-changes", f"{{{TEXT}}}bookmark-ref"))
PARTS = ("content.xml", "styles.xml")
SPACING = frozenset(f"{{{TEXT}}}{name}" for name in ("tab", "line-break", "s", "note"))

Slot = tuple[etree._Element, str]  # (element, "text" | "tail"): where a piece's text lives


def _style_tags(roots: list[etree._Element]) -> dict[str, tuple[str, ...]]:
    """Each text style's name -> its inline tags ("b", "i", "u")."""
    found: dict[str, tuple[str, ...]] = {}
    for root in roots:
        for style in root.iter(f"{{{STYLE}}}style"):
            props = style.find(f"{{{STYLE}}}text-properties")
            if props is None:
                continue
            tags = []
            if props.get(f"{{{FO}}}font-weight") in ("bold", "600", "700", "800", "900"):
                tags.append("b")
            if props.get(f"{{{FO}}}font-style") in ("italic", "oblique"):
                tags.append("i")
            if props.get(f"{{{STYLE}}}text-underline-style", "none") != "none":
                tags.append("u")
            found[style.get(f"{{{STYLE}}}name", "")] = tuple(tags)
    return found


def _owner(element: etree._Element) -> etree._Element | None:
    """The nearest paragraph at or above `element`, None inside a note citation."""
    for node in (element, *element.iterancestors()):
        if node.tag in SKIPPED:
            return None
        if node.tag in PARAGRAPHS:
            return node
    return None


def _tags_at(element: etree._Element, paragraph: etree._Element,
             styles: dict[str, tuple[str, ...]]) -> tuple[tuple[str, str], ...]:
    """The inline tags of text inside `element` (its spans and links up to the paragraph)."""
    chain = [element, *element.iterancestors()]
    chain = chain[:chain.index(paragraph)] if paragraph in chain else chain
    tags: list[tuple[str, str]] = []
    for node in reversed(chain):  # outermost first
        if node.tag == f"{{{TEXT}}}a":
            tags.append(("a", node.get(f"{{{XLINK}}}href", "")))
        spanned = (styles.get(node.get(f"{{{TEXT}}}style-name", ""), ())
                   if node.tag == f"{{{TEXT}}}span" else ())
        for tag in spanned:
            if (tag, "") not in tags:
                tags.append((tag, ""))
    return tuple(tags)


def _pieces(paragraph: etree._Element, styles: dict[str, tuple[str, ...]]) -> list[tuple[Piece, Slot]]:
    """The paragraph's texts in order, each with where it lives."""
    found: list[tuple[Piece, Slot]] = []
    for node in paragraph.iter():
        if not isinstance(node.tag, str):  # comments, processing instructions
            continue
        if node.text and _owner(node) is paragraph:
            found.append((Piece(node.text, _tags_at(node, paragraph, styles)), (node, "text")))
        parent = node.getparent()
        if node is not paragraph and node.tail and parent is not None and _owner(parent) is paragraph:
            before = " " if node.tag in SPACING and found else ""  # keeps the words either side apart
            found.append((Piece(node.tail, _tags_at(parent, paragraph, styles), before), (node, "tail")))
    return found


def _translate(data: bytes, translate_html: Callable[[list[str]], list[str]], limits: DocumentLimits,
               what: str, body: str) -> bytes:
    """An OpenDocument file's paragraphs translated; `body` is the `office:body` child it must hold."""
    members = read_zip(data, what, limits)
    if "content.xml" not in members:
        raise DocumentError(f"{what}: no content.xml inside (not an OpenDocument file)")
    roots = {name: parse_xml(members[name], name) for name in PARTS if name in members}
    if roots["content.xml"].find(f"{{{OFFICE}}}body/{{{OFFICE}}}{body}") is None:
        raise DocumentError(f"{what}: content.xml holds no office:{body} (not an OpenDocument {body})")
    styles = _style_tags(list(roots.values()))
    paragraphs = [(name, pieces) for name, root in roots.items() for p in root.iter(*PARAGRAPHS)
                  if (pieces := _pieces(p, styles)) and any(piece.text.strip() for piece, _ in pieces)]
    check_units(len(paragraphs), "paragraphs", limits)
    translated = translate_html([to_html([piece for piece, _ in pieces]) for _, pieces in paragraphs])
    for (_, pieces), markup in zip(paragraphs, translated):
        for (_, (node, where)), text in zip(pieces, pieces_back(markup, [piece for piece, _ in pieces])):
            setattr(node, where, text)
    return write_zip(data, {name: xml_bytes(roots[name]) for name in {name for name, _ in paragraphs}})


def translate_odt(data: bytes, translate_html: Callable[[list[str]], list[str]],
                  limits: DocumentLimits) -> bytes:
    """The .odt `data` with every paragraph translated (see the module docstring)."""
    return _translate(data, translate_html, limits, ".odt", "text")


def translate_odp(data: bytes, translate_html: Callable[[list[str]], list[str]],
                  limits: DocumentLimits) -> bytes:
    """The .odp `data` with every paragraph of its slides and notes translated (see the module docstring)."""
    return _translate(data, translate_html, limits, ".odp", "presentation")
