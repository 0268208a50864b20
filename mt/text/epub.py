"""E-books (.epub, EPUB 2 and 3): every XHTML content document of the manifest (chapters, the
EPUB 3 navigation document `nav.xhtml`) translated through the HTML path, the EPUB 2 table of
contents (`toc.ncx`: `docTitle` and the `navLabel`s of `navMap` and `navList`) and the
package's `dc:title` translated; the package stays valid.

Read with lxml (`mt.text.zipparts`, within `DocumentLimits`): `META-INF/container.xml` names the
package document (OPF), whose manifest names every content document (media type
`application/xhtml+xml`) and the NCX. Each content document must be well-formed UTF-8 XML (the
safe parser: no entities expanded, no DTD loaded); its prolog (XML declaration, doctype) is kept as
written, and the rest goes to `translate_html` as one page, as a .html file does
(`mt.text.documents.translate_html_document`): title and body text translated, inline markup
kept, `<script>`, `<style>`, `<code>`, `<pre>` and `translate="no"` not (comments inside are
dropped, as the HTML path drops them). The HTML path writes
HTML (`<br>`, names lower-cased), so its answer is written back as XML by `to_xhtml`: void
elements self-closed, element and attribute names in the source's case (`viewBox` in an SVG),
text escaped, characters XML cannot hold dropped; the result is parsed again before it is kept,
so a chapter that would not be XML is a DocumentError, never a broken book.

Only the translated chapters, the NCX and the OPF are rewritten (in the OPF only `dc:title`'s
text changes: the manifest, spine and identifiers are as they were); every other member is
copied byte for byte, in its order, with its compression. `mimetype` stays (or is put) first and
stored, as the OCF container requires. (argos-translate-files and calibre's ebook-polish also
translate the XHTML files inside the zip in place, rather than rebuilding the book with ebooklib,
which rewrites the OPF and drops what it does not model.) Not translated: `dc:description` and
the other metadata, image alt text, and the language tags (`xml:lang`, `dc:language`), which
the caller's target language is not passed down to.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from html import escape
from html.parser import HTMLParser
from urllib.parse import unquote

from lxml import etree

from mt.text.html import VOID, HtmlFragment, HtmlTooDeep
from mt.text.inline import NOT_XML, Piece, from_html, to_html
from mt.text.limits import DocumentError, DocumentLimits, check_units, decode_text
from mt.text.zipparts import parse_xml, read_zip, write_zip

CONTAINER = "urn:oasis:names:tc:opendocument:xmlns:container"
OPF = "http://www.idpf.org/2007/opf"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
NCX = "http://www.daisy.org/z3986/2005/ncx/"
XHTML_TYPE = "application/xhtml+xml"
NCX_TYPE = "application/x-dtbncx+xml"
# What comes before the root element: XML declaration, comments, processing instructions, doctype.
PROLOG = re.compile(r"(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[.*?\])*>)*", re.S | re.I)
RAW = frozenset(("script", "style"))  # HTMLParser hands their content over as written


class _Xhtml(HTMLParser):
    """The HTML path's output (balanced, every element closed) re-written as XML (module docstring)."""

    def __init__(self, names: dict[str, str]) -> None:
        super().__init__(convert_charrefs=True)
        self.names = names
        self.out: list[str] = []
        self.raw = 0  # open script/style elements

    def _name(self, name: str) -> str:
        prefix, colon, local = name.rpartition(":")
        return prefix + colon + self.names.get(local, local)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        seen: set[str] = set()
        shown = []
        for name, value in attrs:
            if name not in seen:  # XML allows an attribute once
                seen.add(name)
                text = NOT_XML.sub("", name if value is None else value)
                shown.append(f' {self._name(name)}="{escape(text, quote=True)}"')
        void = tag in VOID
        self.out.append(f"<{self._name(tag)}{''.join(shown)}{'/' if void else ''}>")
        self.raw += tag in RAW and not void

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID:
            self.out.append(f"</{self._name(tag)}>")
            self.raw -= tag in RAW and self.raw > 0

    def handle_data(self, data: str) -> None:
        self.out.append(NOT_XML.sub("", data) if self.raw else escape(NOT_XML.sub("", data), quote=False))


def source_names(root: etree._Element) -> dict[str, str]:
    """The lower-cased local names of `root`'s elements and attributes that are not lower case
    (SVG's `viewBox`, `linearGradient`) -> their own; one written both ways stays lower case."""
    written = {etree.QName(name).localname for node in root.iter() if isinstance(node.tag, str)
               for name in (node.tag, *node.attrib)}
    return {name.lower(): name for name in written if name != name.lower() and name.lower() not in written}


def to_xhtml(markup: str, names: dict[str, str]) -> str:
    """`markup` (what the HTML path gave for an XHTML document, prolog excluded) as XML, element
    and attribute names in their source case (`names`: `source_names`)."""
    writer = _Xhtml(names)
    writer.feed(markup)
    writer.close()
    return "".join(writer.out)


def _title_html(text: str) -> str:
    """A plain title as the HTML fragment the model reads (`mt.text.inline`)."""
    return to_html([Piece(text)])


def _package(members: dict[str, bytes]) -> tuple[str, etree._Element]:
    """The OPF's path and root, found through META-INF/container.xml."""
    if members.get("mimetype", b"").strip() != b"application/epub+zip":
        raise DocumentError(".epub: no mimetype member reading application/epub+zip (not an EPUB)")
    if "META-INF/container.xml" not in members:
        raise DocumentError(".epub: no META-INF/container.xml inside (not an EPUB)")
    container = parse_xml(members["META-INF/container.xml"], "META-INF/container.xml")
    paths = [r.get("full-path", "") for r in container.iter(f"{{{CONTAINER}}}rootfile")
             if r.get("media-type", "application/oebps-package+xml") == "application/oebps-package+xml"]
    if not paths or paths[0] not in members:
        raise DocumentError(".epub: META-INF/container.xml names no package document inside the zip")
    return paths[0], parse_xml(members[paths[0]], paths[0])


def _manifest(opf_path: str, opf: etree._Element, members: dict[str, bytes], media_type: str) -> list[str]:
    """The zip paths of the manifest's items of `media_type` that are inside the zip, in manifest order."""
    base = posixpath.dirname(opf_path)
    found = []
    for item in opf.iter(f"{{{OPF}}}item"):
        if item.get("media-type") == media_type:
            path = posixpath.normpath(posixpath.join(base, unquote(item.get("href", "").split("#")[0])))
            if path in members and path not in found:
                found.append(path)
    return found


def _chapter(path: str, data: bytes) -> tuple[str, HtmlFragment, dict[str, str]]:
    """A content document's prolog, the rest parsed by the HTML path, and its names' case."""
    root = parse_xml(data, path)  # well-formed, or refused whole
    encoding = root.getroottree().docinfo.encoding or "UTF-8"
    if encoding.lower().replace("-", "") != "utf8":  # the translation is written as UTF-8
        raise DocumentError(f"{path}: {encoding} text; chapters are translated in UTF-8 only")
    text = decode_text(data, path)
    prolog = PROLOG.match(text)
    head = prolog.group(0) if prolog else ""
    try:
        return head, HtmlFragment(text[len(head):]), source_names(root)
    except HtmlTooDeep as e:
        raise DocumentError(f"{path}: {e}") from None


def translate_epub(data: bytes, translate_html: Callable[[list[str]], list[str]],
                   limits: DocumentLimits) -> bytes:
    """The .epub `data` with its chapters, table of contents and title translated (see the module
    docstring)."""
    members = read_zip(data, ".epub", limits)
    opf_path, opf = _package(members)
    chapters = {path: _chapter(path, members[path]) for path in _manifest(opf_path, opf, members, XHTML_TYPE)}
    chapters = {path: found for path, found in chapters.items() if found[1].blocks}
    ncx = {path: parse_xml(members[path], path) for path in _manifest(opf_path, opf, members, NCX_TYPE)}
    titles = [(opf_path, node) for node in opf.iter(DC_TITLE) if (node.text or "").strip()]
    for path, root in ncx.items():  # page numbers (pageList) are not titles
        labels = (*root.iter(f"{{{NCX}}}docTitle"), *root.iter(f"{{{NCX}}}navLabel"))
        titles.extend((path, text) for label in labels
                      if not any(a.tag == f"{{{NCX}}}pageList" for a in label.iterancestors())
                      for text in label.iter(f"{{{NCX}}}text") if (text.text or "").strip())
    check_units(sum(len(fragment.blocks) for _, fragment, _ in chapters.values()) + len(titles),
                "blocks of text", limits)
    translated = translate_html([fragment.source for _, fragment, _ in chapters.values()]
                                + [_title_html(t.text) for _, t in titles])
    replaced: dict[str, bytes] = {}
    for (path, (head, _, names)), markup in zip(chapters.items(), translated):
        out = (head + to_xhtml(markup, names)).encode("utf-8")
        parse_xml(out, f"{path} (translated)")
        replaced[path] = out
    for (_, node), markup in zip(titles, translated[len(chapters):]):
        node.text = from_html(markup, 1)[0]
    roots = {opf_path: opf, **ncx}
    for path in {path for path, _ in titles}:  # the doctype kept (an NCX has one)
        replaced[path] = etree.tostring(roots[path].getroottree(), xml_declaration=True, encoding="UTF-8")
    return write_zip(data, replaced, first="mimetype")
