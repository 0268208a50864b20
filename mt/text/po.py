"""gettext catalogues (.po): the untranslated messages filled in and marked fuzzy for review.

Read and written with polib (the library Weblate's and many projects' scripts use; pure Python,
MIT). What a pre-translation pass is expected to do, as `msgmerge` and translate-toolkit's
`pretranslate` do it:

- only messages with no translation are filled: a translated, fuzzy or obsolete (`#~`) entry and
  the header are left as they were, and so is a plural entry with some forms already written;
- each filled message gets the `fuzzy` flag, so gettext does not use it (`msgfmt` skips fuzzy
  entries) until a person has reviewed it in their editor;
- plural entries (`msgid_plural`): `msgstr[0]` is the translation of `msgid` and every other form
  up to the header's `nplurals` (`Plural-Forms`; 2 when the header has none) that of
  `msgid_plural`;
- `msgctxt` is never translated and keeps entries with the same `msgid` apart; translator and
  extracted comments, references, flags (`c-format`, `python-format`...), previous msgids and the
  header are written back as they were.

A template (`.pot`) is read as one: its header is made the target language's as `msginit` writes
it (`mt.text.pot`: Language, gettext's Plural-Forms, UTF-8, PO-Revision-Date, X-Generator), so
`mt translate -i app.pot -o de.po` gives a catalogue `msgfmt` accepts; a `.po` that was filled
gets PO-Revision-Date and X-Generator, as Weblate writes them. Each message goes through the
UI-string rules of `mt.text.uistrings`: its keyboard accelerator (the file's `X-Accelerator-Marker`,
else the `_`, `&` or `~` its messages use) taken out before translation and put back on a letter of
the translation, so `msgfmt --check-accelerators` passes; markup, acronyms and paths kept;
brackets balanced; a doubled word once. Given confidences (`scored`), a message whose
translation is under `LOW_CONFIDENCE` (0.3) gets a translator comment saying so.

Placeholders (`%s`, `%(name)s`, `{0}`, ...) are not this module's job: the `translate_texts` the
command and the server pass apply `decode.text.protect` (mt.text.protect), which takes them out of what
the model reads and puts them back verbatim, so a `c-format` message still passes `msgfmt --check`.
The file is written by polib with gettext's own line wrapping (79 columns), the layout
`msgmerge` and Weblate write, so such a file keeps its layout. It must be UTF-8 (the header's
charset is what gettext tools check; other charsets are refused in one line). A syntax error is a
DocumentError with the line polib names.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polib

from mt.text.limits import DocumentError, DocumentLimits, check_units, decode_text
from mt.text.pot import fill_header
from mt.text.uistrings import Scored, accelerator_of, low_confidence_note, translate_messages, unscored

MAX_PLURALS = 10  # forms per message at most (Arabic has 6): a header asking for more is refused
_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")
_CHARSET = re.compile(r"charset\s*=\s*([\w.-]+)", re.I)


def _catalogue(data: bytes) -> polib.POFile:
    """The parsed .po file; DocumentError when it is not UTF-8 or not valid gettext syntax."""
    text = decode_text(data, ".po")
    if "\n" not in text:  # polib reads a one-line string naming an existing file as that file
        text += "\n"
    try:
        po = polib.pofile(text, wrapwidth=78, encoding="utf-8")
    except (OSError, ValueError, UnicodeError) as e:
        raise DocumentError(f".po: {' '.join(str(e).split())}") from None
    charset = _CHARSET.search(po.metadata.get("Content-Type", ""))
    if charset and charset.group(1).lower().replace("_", "-") not in ("utf-8", "utf8", "charset"):
        raise DocumentError(f".po: charset {charset.group(1)}; only UTF-8 catalogues are translated "
                            f"(msgconv --to-code=UTF-8 converts one)")
    return po


def nplurals(po: polib.POFile) -> int:
    """How many plural forms the catalogue's language has (its header's Plural-Forms; 2 without one)."""
    found = _NPLURALS.search(po.metadata.get("Plural-Forms", ""))
    count = int(found.group(1)) if found else 2
    if not 1 <= count <= MAX_PLURALS:
        raise DocumentError(f".po: Plural-Forms says nplurals={count}; "
                            f"between 1 and {MAX_PLURALS} are translated")
    return count


def _untranslated(entry: polib.POEntry) -> bool:
    if entry.obsolete or entry.fuzzy or not entry.msgid:  # msgid "" is the header
        return False
    if entry.msgid_plural:
        return not any(entry.msgstr_plural.values())
    return not entry.msgstr


def translate_po(data: bytes, translate_texts: Callable[[list[str]], list[str]], limits: DocumentLimits, *,
                 target: str | None = None, scored: Scored | None = None) -> bytes:
    """The .po or .pot `data` with every untranslated message filled and marked fuzzy, written as
    a catalogue for `target` (a language code; None: the header's) when anything was filled
    (module docstring). With `scored` (texts -> (translation, confidence)) in place of
    `translate_texts`, a message under the low-confidence threshold gets a translator comment."""
    po = _catalogue(data)
    todo = [entry for entry in po if _untranslated(entry)]
    if todo:
        fill_header(po, target)
    forms = nplurals(po)
    texts = [text for entry in todo for text in ((entry.msgid, entry.msgid_plural) if entry.msgid_plural
                                                 else (entry.msgid,))]
    check_units(len(texts), "messages", limits)
    marker = accelerator_of((e.msgid for e in po if not e.obsolete), po.metadata.get("X-Accelerator-Marker"))
    found = iter(translate_messages(texts, scored or unscored(translate_texts), marker))
    for entry in todo:
        if entry.msgid_plural:
            (one, sure), (other, sure_other) = next(found), next(found)
            entry.msgstr_plural = {n: one if n == 0 else other for n in range(forms)}
            # the least sure form's; NaN last
            sure = min(sure, sure_other, key=lambda c: c if c == c else 2.0)
        else:
            entry.msgstr, sure = next(found)
        note = low_confidence_note(sure)
        if note:  # a translator comment ("# ..."): what Poedit, Lokalize and Weblate show beside the entry
            entry.tcomment = f"{entry.tcomment}\n{note}" if entry.tcomment else note
        entry.flags.insert(0, "fuzzy")  # first, as msgmerge and Weblate write it: "#, fuzzy, c-format"
    out = str(po)
    if out.startswith("#\n") and not data.lstrip(b"\xef\xbb\xbf").startswith(b"#"):
        out = out[2:]  # polib writes an empty header comment ("#") the file did not have
    return out.encode("utf-8")
