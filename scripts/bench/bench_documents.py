"""What reading and writing a document costs beside the model: `mt.text.documents` on made-up
files of N paragraphs (.docx with a table, .odt) and N cues (.srt, .vtt), translated by a
stand-in that returns its input, so the time is the format layer's alone (parse, pieces to HTML
and back, rebuild), per 1,000 paragraphs or cues.

    .venv/bin/python scripts/bench/bench_documents.py --units 2000

Prints one line per format (bytes in, seconds, ms per 1,000 units) and the CPU it ran on. The
model's own time on the same texts is `mt translate`'s (docs/benchmarks.md); compare the two.
"""

from __future__ import annotations

import argparse
import io
import time

from mt.device import cpu_name
from mt.text.documents import translate_document
from mt.text.limits import DocumentLimits

SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows"


def make_docx(units: int) -> bytes:
    import docx

    document = docx.Document()
    for i in range(units - 4 * (units // 10)):
        paragraph = document.add_paragraph(f"{SENTENCE} {i}, ")
        paragraph.add_run("and a bold part").bold = True
        paragraph.add_run(" in the middle.")
    table = document.add_table(rows=units // 10, cols=4)
    for cell in table._cells:
        cell.text = SENTENCE
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_odt(units: int) -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Style, TextProperties
    from odf.text import P, Span

    doc = OpenDocumentText()
    bold = Style(name="Strong", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    for i in range(units):
        paragraph = P(text=f"{SENTENCE} {i}, ")
        paragraph.addElement(Span(stylename=bold, text="and a bold part"))
        paragraph.addText(" in the middle.")
        doc.text.addElement(paragraph)
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


def make_srt(units: int) -> bytes:
    return "".join(f"{i + 1}\n00:{i // 60 % 60:02d}:{i % 60:02d},000 --> 00:{i // 60 % 60:02d}:{i % 60:02d},900\n"
                   f"{SENTENCE}\nand the second line {i}.\n\n" for i in range(units)).encode()


def make_vtt(units: int) -> bytes:
    return ("WEBVTT\n\n" + make_srt(units).decode().replace(",", ".")).encode()


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=2000, help="paragraphs or cues per file")
    args = parser.parse_args(argv)
    same = lambda texts: list(texts)  # noqa: E731 - the stand-in translator: the format layer alone
    per_thousand = {}
    for fmt, make in (("docx", make_docx), ("odt", make_odt), ("srt", make_srt), ("vtt", make_vtt)):
        data = make(args.units)
        started = time.perf_counter()
        translate_document(data, fmt, same, same, DocumentLimits())
        seconds = time.perf_counter() - started
        per_thousand[fmt] = 1000 * seconds / args.units * 1000
        print(f"{fmt:5s} {args.units} units, {len(data):>9,} bytes: {seconds:6.2f} s, "
              f"{per_thousand[fmt]:6.1f} ms per 1,000")
    print(f"CPU: {cpu_name()}")
    return per_thousand


if __name__ == "__main__":
    main()
