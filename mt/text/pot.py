"""A gettext header made a catalogue's for its target language, as `msginit` and Weblate write it:
what `mt.text.po` does to the header of a file it fills (a `.pot` template or a `.po`).

- `Language`: the target language (gettext's `ll` or `ll_CC`: "de", "pt_BR"), where the header has
  none (a template's is empty); a header that names a language keeps it.
- `Plural-Forms`: gettext's formula for that language (`PLURAL_FORMS`, the table of gettext's
  manual, "Plural forms", which `msginit` writes from), where the header has none or a template's
  placeholder (`nplurals=INTEGER; plural=EXPRESSION;`) and names no other language. A language not
  in the table keeps the header's; `msgfmt` then refuses the placeholder, as it would msginit's.
- `Content-Type`: a template's `charset=CHARSET` becomes `UTF-8` (what the file is written in).
- `PO-Revision-Date` (now, or `SOURCE_DATE_EPOCH` for a reproducible build) and `X-Generator`
  (`mt <version>`), as Weblate writes them; the header's fuzzy flag, which marks a template's
  header as not yet filled in, is removed once Language and Plural-Forms are set, as msginit does.
Every other field (Project-Id-Version, Report-Msgid-Bugs-To, Last-Translator, Language-Team, the
header comment) is left as it was: a person's name is not mt's to write.
"""

from __future__ import annotations

import os
import re
import time

import polib

from mt import __version__

_ONE = "nplurals=1; plural=0;"
_TWO = "nplurals=2; plural=(n != 1);"
_SLAVIC = ("nplurals=3; "
           "plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);")
PLURAL_FORMS: dict[str, str] = {
    **{code: _ONE for code in ("ja", "ko", "vi", "zh", "th", "id", "ms", "lo", "my")},
    **{code: _TWO for code in ("en", "de", "nl", "sv", "da", "no", "nb", "nn", "fo", "es", "pt", "it",
                               "bg", "el", "fi", "et", "hu", "he", "eo", "tr", "ca", "eu", "gl", "af",
                               "sq", "hi", "bn", "ur")},
    **{code: "nplurals=2; plural=(n > 1);" for code in ("fr", "pt_BR", "oc", "ti", "wa")},
    **{code: _SLAVIC for code in ("ru", "uk", "be", "sr", "hr", "bs")},
    "lv": "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n != 0 ? 1 : 2);",
    "ga": "nplurals=3; plural=n==1 ? 0 : n==2 ? 1 : 2;",
    "ro": "nplurals=3; plural=n==1 ? 0 : (n==0 || (n%100 > 0 && n%100 < 20)) ? 1 : 2;",
    "lt": "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && (n%100<10 || n%100>=20) ? 1 : 2);",
    "cs": "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;",
    "sk": "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;",
    "pl": "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);",
    "sl": "nplurals=4; plural=(n%100==1 ? 0 : n%100==2 ? 1 : n%100==3 || n%100==4 ? 2 : 3);",
    "ar": ("nplurals=6; "
           "plural=n==0 ? 0 : n==1 ? 1 : n==2 ? 2 : n%100>=3 && n%100<=10 ? 3 : n%100>=11 ? 4 : 5;"),
}
_PLACEHOLDER = re.compile(r"INTEGER|EXPRESSION")
_CHARSET = re.compile(r"charset\s*=\s*CHARSET", re.I)


def gettext_language(code: str) -> str:
    """A language code as gettext's Language field writes it: "pt-br" -> "pt_BR", "DE" -> "de"."""
    parts = re.split(r"[-_]", code.strip())
    return "_".join([parts[0].lower(), *(p.upper() if len(p) == 2 else p for p in parts[1:])])


def plural_forms(language: str) -> str | None:
    """gettext's Plural-Forms for `language` ("pt_BR" first, then "pt"), or None when not in the table."""
    code = gettext_language(language)
    return PLURAL_FORMS.get(code) or PLURAL_FORMS.get(code.split("_")[0])


def is_template(po: polib.POFile) -> bool:
    """A `.pot`'s header: a placeholder Plural-Forms or charset, or no Language with every msgstr empty."""
    meta = po.metadata
    if _PLACEHOLDER.search(meta.get("Plural-Forms", "")) or _CHARSET.search(meta.get("Content-Type", "")):
        return True
    return (not meta.get("Language", "").strip()
            and not any(e.msgstr or any(e.msgstr_plural.values()) for e in po))


def revision_date() -> str:
    """Now as gettext writes it ("2026-12-07 14:30+0000"), UTC; `SOURCE_DATE_EPOCH` when set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    return time.strftime("%Y-%m-%d %H:%M+0000", time.gmtime(int(epoch) if epoch.isdigit() else None))


def fill_header(po: polib.POFile, target: str | None) -> None:
    """The header of `po` made its target language's (module docstring), in place."""
    meta = po.metadata
    template = is_template(po)
    named = meta.get("Language", "").strip()
    if target and not named:
        meta["Language"] = named = gettext_language(target)
    forms = plural_forms(named) if named else None
    current = meta.get("Plural-Forms", "")
    if forms and (not current.strip() or _PLACEHOLDER.search(current)):
        meta["Plural-Forms"] = forms
    if _CHARSET.search(meta.get("Content-Type", "")):
        meta["Content-Type"] = _CHARSET.sub("charset=UTF-8", meta["Content-Type"])
    meta["PO-Revision-Date"] = revision_date()
    meta["X-Generator"] = f"mt {__version__}"
    if template and named and not _PLACEHOLDER.search(meta.get("Plural-Forms", "")):
        po.metadata_is_fuzzy = False


def template_of(catalogue: bytes) -> bytes:
    """A translated catalogue made back into its template (what `xgettext` would have written):
    every msgstr empty, no fuzzy flag, the header a .pot's (`Language` empty, the placeholder
    `Plural-Forms` and charset). What the tests and scripts/bench/bench_l10n.py translate a real
    application's catalogue from, to compare the result with its human translation."""
    po = polib.pofile(catalogue.decode("utf-8"))
    for entry in po:
        entry.msgstr = ""
        entry.msgstr_plural = {n: "" for n in entry.msgstr_plural}
        entry.flags = [flag for flag in entry.flags if flag != "fuzzy"]
    po.metadata.update({"Language": "", "Plural-Forms": "nplurals=INTEGER; plural=EXPRESSION;",
                        "Content-Type": "text/plain; charset=CHARSET"})
    return str(po).encode("utf-8")
