"""Documents and subtitles (mt/text/documents.py and its format modules) with a deterministic
stand-in translator: upper-casing. Files are built here the way real ones are (python-docx and
odfpy write what Word and LibreOffice write, plus a footnotes part), translated, and read back
with those libraries: every paragraph, table cell, header, footer and footnote translated, bold
still bold, cue numbers, timings and settings unchanged; damaged files are one DocumentError."""

from __future__ import annotations

import dataclasses
import io
import re
import zipfile

import pytest

from mt.text.documents import format_of, translate_document
from mt.text.html import HtmlFragment
from mt.text.limits import DocumentError, DocumentLimits

pytestmark = pytest.mark.requires("lxml", "srt", "webvtt", "docx", "odf")
LIMITS = DocumentLimits()


def upper_texts(texts: list[str]) -> list[str]:
    return [text.upper() for text in texts]


def upper_html(fragments: list[str]) -> list[str]:
    out = []
    for markup in fragments:
        fragment = HtmlFragment(markup)
        out.append(fragment.render([block.upper() for block in fragment.blocks]))
    return out


def translate(data: bytes, fmt: str, limits: DocumentLimits = LIMITS) -> bytes:
    return translate_document(data, fmt, upper_texts, upper_html, limits)


SRT = ("1\r\n00:00:01,000 --> 00:00:03,500\r\nA dog runs\r\nacross the green field.\r\n\r\n"
       "7\n00:00:04,000 --> 00:00:06,000 X1:100 X2:200 Y1:10 Y2:20\nShe says <i>hello</i>.\n\n"
       "8\n00:01:00,250 --> 00:01:02,000\nTwo men.\n")
VTT = ("WEBVTT - a film\nKind: captions\n\nNOTE written by hand\n\nSTYLE\n::cue { color: yellow }\n\n"
       "intro\n00:00:01.000 --> 00:00:04.000 align:start position:10%\n<v Roger>A dog runs\nacross the field.\n\n"
       "00:00:05.000 --> 00:00:07.500\nIt is <b>fine</b>.\n")


def test_subtitles_keep_numbers_timings_and_settings() -> None:
    srt_out = translate(SRT.encode(), "srt").decode()
    timings = re.compile(r"^\d+\n[\d:,]+ --> [\d:,]+.*$", re.M)
    assert timings.findall(srt_out) == timings.findall(SRT.replace("\r\n", "\n"))  # 3 cues, numbers 1, 7, 8
    assert "A DOG RUNS ACROSS\nTHE GREEN FIELD." in srt_out  # one text, re-wrapped to two even lines
    assert "SHE SAYS <i>HELLO" in srt_out and "X1:100 X2:200 Y1:10 Y2:20" in srt_out
    vtt_out = translate(VTT.encode(), "vtt").decode()
    assert vtt_out.startswith("WEBVTT - a film\nKind: captions\n\nNOTE") and "::cue { color: yellow }" in vtt_out
    assert "intro\n00:00:01.000 --> 00:00:04.000 align:start position:10%\n<v Roger>A DOG RUNS ACROSS\nTHE FIELD." \
        in vtt_out
    assert "00:00:05.000 --> 00:00:07.500\nIT IS <b>FINE" in vtt_out


def test_txt_and_html_keep_their_shape() -> None:
    text = "First line of a paragraph\nand its second line.\n\n\n  Another one.\n"
    assert translate(text.encode(), "txt").decode() == text.upper()
    assert translate(text.replace("\n", "\r\n").encode(), "txt") == text.upper().replace("\n", "\r\n").encode()
    page = ('<!DOCTYPE html>\n<html lang="en"><head><title>A page</title><style>p { color: red }</style></head>'
            '<body><p>Hello <b>bold</b> world.</p><script>var x = "keep";</script></body></html>')
    out = translate(page.encode(), "html").decode()
    assert out.startswith("<!DOCTYPE html>\n<html") and "<title>A PAGE</title>" in out
    assert "<p>HELLO <b>BOLD</b> WORLD.</p>" in out and 'var x = "keep";' in out and "p { color: red }" in out


def _docx() -> bytes:
    import docx

    document = docx.Document()
    paragraph = document.add_paragraph("Plain start, ")
    paragraph.add_run("bold words").bold = True
    paragraph.add_run(" and ")
    paragraph.add_run("italic end").italic = True
    document.add_paragraph("words before\ta tab")
    table = document.add_table(rows=2, cols=2)
    for i, cell in enumerate(table._cells):
        cell.text = f"cell number {i}"
    document.sections[0].header.paragraphs[0].text = "the header"
    document.sections[0].footer.paragraphs[0].text = "the footer"
    buffer = io.BytesIO()
    document.save(buffer)
    return _with_footnote(buffer.getvalue())


def _with_footnote(data: bytes) -> bytes:
    """A footnotes part as Word writes one (python-docx cannot add footnotes)."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    part = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes xmlns:w="{w}">'
            '<w:footnote w:id="1"><w:p><w:r><w:t>a footnote text</w:t></w:r></w:p></w:footnote></w:footnotes>')
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
        target.writestr("word/footnotes.xml", part)
    return out.getvalue()


def test_docx_every_part_translated_and_bold_stays_bold() -> None:
    import docx

    out = translate(_docx(), "docx")
    document = docx.Document(io.BytesIO(out))
    runs = [(run.text, bool(run.bold), bool(run.italic)) for run in document.paragraphs[0].runs]
    assert runs == [("PLAIN START, ", False, False), ("BOLD WORDS", True, False), (" AND ", False, False),
                    ("ITALIC END", False, True)]
    assert document.paragraphs[1].text == "WORDS BEFORE\tA TAB"  # a tab keeps words apart, no space added
    assert [cell.text for cell in document.tables[0]._cells] == [f"CELL NUMBER {i}" for i in range(4)]
    assert document.sections[0].header.paragraphs[0].text == "THE HEADER"
    assert document.sections[0].footer.paragraphs[0].text == "THE FOOTER"
    assert b"A FOOTNOTE TEXT" in zipfile.ZipFile(io.BytesIO(out)).read("word/footnotes.xml")


def _odt() -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Footer, Header, MasterPage, PageLayout, Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import Note, NoteBody, NoteCitation, P, Span

    doc = OpenDocumentText()
    bold = Style(name="Strong", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    layout = PageLayout(name="Page")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header, footer = Header(), Footer()
    header.addElement(P(text="the header"))
    footer.addElement(P(text="the footer"))
    master.addElement(header)
    master.addElement(footer)
    doc.masterstyles.addElement(master)
    paragraph = P(text="Plain start, ")
    paragraph.addElement(Span(stylename=bold, text="bold words"))
    paragraph.addText(" and the end.")
    note = Note(id="ftn1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="a footnote text"))
    note.addElement(body)
    paragraph.addElement(note)
    doc.text.addElement(paragraph)
    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    row = TableRow()
    for i in range(2):
        cell = TableCell()
        cell.addElement(P(text=f"cell number {i}"))
        row.addElement(cell)
    table.addElement(row)
    doc.text.addElement(table)
    buffer = io.BytesIO()
    doc.write(buffer)
    return buffer.getvalue()


def test_odt_every_part_translated_and_bold_stays_bold() -> None:
    from odf import teletype
    from odf.opendocument import load
    from odf.text import P, Span

    source = _odt()
    out = translate(source, "odt")
    doc = load(io.BytesIO(out))
    texts = [teletype.extractText(p) for p in doc.getElementsByType(P)]
    assert "PLAIN START, BOLD WORDS AND THE END.1A FOOTNOTE TEXT" in texts  # the citation "1" untouched
    assert {"CELL NUMBER 0", "CELL NUMBER 1", "THE HEADER", "THE FOOTER"} <= set(texts)
    spans = doc.getElementsByType(Span)
    assert [(teletype.extractText(s), s.getAttribute("stylename")) for s in spans] == [("BOLD WORDS", "Strong")]
    names = [info.filename for info in zipfile.ZipFile(io.BytesIO(out)).infolist()]
    assert names == [info.filename for info in zipfile.ZipFile(io.BytesIO(source)).infolist()]  # mimetype first
    assert zipfile.ZipFile(io.BytesIO(out)).getinfo("mimetype").compress_type == zipfile.ZIP_STORED


def _zip_bomb() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * (2 << 20))
    return out.getvalue()


@pytest.mark.parametrize(("fmt", "data", "message"), [
    ("docx", b"not a zip at all", "not a readable .docx file"),
    ("docx", b"PK\x03\x04" + b"\0" * 40, "not a readable .docx file"),
    ("odt", "truncated", "not a readable .odt file"),
    ("docx", "bomb", "bytes once unzipped; at most 1048576"),
    ("docx", "many", ".docx: 20 files inside the zip; at most 3"),
    ("srt", b"1\n00:00:01,000 --> 00:00:02,000\nhi\n\n2\n00:00:0x,000 --> 00:00:03,000\nho\n", "cannot read"),
    ("vtt", b"00:00:01.000 --> 00:00:02.000\nhi\n", "not a WebVTT file"),
    ("vtt", b"WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhi\n\n00:00:0x --> 00:00:03.000\nho\n", "line 6: a cue timing"),
    ("txt", b"caf\xe9\n", "not UTF-8"),
    ("html", b"x" * 2_000_001, "bytes; files of at most 2000000"),
    ("html", b"<p>a</p>" * 101, "101 blocks of text; at most 100"),
])
def test_damaged_files_are_one_clear_error(fmt: str, data: bytes | str, message: str) -> None:
    if data == "truncated":
        data = _odt()[:-300]
    elif data == "bomb":
        data = _zip_bomb()
    elif data == "many":
        data = _docx()  # python-docx's package has more than 3 parts
    limits = DocumentLimits(max_bytes=2_000_000, max_unzipped_bytes=1 << 20, max_members=3, max_units=100)
    with pytest.raises(DocumentError, match=re.escape(message)):
        translate(data, fmt, limits)


def test_format_by_extension_or_flag() -> None:
    assert [format_of(n) for n in ("a.SRT", "b.vtt", "c.docx", "d.odt", "e.htm", "f.txt", "g.gz", "noext")] == [
        "srt", "vtt", "docx", "odt", "html", "txt", None, None]
    assert format_of("whatever.bin", "DOCX") == "docx"
    with pytest.raises(DocumentError, match="format 'pdf': not supported"):
        format_of("a.pdf", "pdf")


def test_cli_translates_subtitles_and_documents(random_ckpt, tmp_path, monkeypatch, capsys) -> None:
    """`mt translate -i film.srt -o ...` and a .docx end to end on a tiny model: the cues' texts are
    exactly what `translate_lines` gives for them, re-wrapped; a damaged file is one line, no output."""
    import srt
    from test_evaluate import run_cli

    from mt.decode.translate import translate_lines
    from mt.model.checkpoint import load_for_inference
    from mt.text.subtitles import rewrap

    model, tokenizer, cfg = load_for_inference(random_ckpt, "cpu")
    (tmp_path / "film.srt").write_text(SRT, encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", random_ckpt, "-i", tmp_path / "film.srt",
                           "-o", tmp_path / "out.srt", "--beam", "1")
    assert code == 0, err
    source, out = list(srt.parse(SRT)), list(srt.parse((tmp_path / "out.srt").read_text(encoding="utf-8")))
    assert [(c.index, c.start, c.end, c.proprietary) for c in out] == [
        (c.index, c.start, c.end, c.proprietary) for c in source]
    plain = [" ".join(c.content.split()) for c in source if "<" not in c.content]
    want = [rewrap(t, 2 if "\n" in s.content else 1) for t, s in zip(
        translate_lines(model, tokenizer, plain, dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=1)), device="cpu"), [source[0], source[2]])]
    assert [out[0].content, out[2].content] == want
    (tmp_path / "report.docx").write_bytes(_docx())
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", random_ckpt, "-i", tmp_path / "report.docx",
                           "-o", tmp_path / "out.docx", "--beam", "1")
    assert code == 0 and zipfile.ZipFile(tmp_path / "out.docx").testzip() is None, err
    (tmp_path / "bad.docx").write_bytes(b"this is not a zip")
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", random_ckpt, "-i", tmp_path / "bad.docx",
                           "-o", tmp_path / "bad-out.docx")
    assert code == 2 and err.startswith("mt: error: not a readable .docx file") and err.count("\n") == 1, err
    assert not (tmp_path / "bad-out.docx").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_translations_lose_the_characters_xml_cannot_hold() -> None:
    """A model with byte pieces can emit C0 controls (a random one does): lxml refuses them in a
    .docx or .odt, so the text read back for a document drops them (tab, newline and CR stay)."""
    from mt.text.inline import from_html

    assert from_html("<span data-piece=\"0\">a\x10b\x00c\td</span>", 1) == ["abc\td"]
