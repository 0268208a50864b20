"""PowerPoint slides (.pptx): every paragraph on every slide (text boxes and placeholders,
shapes inside groups, table cells) and in its speaker notes translated, each run keeping its
formatting.

Built on lxml over the slide parts (`ppt/slides/slideN.xml`) and the notes parts
(`ppt/notesSlides/notesSlideN.xml`) (`mt.text.zipparts`), not python-pptx, for the reasons
`mt.text.docx` gives (and with its code, `mt.text.runs`): python-pptx sets a paragraph's text by
dropping its runs, and re-saves the whole package; on the XML every other member (layouts, masters,
media, animations, charts) is
copied byte for byte, and in the translated parts only the `a:t` texts change. DrawingML
paragraphs are WordprocessingML's in another namespace (`a:p` > `a:r` > `a:t`), so they go
through the same code (`mt.text.runs`): bold, italics and underline are the `b`, `i` and `u`
attributes of `a:rPr`, a link its `a:hlinkClick`. A field (`a:fld`: slide number, date) is
never sent to the model and parts the words on either side, as a line break (`a:br`) does.
PowerPoint's spell-checking marks (`err`, `dirty`) do not part a piece.

Not translated: slide layouts and masters (their text is the editing prompts of placeholders,
not shown in a slide show), charts and SmartArt (their text lives in parts of their own, with
a data cache beside the drawing), comments, and alternative text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lxml import etree

from mt.text.limits import DocumentLimits
from mt.text.runs import RunSyntax, translate_package

A = "http://schemas.openxmlformats.org/drawingml/2006/main"
R_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
PARTS = re.compile(r"^ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml$")
CHECKING = re.compile(rb'\s(err|dirty)="[^"]*"')  # PowerPoint's spell-checking state, not formatting
TRUE = frozenset(("1", "true", "on"))


def _key(run: etree._Element) -> object:
    """What consecutive runs share to be one piece: the same properties, links included."""
    props = run.find(f"{{{A}}}rPr")
    return CHECKING.sub(b"", etree.tostring(props)) if props is not None else b""


def _tags(run: etree._Element) -> tuple[tuple[str, str], ...]:
    """A run's formatting as inline tags (`mt.text.inline.Piece.tags`)."""
    props = run.find(f"{{{A}}}rPr")
    if props is None:
        return ()
    tags: list[tuple[str, str]] = []
    link = props.find(f"{{{A}}}hlinkClick")
    if link is not None:
        tags.append(("a", link.get(R_ID) or "#"))
    tags.extend((tag, "") for tag in ("b", "i") if props.get(tag, "").lower() in TRUE)
    if props.get("u", "none") != "none":
        tags.append(("u", ""))
    return tuple(tags)


SYNTAX = RunSyntax(paragraph=f"{{{A}}}p", run=f"{{{A}}}r", text=f"{{{A}}}t",
                   breaks=frozenset((f"{{{A}}}br", f"{{{A}}}fld")), key=_key, tags=_tags)


def translate_pptx(data: bytes, translate_html: Callable[[list[str]], list[str]],
                   limits: DocumentLimits) -> bytes:
    """The .pptx `data` with every slide's and note's paragraphs translated (see the module docstring)."""
    return translate_package(data, translate_html, limits, what=".pptx", main="ppt/presentation.xml",
                             kind="a PowerPoint presentation", parts=PARTS, syntax=SYNTAX)
