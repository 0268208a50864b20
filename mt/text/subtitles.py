"""Subtitles: SubRip (.srt) and WebVTT (.vtt), each cue's text translated, everything else kept.

.srt on `srt` (cdown/srt: maintained, strict, one small module): its parser refuses what it
cannot read (a bad timing line is an error, not a cue dropped), and `compose(reindex=False)`
writes the cues back with their own numbers, timings and position coordinates. (pysrt, which
argos-translate-files uses, skips unreadable cues without saying so.) .vtt on `webvtt-py`: it
keeps the header text, NOTE and STYLE blocks, cue identifiers and cue settings; it also skips a
cue whose timing line it cannot read, so the cues read are counted against the timing lines
(`-->`) of the file, and a difference is an error naming the first lost cue.

A cue's lines are translated as one text (a sentence is often split over two lines) and
re-wrapped to about the source's line count (`rewrap`). A cue with inline tags (`<i>`, `<b>`,
`<u>`, `<font>`) goes through `translate_html`, keeping them; a WebVTT voice (`<v Name>`) at the
start of a cue is kept as it was.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable

import srt
import webvtt
from webvtt.errors import MalformedCaptionError, MalformedFileError

from mt.text.limits import DocumentError, DocumentLimits, check_units, decode_text

Translate = Callable[[list[str]], list[str]]
VOICE = re.compile(r"^<v[.\s][^>]*>")


def rewrap(text: str, lines: int) -> str:
    """`text` in about `lines` lines of even width (one line stays one line)."""
    text = " ".join(text.split())
    if lines <= 1 or len(text) < 2:
        return text
    width = max(1, -(-len(text) // lines))
    wrapped = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)
    while len(wrapped) > lines and width < len(text):  # a long word pushed a line over: widen a little
        width += 1
        wrapped = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)
    return "\n".join(wrapped)


def _translate_cues(texts: list[str], translate_texts: Translate, translate_html: Translate) -> list[str]:
    """Each cue's text (lines joined by spaces) translated and re-wrapped to its line count; a
    cue with tags through the HTML path, a leading WebVTT voice kept."""
    plain, tagged, voices, out = [], [], [], list(texts)
    for i, text in enumerate(texts):
        voice = VOICE.match(text)
        voices.append(voice.group(0) if voice else "")
        body = " ".join(text[len(voices[-1]):].split())
        if body:
            (tagged if "<" in body else plain).append((i, body))
    for group, translate in ((plain, translate_texts), (tagged, translate_html)):
        if group:
            for (i, _), found in zip(group, translate([body for _, body in group])):
                out[i] = voices[i] + rewrap(found, texts[i].count("\n") + 1)
    return out


def translate_srt(data: bytes, translate_texts: Translate, translate_html: Translate,
                  limits: DocumentLimits) -> bytes:
    """A SubRip file with each cue's text translated; numbers, timings and coordinates as they were."""
    text = decode_text(data, ".srt")
    try:
        cues = list(srt.parse(text))
    except (srt.SRTParseError, ValueError) as e:
        raise DocumentError(f".srt: cannot read the subtitles ({e})") from None
    if not cues and text.strip():
        raise DocumentError(".srt: no subtitle found "
                            "(expected a number, then 'start --> end', then the text)")
    check_units(len(cues), "cues", limits)
    # srt reads a damaged end time ("00:00:0x") as a shorter one: a cue that ends before it starts
    for cue in cues:
        if cue.end < cue.start:
            raise DocumentError(f".srt: cue {cue.index} ends before it starts (a damaged timing line?)")
    translated = _translate_cues([cue.content for cue in cues], translate_texts, translate_html)
    for cue, found in zip(cues, translated):
        cue.content = found
    return srt.compose(cues, reindex=False, strict=False).encode("utf-8")


def translate_vtt(data: bytes, translate_texts: Translate, translate_html: Translate,
                  limits: DocumentLimits) -> bytes:
    """A WebVTT file with each cue's text translated; header, NOTE and STYLE blocks, identifiers,
    timings and cue settings as they were."""
    text = decode_text(data, ".vtt")
    try:
        captions = webvtt.from_buffer(io.StringIO(text))
    except (MalformedFileError, MalformedCaptionError) as e:
        raise DocumentError(f".vtt: not a WebVTT file ({e}; it must start with 'WEBVTT')") from None
    timing_lines = [n for n, line in enumerate(text.splitlines(), start=1) if "-->" in line]
    if len(timing_lines) != len(captions.captions):
        read = {_start(caption.start) for caption in captions.captions}
        lost = next((n for n in timing_lines if _start(text.splitlines()[n - 1]) not in read),
                    timing_lines[-1])
        raise DocumentError(f".vtt: line {lost}: a cue timing line that cannot be read "
                            f"({len(captions.captions)} of {len(timing_lines)} cues readable)")
    check_units(len(captions.captions), "cues", limits)
    found = _translate_cues([c.raw_text for c in captions.captions], translate_texts, translate_html)
    for caption, new in zip(captions.captions, found):
        caption.text = new
    return captions.content.encode("utf-8")


def _start(line: str) -> int | None:
    """The start time in milliseconds of a 'start --> end' line, None when it does not read."""
    try:
        return webvtt.models.Timestamp.from_string(line.split("-->")[0].strip()).in_milliseconds()
    except (MalformedCaptionError, MalformedFileError, ValueError):
        return None
