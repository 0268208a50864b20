"""What reading and writing a document costs beside the model.

Without a checkpoint: `mt.text.documents` on made-up files of N paragraphs (.docx with a table,
.odt, .pptx, .odp, .epub) and N cues (.srt, .vtt), translated by a stand-in that returns its
input, so the time is the format layer's alone (parse, pieces to HTML and back, rebuild), per
1,000 paragraphs or cues.

    .venv/bin/python scripts/bench/bench_documents.py --units 2000

With `-c CKPT`: a deck of `--slides` slides (.pptx: a title, three bullets, one with a bold
word, and speaker notes each) and a book of `--pages` pages (.epub: four paragraphs of two
sentences a page, one with an emphasised word, ten pages a chapter), and the same paragraphs as
a .txt document (`--format txt`: one paragraph between blank lines), each translated by
`translate_document` with the callables `mt translate` builds (`document_translators`: greedy
unless --beam), so the ratio is a file's whole cost against its text's. Each is run `--repeat`
times, in alternating order, and the least wall and CPU time kept (on a shared machine other jobs
only add time; CPU time, this process's, is the steadier of the two there, with one thread).

    .venv/bin/python scripts/bench/bench_documents.py -c runs/multi30k_en_de/checkpoints/best.pt

Prints one line per format (bytes in, seconds, ms per 1,000 units, or the ratio to .txt) and
the CPU it ran on. The model's own time on the same texts is `mt translate`'s
(docs/benchmarks.md); compare the two.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from pathlib import Path

from mt.device import cpu_name
from mt.text.documents import translate_document
from mt.text.limits import DocumentLimits

SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows"
SUBJECTS = ("A man", "Two women", "A small dog", "The children", "An old woman", "A group of people", "A boy")
VERBS = ("is walking along", "are sitting near", "runs across", "are playing beside", "is looking at", "waits by")
PLACES = ("the street", "a red car", "the green field", "a busy market", "the river", "a wooden bench")


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


def sentences(n: int, seed: int = 0) -> list[str]:
    """`n` seeded plain English sentences (Multi30k's kind)."""
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(PLACES)}." for _ in range(n)]


def make_pptx(units: int, texts: list[str] | None = None) -> bytes:
    """A deck of five paragraphs a slide (a title, three bullets, notes) from `texts` (or SENTENCE);
    the second bullet has its last word bold."""
    from pptx import Presentation

    texts = texts or [f"{SENTENCE} {i}." for i in range(units)]
    prs = Presentation()
    for start in range(0, len(texts), 5):
        title, *bullets, notes = (texts[start:start + 5] + [""] * 5)[:5]
        slide = prs.slides.add_slide(prs.slide_layouts[1])
        slide.shapes.title.text = title
        frame = slide.placeholders[1].text_frame
        frame.text = bullets[0]
        for k, bullet in enumerate(bullets[1:], 1):
            paragraph = frame.add_paragraph()
            head, _, last = bullet.rstrip(".").rpartition(" ")
            if k == 1 and head:
                paragraph.add_run().text = head + " "
                run = paragraph.add_run()
                run.text, run.font.bold = last, True
                paragraph.add_run().text = "."
            else:
                paragraph.text = bullet
        slide.notes_slide.notes_text_frame.text = notes
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def make_odp(units: int) -> bytes:
    from odf import draw, text
    from odf.opendocument import OpenDocumentPresentation
    from odf.style import MasterPage, PageLayout

    doc = OpenDocumentPresentation()
    layout = PageLayout(name="Screen")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    for start in range(0, units, 5):
        page = draw.Page(masterpagename=master)
        frame, box = draw.Frame(width="20cm", height="10cm", x="1cm", y="1cm"), draw.TextBox()
        for i in range(start, min(start + 5, units)):
            box.addElement(text.P(text=f"{SENTENCE} {i}."))
        frame.addElement(box)
        page.addElement(frame)
        doc.presentation.addElement(page)
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


def make_epub(units: int, texts: list[str] | None = None) -> bytes:
    """A book of 40 paragraphs a chapter (ten pages of four) from `texts` (or SENTENCE), two
    sentences a paragraph; each page's first paragraph has one word in `<em>`."""
    from ebooklib import epub

    texts = texts or [f"{SENTENCE} {i}." for i in range(2 * units)]
    paragraphs = [" ".join(texts[i:i + 2]) for i in range(0, len(texts), 2)]
    book = epub.EpubBook()
    book.set_identifier("bench-book")
    book.set_title("A book of many pages")
    book.set_language("en")
    chapters = []
    for c, start in enumerate(range(0, len(paragraphs), 40)):
        body = []
        for k, paragraph in enumerate(paragraphs[start:start + 40]):
            first, _, rest = paragraph.partition(" ")
            body.append(f"<p><em>{first}</em> {rest}</p>" if k % 4 == 0 and rest else f"<p>{paragraph}</p>")
        chapter = epub.EpubHtml(title=f"Chapter {c + 1}", file_name=f"chap_{c + 1:03d}.xhtml", lang="en")
        chapter.content = f"<h1>Chapter {c + 1}</h1>" + "".join(body)
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = [epub.Link(ch.file_name, ch.title, f"c{i}") for i, ch in enumerate(chapters)]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def against_txt(checkpoint: Path, slides: int, pages: int, beam: int | None, repeat: int) -> dict[str, float]:
    """Seconds (wall, and this process's CPU) of .pptx and .epub and of their paragraphs as .txt,
    through the model (module docstring), the least of `repeat` runs each."""
    from mt.commands.decoding import load_for_target
    from mt.commands.translate import document_translators
    from mt.decode.overrides import DecodeOverrides, apply_overrides
    from mt.text.segment import segmenter_for

    loaded, tokenizer = load_for_target([checkpoint], "cpu", None)
    decode = apply_overrides(loaded.config.decode, DecodeOverrides(beam=beam))  # as `mt translate --beam`
    pair = loaded.config.data.pairs[0]
    segmenter = segmenter_for(pair.src_lang, pair.tgt_lang)
    texts, html = document_translators(loaded.engine, tokenizer, decode, loaded.device, segmenter)
    deck_text = sentences(5 * slides, seed=1)
    book_text = sentences(8 * pages, seed=2)
    book_paragraphs = [" ".join(book_text[i:i + 2]) for i in range(0, len(book_text), 2)]
    files = {"pptx": (make_pptx(0, deck_text), "\n\n".join(deck_text)),
             "epub": (make_epub(0, book_text), "\n\n".join(book_paragraphs))}
    translate_document(b"A warm-up.\n\nA second one.\n", "txt", texts, html, DocumentLimits())  # first-call costs
    seconds: dict[str, float] = {}
    for fmt, (data, plain) in files.items():
        runs = [(fmt, data), ("txt", plain.encode())]
        wall: dict[str, list[float]] = {"txt": [], fmt: []}
        cpu: dict[str, list[float]] = {"txt": [], fmt: []}
        for r in range(repeat):  # alternating which goes first, the least of each kept: other jobs only add time
            for kind, payload in runs if r % 2 == 0 else runs[::-1]:
                started, started_cpu = time.perf_counter(), time.process_time()
                translate_document(payload, kind, texts, html, DocumentLimits())
                wall[kind].append(time.perf_counter() - started)
                cpu[kind].append(time.process_time() - started_cpu)
        seconds[fmt], seconds[f"{fmt} as txt"] = min(wall[fmt]), min(wall["txt"])
        seconds[f"{fmt} cpu"], seconds[f"{fmt} as txt cpu"] = min(cpu[fmt]), min(cpu["txt"])
        print(f"{fmt:5s} {len(data):>9,} bytes: {seconds[fmt]:7.2f} s ({seconds[f'{fmt} cpu']:7.2f} s CPU); the same "
              f"paragraphs as .txt: {seconds[f'{fmt} as txt']:7.2f} s ({seconds[f'{fmt} as txt cpu']:7.2f} s CPU); "
              f"ratio {seconds[fmt] / seconds[f'{fmt} as txt']:.3f} (CPU {seconds[f'{fmt} cpu'] / seconds[f'{fmt} as txt cpu']:.3f})")
    return seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=2000, help="paragraphs or cues per file (no checkpoint)")
    parser.add_argument("-c", "--checkpoint", type=Path, help="time .pptx and .epub against .txt with this model")
    parser.add_argument("--slides", type=int, default=200, help="slides in the deck (with -c)")
    parser.add_argument("--pages", type=int, default=300, help="pages in the book (with -c)")
    parser.add_argument("--beam", type=int, default=1, help="beam size (with -c; 1: greedy)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each file (with -c): the least time is kept")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (with -c; 1: CPU time is not inflated "
                                                               "by threads spinning while other jobs hold the cores)")
    args = parser.parse_args(argv)
    if args.checkpoint is not None:
        import torch

        torch.set_num_threads(args.threads)
        found = against_txt(args.checkpoint, args.slides, args.pages, args.beam, args.repeat)
        print(f"CPU: {cpu_name()}")
        return found
    same = lambda texts: list(texts)  # noqa: E731 - the stand-in translator: the format layer alone
    per_thousand = {}
    for fmt, make in (("docx", make_docx), ("odt", make_odt), ("srt", make_srt), ("vtt", make_vtt),
                      ("pptx", make_pptx), ("odp", make_odp), ("epub", make_epub)):
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
