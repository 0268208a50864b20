"""Documents and subtitles: which format a file is, and its translation with its shape kept.

`format_of(name, given)` picks the format from `--format` / the file's extension;
`translate_document(data, fmt, translate_texts, translate_html, limits)` checks the size first,
then hands the bytes to the format's module and returns the translated file's bytes (nothing is
written here: the command writes them atomically, the server stores them); `document_texts`
reads a file as far as translating it would, without a model. Two callables do the
translating, so every format shares the caller's model, batching and segmentation:

- `translate_texts(texts) -> texts`: plain texts (paragraphs of a .txt, cue texts), one each;
- `translate_html(fragments) -> fragments`: HTML fragments, markup kept (`mt.text.html`).

Formats (docs/guides/documents.md has the table of what each keeps):
.txt (`translate_txt`: paragraphs between blank lines, each one text, line breaks and blank
lines as they were), .html/.htm (`translate_html_document`: the whole page through the HTML
path, doctype kept, `<title>` translated, scripts, styles and attributes not), .srt/.vtt
(`mt.text.subtitles`), .docx (`mt.text.docx`), .odt and .odp (`mt.text.odt`), .pptx
(`mt.text.pptx`), .epub (`mt.text.epub`: its chapters through the HTML path); .md/.markdown
(`mt.text.markdown`), gettext .po and .pot (`mt.text.po`: untranslated messages filled, marked
fuzzy; a template written as the target language's catalogue),
XLIFF 1.2/2.0 .xlf/.xliff (`mt.text.xliff`: empty targets filled, marked for review).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from mt.text.html import HtmlFragment
from mt.text.limits import DocumentError, DocumentLimits, check_units, decode_text

Translate = Callable[[list[str]], list[str]]
EXTENSIONS = {".txt": "txt", ".html": "html", ".htm": "html", ".srt": "srt", ".vtt": "vtt", ".docx": "docx",
              ".odt": "odt", ".pptx": "pptx", ".odp": "odp", ".epub": "epub", ".md": "md", ".markdown": "md",
              ".po": "po", ".pot": "po", ".xlf": "xliff", ".xliff": "xliff"}
FORMATS = ("txt", "html", "srt", "vtt", "docx", "odt", "pptx", "odp", "epub", "md", "po", "xliff")
MEDIA_TYPES = {"txt": "text/plain; charset=utf-8", "html": "text/html; charset=utf-8",
               "srt": "application/x-subrip; charset=utf-8", "vtt": "text/vtt; charset=utf-8",
               "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
               "odt": "application/vnd.oasis.opendocument.text",
               "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
               "odp": "application/vnd.oasis.opendocument.presentation", "epub": "application/epub+zip",
               "md": "text/markdown; charset=utf-8", "po": "text/x-gettext-translation; charset=utf-8",
               "xliff": "application/xliff+xml"}


def format_of(name: str, given: str | None = None) -> str | None:
    """The document format of a file named `name`: `given` (an explicit --format) when set, else
    by extension (any case); None when the extension is not a document format."""
    if given is not None:
        fmt = given.strip().lower().lstrip(".")
        if fmt not in FORMATS:
            raise DocumentError(f"format {given!r}: not supported; one of {', '.join(FORMATS)}")
        return fmt
    dot = name.rfind(".")
    return EXTENSIONS.get(name[dot:].lower()) if dot >= 0 else None


def _module(name: str) -> ModuleType:
    """A format module, imported when first needed: its libraries are the files extra's."""
    try:
        return importlib.import_module(f"mt.text.{name}")
    except ImportError as e:
        if (e.name or "mt").split(".")[0] == "mt":  # mt's own code broken, not a library missing: say so
            raise
        raise DocumentError(f"documents need the files extra ({e.name} is missing): "
                            f"pip install -e \".[files]\"") from None


def translate_txt(data: bytes, translate_texts: Translate, limits: DocumentLimits) -> bytes:
    """Plain text: each paragraph (lines up to a blank line) one text, translated with its line
    breaks; blank lines, the line-ending style (\\n or \\r\\n) and a final newline as they were."""
    text = decode_text(data, ".txt")
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    paragraphs: list[list[int]] = []  # line numbers of each paragraph
    for i, line in enumerate(lines):
        if line.strip():
            if not paragraphs or paragraphs[-1][-1] != i - 1:
                paragraphs.append([])
            paragraphs[-1].append(i)
    check_units(len(paragraphs), "paragraphs", limits)
    found = translate_texts(["\n".join(lines[i] for i in para) for para in paragraphs]) if paragraphs else []
    for para, translation in zip(paragraphs, found):
        new = translation.split("\n")
        if len(new) != len(para):  # the translator joined or split lines: keep the paragraph's line count
            new = [" ".join(new)] + [""] * (len(para) - 1) if len(para) > 1 else [" ".join(new)]
        for i, line in zip(para, new):
            lines[i] = line
    return newline.join(lines).encode("utf-8")


def translate_html_document(data: bytes, translate_html: Translate, limits: DocumentLimits) -> bytes:
    """A whole HTML page: its doctype kept, everything after it through the HTML path (the
    title and body text translated, markup, scripts and styles kept)."""
    text = decode_text(data, ".html")
    check_units(len(HtmlFragment(text).blocks), "blocks of text", limits)
    start = text.lstrip()
    doctype = ""
    if start[:9].lower() == "<!doctype" and ">" in start:
        doctype = start[:start.index(">") + 1] + "\n"
        text = start[start.index(">") + 1:].lstrip("\r\n")
    return (doctype + translate_html([text])[0]).encode("utf-8")


def translate_document(data: bytes, fmt: str, translate_texts: Translate, translate_html: Translate,
                       limits: DocumentLimits, *, target: str | None = None,
                       scored: Callable[[list[str]], list[tuple[str, float]]] | None = None) -> bytes:
    """The translated file's bytes (see the module docstring); DocumentError for a file over the
    limits, damaged, or not of its format. `target`: the target language's code, which a gettext
    template's header is given (`mt.text.pot`; None: the file's own). `scored`: `translate_texts`
    with each translation's confidence, for .po and XLIFF, whose messages under the low-confidence
    threshold then get a note a reviewer sees (`mt.text.uistrings.LOW_CONFIDENCE`)."""
    if len(data) > limits.max_bytes:
        raise DocumentError(f"{len(data)} bytes; files of at most {limits.max_bytes} bytes are translated")
    if fmt == "txt":
        return translate_txt(data, translate_texts, limits)
    if fmt == "html":
        return translate_html_document(data, translate_html, limits)
    if fmt in ("srt", "vtt"):
        translate_subtitles = getattr(_module("subtitles"), f"translate_{fmt}")
        return translate_subtitles(data, translate_texts, translate_html, limits)
    if fmt in ("docx", "odt", "pptx", "odp", "epub"):  # .odp is .odt's XML: mt.text.odt
        translate_package = getattr(_module("odt" if fmt == "odp" else fmt), f"translate_{fmt}")
        return translate_package(data, translate_html, limits)
    if fmt == "md":
        return _module("markdown").translate_md(data, translate_html, limits)
    if fmt == "po":
        return _module("po").translate_po(data, translate_texts, limits, target=target, scored=scored)
    if fmt == "xliff":
        return _module("xliff").translate_xliff(data, translate_texts, translate_html, limits, scored=scored)
    raise DocumentError(f"format {fmt!r}: not supported; one of {', '.join(FORMATS)}")


def document_texts(data: bytes, fmt: str, limits: DocumentLimits) -> list[str]:
    """The texts a document would send to the model (HTML as its text), read without translating:
    every check `translate_document` makes, before a model is loaded; and what language detection
    reads."""
    seen: list[str] = []

    def note(texts: list[str]) -> list[str]:
        seen.extend(texts)
        return texts

    def note_html(fragments: list[str]) -> list[str]:
        seen.extend(HtmlFragment(markup).text() for markup in fragments)
        return fragments

    translate_document(data, fmt, note, note_html, limits)
    return seen
