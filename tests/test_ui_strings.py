"""UI strings (mt/text/uistrings.py, the final-mark rule of mt/text/protect.py, gettext templates
of mt/text/pot.py): the rules by hand-made cases, then a real application's catalogue (Xfce's
Mousepad, tests/data/README.md) made a template, translated through `translate_document` by a
stand-in model that makes the mistakes a caption model makes on UI strings (a full stop for every
ending, a doubled word, a surplus bracket), and checked with the tools translators run:
translate-toolkit's `pofilter` and gettext's `msgfmt --check --check-accelerators`. Each check
must fail no more often on mt's output than on the application's own German translation, and the
same checks fail with the rules switched off, so a broken rule turns a test red."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mt.text import uistrings
from mt.text.documents import format_of, translate_document
from mt.text.html import HtmlFragment
from mt.text.limits import DocumentLimits
from mt.text.pot import gettext_language, is_template, plural_forms, template_of
from mt.text.protect import KINDS, MARKS, final_mark, prepare, with_mark
from mt.text.uistrings import (
    accelerator_of,
    balance_brackets,
    marks,
    put_accelerator,
    shield,
    take_accelerator,
    undouble,
    unshield,
)

DATA = Path(__file__).resolve().parent / "data" / "l10n"
ONE = lambda words: [1] * len(words)  # noqa: E731  (pieces per word: no model)
CHECKS = ("accelerators", "brackets", "numbers", "acronyms", "filepaths", "endpunc", "doublewords")


def ends(segment: str, translation: str) -> str:
    return prepare(segment, KINDS, True, ONE, True).render(translation)


# ------------------------------------------------------------------------------------ the rules

def test_the_sources_final_mark_ends_the_translation() -> None:
    assert ends("Name:", "Namen.") == "Namen:" and ends("Height:", "Er") == "Er:"
    assert ends("Open...", "Massen.") == "Massen..." and ends("Checking encodings…", "Prüfe.") == "Prüfe…"
    assert ends("Really?", "Wirklich.") == "Wirklich?" and ends("Done!", "Fertig…") == "Fertig!"
    assert ends("Save changes", "Änderungen speichern.") == "Änderungen speichern"  # none: as before
    assert ends("Save changes.", "Änderungen speichern!") == "Änderungen speichern!"  # a full stop: the model's
    assert ends("Name: ", "Namen. ") == "Namen: "  # trailing space kept
    assert ends("Delete %s?", "Löschen.") == "Löschen %s?"  # after a span put back at the end
    assert ends("Really?!", "Wirklich.") == "Wirklich."  # two marks: no rule
    assert [final_mark(s) for s in ("a:", "a...", "a…", "a?", "a!", "a", "a.", "a?!", "a....")] == \
        [":", "...", "…", "?", "!", "", "", "", ""]
    assert with_mark("...", ":") == "..." and with_mark("", ":") == "" and with_mark("ab", "") == "ab"
    assert set(MARKS) == {":", "...", "…", "?", "!"}
    off = prepare("Name:", KINDS, True, ONE, False)
    assert off.identity and off.render("Namen.") == "Namen."  # decode.ending off: the model's


def test_accelerator_marks_are_found_taken_out_and_put_back() -> None:
    assert marks("_Open", "_") == [0] and marks("C_olumn number:", "_") == [1]
    assert marks("Tom__Jerry", "_") == [] and marks("Save && Quit", "&") == [] and marks("&amp; &Go", "&") == [6]
    assert marks("_Open _File", "_") == [0, 6] and marks("end_", "_") == [] and marks("a_ b", "_") == []
    assert take_accelerator("C_olumn number:", "_") == ("Column number:", "o")
    assert take_accelerator("_Open _File", "_") == ("_Open _File", "")  # two marks: left as they are
    assert take_accelerator("Tom__Jerry", "_") == ("Tom__Jerry", "") and take_accelerator("_Open", None) == ("_Open", "")
    assert put_accelerator("Spaltennummer:", "o", "_") == "_Spaltennummer:"  # no 'o': the first letter
    assert put_accelerator("Datei öffnen", "o", "_") == "_Datei öffnen"  # 'ö' is not 'o': the first letter
    assert put_accelerator("Öffnen", "ö", "_") == "_Öffnen" and put_accelerator("Beenden", "q", "&") == "&Beenden"
    assert put_accelerator("Neu laden", "l", "~") == "Neu ~laden"  # a word's first letter first
    assert put_accelerator("Hallo", "l", "_") == "Ha_llo"  # else the letter inside a word
    assert put_accelerator("%s", "s", "_") == "%_s" or put_accelerator("...", "a", "_") == "..."
    assert put_accelerator("_Schon", "s", "_") == "_Schon"  # a mark already there: one only


def test_the_files_accelerator_style() -> None:
    assert accelerator_of(["_Open", "_Save", "Quit"]) == "_"
    assert accelerator_of(["&Open", "&Save", "A &amp; B", "Tom &amp; Jerry"]) == "&"
    assert accelerator_of(["~Open", "~Save"]) == "~" and accelerator_of(["~Open", "Save"]) is None
    assert accelerator_of(["my_file", "plain"]) is None  # one identifier is no style
    assert accelerator_of(["Set user_name", "Set user_id", "Set tab_size"]) is None  # identifiers: no label
    assert accelerator_of(["Clea_r", "C_olumn", "_Open"]) == "_"  # one label is enough to read the rest
    assert accelerator_of(["_Open", "_Save"], header="&") == "&"  # X-Accelerator-Marker wins


def test_markup_acronyms_paths_and_brackets_are_kept_as_spans() -> None:
    cases = {"Do not register with the D-BUS bus": ("Do not register with the {_0} bus", ["D-BUS"]),
             "<b>Display</b>": ("<b>Display{_0}", ["</b>"]),  # <b> is already a placeholder span
             "Report bugs to <%s>.": ("Report bugs to {_0}.", ["<%s>"]),
             "Line ending DOS / Windows (CR LF)": ("Line ending {_0} {_1} Windows {_2}", ["DOS", "/", "(CR LF)"]),
             "Bold (Ctrl+B)": ("Bold {_0}", ["(Ctrl+B)"]), "Open /etc/hosts": ("Open {_0}", ["/etc/hosts"]),
             "%s (%s, failed)": ("%s {_0}%s, failed{_1}", ["(", ")"]),
             "gzip archives (.tar.gz, .tgz)": ("gzip archives {_0}{_1}, {_2}{_3}", ["(", ".tar.gz", ".tgz", ")"]),
             "Open README.md as UTF-8": ("Open {_0} as {_1}", ["README.md", "UTF-8"]),
             "Use “--add” or -v": ("Use “{_0}” or {_1}", ["--add", "-v"]), "OK": ("{_0}", ["OK"]),
             "%d %B %Y, %H:%M": ("%d {_0} {_1}, {_2}:{_3}", ["%B", "%Y", "%H", "%M"]),  # %d: the span kinds'
             "50% off": ("50% off", []),
             "letters (e.g. %F, %D, %N)": ("letters {_0}e.g. %F, {_1}, {_2}{_3}", ["(", "%D", "%N", ")"]),  # Thunar
             "e.g. the U.S. way, i.e. A- grade": ("e.g. the {_0}. way, i.e. A- grade", ["U.S"]),  # no file names
             "ENCODING": ("ENCODING", []), "SAVE ALL": ("SAVE ALL", []),  # ALL CAPS lines: the case rule's
             "Visit https://x.org/a_(b) now": ("Visit https://x.org/a_(b) now", []), "Keep {_0}": ("Keep {_0}", [])}
    for text, (shielded, kept) in cases.items():
        assert shield(text) == (shielded, kept), text
        assert unshield(shielded, kept) == text
    # around a model that drops what it does not know: the span rules put each piece back
    text, kept = shield("Do not register with the D-BUS session (required)")
    prepared = prepare(text, KINDS, True, ONE, True)
    assert "D-BUS" not in prepared.text and "(" not in prepared.text
    assert unshield(prepared.render("Nicht mit der Sitzung registrieren erforderlich"), kept).count("D-BUS") == 1


def test_brackets_and_doubled_words() -> None:
    assert balance_brackets("Bold (B)", "Fett (B)))") == "Fett (B)"
    assert balance_brackets("Save", "Speichern (jetzt") == "Speichern jetzt"
    assert balance_brackets("a (b) c", "a (b c") == "a (b c"  # a missing bracket is not invented
    assert balance_brackets("[x]", "[[x]]") == "[x]" and balance_brackets("f(x)", "f(x)") == "f(x)"
    assert undouble("A dark dog", "Ein Ein dunkler Hund") == "Ein dunkler Hund"
    assert undouble("the end", "das Ende Ende.") == "das Ende." and undouble("x", "a  b") == "a  b"
    assert undouble("bye bye", "tschüss tschüss") == "tschüss tschüss"  # the source's own: kept
    assert undouble("a", "Datei, Datei") == "Datei, Datei"  # pofilter's words: "datei," is not "datei"


# ------------------------------------------------------------------------- the gettext header

POT = '''# SOME DESCRIPTIVE TITLE.
# Copyright (C) YEAR THE PACKAGE'S COPYRIGHT HOLDER
#, fuzzy
msgid ""
msgstr ""
"Project-Id-Version: app 1.0\\n"
"Report-Msgid-Bugs-To: \\n"
"POT-Creation-Date: 2026-01-01 00:00+0000\\n"
"PO-Revision-Date: YEAR-MO-DA HO:MI+ZONE\\n"
"Last-Translator: FULL NAME <EMAIL@ADDRESS>\\n"
"Language-Team: LANGUAGE <LL@li.org>\\n"
"Language: \\n"
"MIME-Version: 1.0\\n"
"Content-Type: text/plain; charset=CHARSET\\n"
"Content-Transfer-Encoding: 8bit\\n"
"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"

#: src/app.c:10
msgid "_Open"
msgstr ""

#: src/app.c:11
#, c-format
msgid "One file"
msgid_plural "%d files"
msgstr[0] ""
msgstr[1] ""

msgid "_Save As..."
msgstr ""
'''


class Sloppy:
    """A stand-in model with a caption model's habits on UI strings: every output ends in a full
    stop, its first word is written twice, and a bracket is added where the source has one; the
    text itself is copied, through the real span, case and ending rules (mt.text.protect)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def texts(self, texts: list[str]) -> list[str]:
        self.seen.extend(texts)
        out = []
        for text in texts:
            prepared = prepare(text, KINDS, False, ONE, True)
            words = prepared.text.rstrip(".:?!… ").split() or [""]
            model = " ".join(words[:1] + words) + (")" if "(" in prepared.text else "") + "."
            out.append(prepared.render(model))
        return out

    def html(self, fragments: list[str]) -> list[str]:
        return [HtmlFragment(m).render(self.texts(HtmlFragment(m).blocks)) for m in fragments]


def translate(data: bytes, model: object, target: str | None = "de") -> bytes:
    return translate_document(data, format_of("x.pot") or "", model.texts, model.html, DocumentLimits(), target=target)


@pytest.mark.requires("polib", "msgfmt")
def test_a_template_becomes_the_target_languages_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import polib

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert format_of("app.pot") == format_of("APP.POT") == "po" and is_template(polib.pofile(POT))
    out = translate(POT.encode(), Sloppy()).decode()
    po = polib.pofile(out)
    assert po.metadata["Language"] == "de" and po.metadata["Plural-Forms"] == "nplurals=2; plural=(n != 1);"
    assert po.metadata["PO-Revision-Date"] == "2023-11-14 22:13+0000" and po.metadata["X-Generator"].startswith("mt ")
    assert "charset=UTF-8" in po.metadata["Content-Type"] and not po.metadata_is_fuzzy
    assert po.metadata["Last-Translator"] == "FULL NAME <EMAIL@ADDRESS>"  # a person's field: untouched
    assert out.startswith("# SOME DESCRIPTIVE TITLE.\n")  # the comment kept, never translated
    got = {e.msgid: e for e in po}
    assert got["_Open"].msgstr == "_Open" and got["_Save As..."].msgstr == "_Save As..."  # mark, ending, once
    assert got["One file"].msgstr_plural == {0: "One file", 1: "%d files"}
    path = tmp_path / "de.po"
    path.write_text(out)
    found = subprocess.run(["msgfmt", "--check", "--check-accelerators=_", "--use-fuzzy", "-o", "/dev/null", str(path)],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    pl = polib.pofile(translate(POT.encode(), Sloppy(), "pl").decode())
    assert pl.metadata["Language"] == "pl" and pl.metadata["Plural-Forms"].startswith("nplurals=3;")
    assert len(pl.find("One file").msgstr_plural) == 3
    unknown = polib.pofile(translate(POT.encode(), Sloppy(), None).decode())  # no target: what msgfmt would refuse
    assert unknown.metadata["Language"] == "" and "INTEGER" in unknown.metadata["Plural-Forms"]
    assert gettext_language("pt-br") == "pt_BR" and plural_forms("pt-BR") == "nplurals=2; plural=(n > 1);"
    assert plural_forms("de_AT") == plural_forms("de") and plural_forms("xx") is None


# ------------------------------------------------------------------ a real application's catalogue

def pofilter(path: Path, style: str, tmp_path: Path, language: str = "de") -> Counter[str]:
    """Failures per check of translate-toolkit's pofilter in `style` (--gnome, --kde, --openoffice),
    fuzzy, untranslated, unchanged and blank not counted (the issue's measure)."""
    out = tmp_path / f"{path.stem}.pofilter.po"
    subprocess.run([sys.executable, "-m", "translate.filters.pofilter", style, f"--language={language}",
                    "--progress=none", *(f"--excludefilter={name}" for name in ("isfuzzy", "untranslated",
                                                                               "unchanged", "blank")),
                    "-i", str(path), "-o", str(out)], check=True, capture_output=True)
    return Counter(re.findall(r"^# \(pofilter\) (\w+):", out.read_text() if out.exists() else "", re.M))


def msgfmt_check(path: Path, marker: str) -> subprocess.CompletedProcess:
    return subprocess.run(["msgfmt", "--check", f"--check-accelerators={marker}", "--use-fuzzy", "-o", "/dev/null",
                           str(path)], capture_output=True, text=True)


@pytest.mark.requires("polib", "translate", "msgfmt")
@pytest.mark.parametrize("app", ["mousepad", "thunar"])
def test_a_real_applications_catalogue_passes_the_translators_checks(app: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    human = DATA / f"{app}.de.po"
    out = tmp_path / "mt.de.po"
    out.write_bytes(translate(template_of(human.read_bytes()), Sloppy()))
    assert msgfmt_check(human, "_").returncode == 0
    found = msgfmt_check(out, "_")
    assert found.returncode == 0, found.stderr
    theirs, ours = pofilter(human, "--gnome", tmp_path), pofilter(out, "--gnome", tmp_path)
    for check in CHECKS:
        assert ours[check] <= theirs[check], (check, ours[check], theirs[check])
    # the same stand-in without the rules: the checks see its mistakes (the test can fail)
    for name, off in (("take_accelerator", lambda text, marker: (text, "")), ("fix_message", lambda s, t: t),
                      ("shield", lambda text: (text, []))):
        monkeypatch.setattr(f"mt.text.uistrings.{name}", off)
    monkeypatch.setattr("mt.text.protect.with_mark", lambda translation, mark: translation)
    out.write_bytes(translate(template_of(human.read_bytes()), Sloppy()))
    assert "keyboard accelerator mark" in msgfmt_check(out, "_").stderr  # the doubled word doubled the mark
    broken = pofilter(out, "--gnome", tmp_path)
    for check in ("accelerators", "endpunc", "doublewords", "brackets"):
        assert broken[check] > theirs[check], (check, broken[check], theirs[check])


QT = '''msgid ""
msgstr ""
"Language: de\\n"
"Content-Type: text/plain; charset=UTF-8\\n"
"X-Accelerator-Marker: &\\n"

msgid "&Open File..."
msgstr ""

msgid "Save && Quit"
msgstr ""

msgid "&Quit"
msgstr ""

msgid "Print (Ctrl+P)"
msgstr ""

msgid "Zoom &In"
msgstr ""
'''


@pytest.mark.requires("polib", "translate", "msgfmt")
@pytest.mark.parametrize(("marker", "style"), [("&", "--kde"), ("~", "--openoffice"), ("_", "--gnome")])
def test_qt_and_libreoffice_accelerators(marker: str, style: str, tmp_path: Path) -> None:
    import polib

    source = QT.replace("&", marker) if marker != "&" else QT
    if marker == "~":  # LibreOffice's files name no marker: found from the messages
        source = source.replace("X-Accelerator-Marker: ~\\n", "")
    out = tmp_path / "out.po"
    out.write_bytes(translate(source.encode(), Sloppy()))
    got = {e.msgid: e.msgstr for e in polib.pofile(out.read_text())}
    assert got[f"{marker}Open File..."] == f"{marker}Open File..."
    assert got[f"Save {marker}{marker} Quit"] == f"Save {marker}{marker} Quit"  # a doubled mark: the literal
    assert got[f"Zoom {marker}In"] == f"Zoom {marker}In" and got["Print (Ctrl+P)"] == "Print (Ctrl+P)"
    assert msgfmt_check(out, marker).returncode == 0
    failed = pofilter(out, style, tmp_path)
    assert not any(failed[check] for check in CHECKS), failed


def test_rules_that_need_no_file_are_pure() -> None:
    assert uistrings.fix_message("Bold (B)", "Fett Fett (B))") == "Fett (B)"


# ------------------------------------------------------------------- work bounded by words

class CountingEngine:
    """A model that copies what it reads (tests/test_protect.py's CopyEngine) and counts the source
    pieces it was asked to search: the work a line costs, read without a clock."""

    max_positions = 256

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.searched = tokenizer, 0

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None, constraints=None, glue=()):
        self.searched += sum(len(ids) for ids in src_ids)
        texts = self.tokenizer.decode_pieces("src", [list(ids) for ids in src_ids])
        return [[(ids, 0.0)] * (n_best or 1) for ids in self.tokenizer.encode_tgt(texts)]


@pytest.mark.requires("markdown_it")
@pytest.mark.parametrize("fmt", ["txt", "md"])
def test_a_line_of_symbols_costs_what_its_words_cost(random_ckpt: Path, fmt: str) -> None:
    """10,000 characters of symbols around one word search the pieces of that word and no more
    (before, every `[` was a piece the model read, and a line of them ran for minutes); the
    symbols come back as they were."""
    import dataclasses
    import warnings

    from mt.commands.translate import document_translators
    from mt.deploy.loading import load_model
    from mt.errors import MTWarning
    from mt.text.segment import segmenter_for

    loaded = load_model([random_ckpt], "cpu")
    tok, decode = loaded.tokenizer, dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=1))

    def searched(text: str) -> tuple[int, str]:
        engine = CountingEngine(tok)
        texts, html = document_translators(engine, tok, decode, "cpu", segmenter_for("en"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MTWarning)  # broken to fit the model
            out = translate_document(text.encode(), fmt, texts, html, DocumentLimits()).decode()
        return engine.searched, out

    word = searched("dogs\n")
    for line in ("[" * 9_995 + " dogs\n", "dogs " + "* " * 4_997 + "\n", "{[(<" * 2_499 + " dogs\n"):
        cost, out = searched(line)
        assert 0 < cost <= word[0], (line[:20], cost, word[0])
        if fmt == "txt":
            assert out == line.replace("dogs", word[1].strip())  # the symbols verbatim, the word as the model gave it
    assert searched("[" * 7 + " dogs\n")[0] > word[0]  # seven symbols are text: the rule starts at eight


XLF20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1"><notes><note>Menu item</note></notes><segment><source>&amp;Open...</source></segment>
      <segment><source>Name:</source></segment></unit>
    <unit id="u2"><segment><source>&amp;Quit</source></segment></unit>
    <unit id="u3"><segment state="final"><source>Done</source><target>Fertig</target></segment></unit>
  </file>
</xliff>
"""


@pytest.mark.requires("lxml")
def test_xliff_targets_say_where_they_came_from_and_keep_accelerators() -> None:
    from lxml import etree

    root = etree.fromstring(translate_document(XLF20.encode(), "xliff", Sloppy().texts, Sloppy().html,
                                               DocumentLimits()))
    ns = {"x": "urn:oasis:names:tc:xliff:document:2.0"}
    targets = [t.text for t in root.iterfind(".//x:target", ns)]
    assert targets == ["&Open...", "Name:", "&Quit", "Fertig"]  # the mark back, the source's ending, one word
    for unit_id, notes in (("u1", ["Menu item", "Machine translation (mt): not reviewed."]),
                           ("u2", ["Machine translation (mt): not reviewed."]), ("u3", [])):
        unit = root.find(f".//x:unit[@id='{unit_id}']", ns)
        assert [n.text for n in unit.iterfind("x:notes/x:note", ns)] == notes  # one note a unit, never for final
        assert [etree.QName(c).localname for c in unit][0] in ("notes", "segment")  # notes first, as 2.0 orders them
    assert [s.get("state") for s in root.iterfind(".//x:segment", ns)] == ["translated", "translated", "translated",
                                                                           "final"]


def _scored(texts: list[str]) -> list[tuple[str, float]]:
    """A stand-in model with confidences: a text holding "Frobnicate" is doubtful (0.12), others sure."""
    return [(text.upper(), 0.12 if "Frobnicate" in text else 0.9) for text in texts]


@pytest.mark.requires("polib", "lxml")
def test_low_confidence_messages_get_a_note_a_reviewer_sees() -> None:
    import polib
    from lxml import etree

    from mt.decode.confidence import LOW
    from mt.text.uistrings import LOW_CONFIDENCE, low_confidence_note

    assert LOW_CONFIDENCE == LOW  # the page's threshold and the files' are one
    assert low_confidence_note(0.29) and not low_confidence_note(0.3) and not low_confidence_note(float("nan"))
    source = ('msgid ""\nmsgstr ""\n"Language: de\\n"\n\n# Keep it short\nmsgid "Frobnicate the widget"\nmsgstr ""\n\n'
              'msgid "Open the file"\nmsgstr ""\n')
    po = polib.pofile(translate_document(source.encode(), "po", Sloppy().texts, Sloppy().html, DocumentLimits(),
                                         scored=_scored).decode())
    doubtful, sure = po.find("Frobnicate the widget"), po.find("Open the file")
    assert doubtful.msgstr == "FROBNICATE THE WIDGET" and sure.msgstr == "OPEN THE FILE"
    assert doubtful.tcomment == "Keep it short\nmt: confidence 0.12 (below 0.30): this machine translation is likely wrong"
    assert sure.tcomment == "" and "fuzzy" in doubtful.flags
    plain = polib.pofile(translate_document(source.encode(), "po", Sloppy().texts, Sloppy().html,
                                            DocumentLimits()).decode())
    assert plain.find("Frobnicate the widget").tcomment == "Keep it short"  # no confidences: no note
    x12 = ('<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file source-language="en" '
           'datatype="plaintext" original="a"><body><trans-unit id="a"><source>Frobnicate the widget</source>'
           '</trans-unit><trans-unit id="b"><source>Open the file</source></trans-unit></body></file></xliff>')
    root = etree.fromstring(translate_document(x12.encode(), "xliff", Sloppy().texts, Sloppy().html, DocumentLimits(),
                                               scored=_scored))
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    a, b = root.iterfind(".//x:trans-unit", ns)
    assert [etree.QName(c).localname for c in a] == ["source", "target", "note"] and len(b) == 2
    assert a.find("x:note", ns).get("annotates") == "target" and "0.12" in a.find("x:note", ns).text
    root = etree.fromstring(translate_document(XLF20.replace("Name:", "Frobnicate:").encode(), "xliff", Sloppy().texts,
                                               Sloppy().html, DocumentLimits(), scored=_scored))
    ns = {"x": "urn:oasis:names:tc:xliff:document:2.0"}
    notes = root.findall(".//x:unit[@id='u1']/x:notes/x:note", ns)
    assert [n.get("category") for n in notes] == [None, "mt", "mt-confidence"] and "0.12" in notes[2].text
    assert root.find(".//x:unit[@id='u2']/x:notes/x:note[@category='mt-confidence']", ns) is None
