"""Bounds on a document before any work starts: what a hostile or damaged file may not exceed.

One frozen dataclass shared by every format (`mt.text.documents` checks the input size, the zip
readers `mt.text.zipparts` the member count and uncompressed size, each format its paragraph or
cue count). `DocumentError` is the one error a file can cause: an `MTError` (one line on the
command line, a 400 on the server) naming the file and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass

from mt.errors import MTError


class DocumentError(MTError):
    """A file that cannot be translated: damaged, too large, or not of its format."""


@dataclass(frozen=True)
class DocumentLimits:
    """What one document may hold at most (defaults fit a 200-page report or a feature film's subtitles)."""

    max_bytes: int = 20 << 20  # the file as given
    max_unzipped_bytes: int = 100 << 20  # zip formats: all members, uncompressed (a zip bomb stops here)
    max_members: int = 2_000  # zip formats (.docx .odt .pptx .odp .epub): files inside the zip
    max_units: int = 50_000  # paragraphs, table cells, cues: texts sent to the model


def check_units(count: int, what: str, limits: DocumentLimits) -> None:
    """DocumentError when a document has more translatable `what` than the limit allows."""
    if count > limits.max_units:
        raise DocumentError(f"{count} {what}; at most {limits.max_units} are translated in one document")


def decode_text(data: bytes, what: str) -> str:
    """UTF-8 bytes (a leading byte-order mark dropped) -> text; a DocumentError naming `what` otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DocumentError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})") from None
