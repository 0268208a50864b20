"""Markdown, gettext .po and XLIFF 1.2/2.0 (mt/text/markdown.py, po.py, xliff.py) with stand-in
translators (upper-casing; for .po and XLIFF through mt.text.protect, as the command's and the
server's callables apply it). Files are made the way their tools make them (polib writes the .po;
the Markdown and XLIFF are hand-made fixtures below), translated, and read back with those tools:
the structure (markdown-it's tokens, entries and plural forms, units and inline codes) equal,
each text-bearing unit translated once, nothing else changed; damaged and hostile files are one
DocumentError."""

from __future__ import annotations

import subprocess

import pytest

from mt.text.documents import format_of, translate_document
from mt.text.html import HtmlFragment
from mt.text.limits import DocumentError, DocumentLimits
from mt.text.protect import KINDS, prepare

pytestmark = pytest.mark.requires("lxml", "markdown_it", "polib")
LIMITS = DocumentLimits()


class Upper:
    """Upper-cases each text, placeholders kept as the real callables keep them; counts what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def texts(self, texts: list[str]) -> list[str]:
        self.seen.extend(texts)
        out = []
        for text in texts:
            prepared = prepare(text, KINDS, False, lambda words: [1] * len(words))
            out.append(prepared.render(prepared.text.upper()))
        return out

    def html(self, fragments: list[str]) -> list[str]:
        out = []
        for markup in fragments:
            fragment = HtmlFragment(markup)
            out.append(fragment.render(self.texts(fragment.blocks)))
        return out


def translate(data: bytes, fmt: str, upper: Upper | None = None) -> bytes:
    upper = upper or Upper()
    return translate_document(data, fmt, upper.texts, upper.html, LIMITS)


def test_formats_are_registered() -> None:
    assert [format_of(name) for name in ("a.md", "B.MARKDOWN", "c.po", "d.xlf", "e.xliff")] == \
        ["md", "md", "po", "xliff", "xliff"]
    assert format_of("x", "xliff") == "xliff"


# ---------------------------------------------------------------------------------------- Markdown

MD = """---
title: A page
tags: [a, b]
---

# Hello *world* ##

Some text with **bold words** and a [link](http://example.com "Title") and `code here`.
A second line with <span>inline html</span>, a [ref link][ref] and [shortcut].
Hard break here\\
and after it.

> Quoted text
> on two lines.

- item one with _emphasis_
- item two
  continued here
  1. nested ordered

| Col A | Col `B` |
| ----- | ------- |
| cell a\\|x | cell b |

```python
print("keep me")
```

    indented code

<!-- a comment -->
<div>html block</div>

Setext heading
==============

[ref]: http://example.org
[shortcut]: http://example.net
Visit <http://auto.link> now. ![alt text](img.png)
"""


def _md_parts(text: str) -> tuple[list, list[str], set[int]]:
    from mt.text.markdown import _shape, parser

    tokens = parser().parse(text.split("\n---\n", 1)[1])
    words = [" ".join(c.content for c in t.children or () if c.type == "text").split() for t in tokens
             if t.type == "inline"]
    lines = {n for t in tokens if t.type == "inline" and t.map for n in range(*t.map)}
    return _shape(tokens), [" ".join(w) for w in words], lines


def test_markdown_keeps_structure_and_translates_every_block_once() -> None:
    upper = Upper()
    out = translate(MD.encode(), "md", upper).decode()
    shape, words, inline_lines = _md_parts(MD)
    out_shape, out_words, _ = _md_parts(out)
    assert out_shape == shape  # headings, lists, quotes, table, code, links and their targets
    # every block's words, and only them, translated (an autolink's text is its URL: kept)
    assert out_words == [w.upper().replace("HTTP://AUTO.LINK", "http://auto.link") for w in words]
    assert len(upper.seen) == len(set(upper.seen))  # each text once
    src_lines, out_lines = MD.split("\n"), out.split("\n")
    assert len(out_lines) == len(src_lines)
    offset = MD.split("\n---\n", 1)[0].count("\n") + 2  # the lines _md_parts parsed start after the front matter
    for n, line in enumerate(src_lines):  # everything outside text blocks byte for byte
        if n - offset not in inline_lines:
            assert out_lines[n] == line
    for kept in ('[LINK](http://example.com "Title")', "`code here`", "[SHORTCUT][shortcut]", "<http://auto.link>",
                 "![alt text](img.png)", "<span>INLINE HTML</span>", "HARD BREAK HERE\\\nAND AFTER IT.",
                 "| CELL A\\|X | CELL B |", "# HELLO *WORLD* ##", "  1. NESTED ORDERED", "> ON TWO LINES."):
        assert kept in out


def test_markdown_escapes_what_a_translation_would_turn_into_syntax() -> None:
    nasty = "1. - # > <div> [a](b) `c` _d_ | *e* ~~f~~ &amp; \\ === "

    def texts(found: list[str]) -> list[str]:
        return [nasty + text + " ---" for text in found]

    def html(fragments: list[str]) -> list[str]:
        return [HtmlFragment(m).render(texts(HtmlFragment(m).blocks)) for m in fragments]

    out = translate_document(MD.encode(), "md", texts, html, LIMITS).decode()
    assert _md_parts(out)[0] == _md_parts(MD)[0]
    assert all(nasty.split()[-2] in words for words in _md_parts(out)[1])


def test_markdown_hostile_nesting_is_one_line_or_bounded_by_its_words() -> None:
    """Work counted, not timed: a file nested too deep is refused before any text reaches the
    model; a flat line of 20,000 `[` and one word sends the model that word and nothing else (the
    run of symbols is a span: mt.text.protect), and comes back with every mark escaped."""
    deep = ("- " * 100_000 + "x\n").encode()
    upper = Upper()
    with pytest.raises(DocumentError, match="nested deeper than") as found:
        translate(deep, "md", upper)
    assert "\n" not in str(found.value) and upper.seen == []
    upper = Upper()
    assert translate(b"[" * 20_000 + b"x\n", "md", upper).count(b"\\[") == 20_000  # flat: answered, escaped
    assert [prepare(text, KINDS, False, lambda words: [1] * len(words)).text for text in upper.seen] == ["x"]
    with pytest.raises(DocumentError, match="not UTF-8"):
        translate(b"# caf\xe9\n", "md")


# ---------------------------------------------------------------------------------------- gettext

def _catalogue() -> bytes:
    import polib

    po = polib.POFile(wrapwidth=78)
    po.metadata = {"Project-Id-Version": "demo 1.0", "Language": "pl", "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8", "Content-Transfer-Encoding": "8bit",
                   "Plural-Forms": "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) "
                                   "? 1 : 2);"}
    po.append(polib.POEntry(msgid="Open the file", occurrences=[("src/app.c", "10")], comment="A menu entry",
                            tcomment="Keep it short"))
    po.append(polib.POEntry(msgid="Saved %d files in %s", flags=["c-format"], occurrences=[("src/app.c", "20")]))
    po.append(polib.POEntry(msgid="Hello %(name)s, welcome back", flags=["python-format"]))
    po.append(polib.POEntry(msgid="One file deleted", msgid_plural="%d files deleted", flags=["c-format"],
                            msgstr_plural={0: "", 1: "", 2: ""}))
    po.append(polib.POEntry(msgid="Open", msgctxt="verb"))
    po.append(polib.POEntry(msgid="Open", msgctxt="adjective"))
    po.append(polib.POEntry(msgid="Close", msgstr="Zamknij"))
    po.append(polib.POEntry(msgid="Quit", msgstr="Wyjdź", flags=["fuzzy"]))
    po.append(polib.POEntry(msgid="Old text", msgstr="", obsolete=True))
    po.append(polib.POEntry(msgid="Line one\nline two\n"))
    return str(po).encode("utf-8")


def test_po_fills_untranslated_entries_only_and_marks_them_fuzzy() -> None:
    import polib

    source = _catalogue()
    upper = Upper()
    out = translate(source, "po", upper)
    before, after = polib.pofile(source.decode()), polib.pofile(out.decode())
    assert after.metadata.pop("X-Generator").startswith("mt ") and after.metadata.pop("PO-Revision-Date")
    assert after.metadata == before.metadata and len(after) == len(before)  # the rest of the header as it was
    assert [(e.msgctxt, e.msgid, e.msgid_plural, e.obsolete, e.occurrences, e.comment, e.tcomment)
            for e in after] == [(e.msgctxt, e.msgid, e.msgid_plural, e.obsolete, e.occurrences, e.comment, e.tcomment)
                                for e in before]
    got = {(e.msgctxt, e.msgid): e for e in after}
    assert got[(None, "Open the file")].msgstr == "OPEN THE FILE"
    assert got[(None, "Saved %d files in %s")].msgstr == "SAVED %d FILES IN %s"  # placeholders kept
    assert got[(None, "Hello %(name)s, welcome back")].msgstr == "HELLO %(name)s, WELCOME BACK"
    plural = got[(None, "One file deleted")]
    assert plural.msgstr_plural == {0: "ONE FILE DELETED", 1: "%d FILES DELETED", 2: "%d FILES DELETED"}
    assert got[("verb", "Open")].msgstr == got[("adjective", "Open")].msgstr == "OPEN"  # contexts apart, not sent
    assert got[(None, "Line one\nline two\n")].msgstr == "LINE ONE\nLINE TWO\n"
    filled = [e for e in after if e.msgstr or any(e.msgstr_plural.values())]
    assert all("fuzzy" in e.flags for e in filled if e.msgid not in ("Close",))
    assert got[(None, "Close")].msgstr == "Zamknij" and got[(None, "Close")].flags == []  # translated: kept
    assert got[(None, "Quit")].msgstr == "Wyjdź"  # fuzzy: left alone
    assert got[(None, "Saved %d files in %s")].flags == ["fuzzy", "c-format"]  # first, as msgmerge writes it
    obsolete = [e for e in after if e.obsolete]
    assert len(obsolete) == 1 and obsolete[0].msgstr == ""
    assert sorted(upper.seen) == sorted(["Open the file", "Saved %d files in %s", "Hello %(name)s, welcome back",
                                         "One file deleted", "%d files deleted", "Open", "Open",
                                         "Line one\nline two\n"])


def test_po_written_as_gettext_writes_it_only_its_translations_new(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written catalogue (no header comment) comes back line for line but for its empty
    msgstr lines filled, a fuzzy flag before each filled entry's own flags, and the revision date,
    generator and the language's plural forms in the header (as Weblate writes them)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13 UTC
    source = ('msgid ""\nmsgstr ""\n"Language: de\\n"\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
              '#: app.py:10\n#, python-format\nmsgid "Hello %(name)s"\nmsgstr ""\n\n'
              'msgid "Bye"\nmsgstr ""\n')
    out = translate(source.encode(), "po", Upper()).decode()
    assert out == ('msgid ""\nmsgstr ""\n"PO-Revision-Date: 2023-11-14 22:13+0000\\n"\n"Language: de\\n"\n'
                   '"Content-Type: text/plain; charset=UTF-8\\n"\n"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n'
                   '"X-Generator: mt 0.1.0\\n"\n\n'
                   '#: app.py:10\n#, fuzzy, python-format\nmsgid "Hello %(name)s"\nmsgstr "HELLO %(name)s"\n\n'
                   '#, fuzzy\nmsgid "Bye"\nmsgstr "BYE"\n')


@pytest.mark.requires("msgfmt")
def test_po_output_passes_msgfmt_check(tmp_path) -> None:
    path = tmp_path / "pl.po"
    path.write_bytes(translate(_catalogue(), "po"))
    # --use-fuzzy: msgfmt skips fuzzy entries otherwise, and every entry mt filled is fuzzy
    found = subprocess.run(["msgfmt", "--check", "--use-fuzzy", "-o", str(tmp_path / "pl.mo"), str(path)],
                           capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    broken = path.read_text().replace("SAVED %d FILES IN %s", "SAVED FILES IN %s")
    path.write_text(broken)  # the check can fail: a lost %d is caught
    assert subprocess.run(["msgfmt", "--check", "--use-fuzzy", "-o", "/dev/null", str(path)],
                          capture_output=True).returncode != 0


def test_po_damaged_files_are_one_line() -> None:
    with pytest.raises(DocumentError, match=r"line 3") as found:
        translate(b'msgid ""\nmsgstr ""\nmsgid "a" "b" "c\nmsgstr ""\n', "po")
    assert "\n" not in str(found.value)
    with pytest.raises(DocumentError, match="charset ISO-8859-1"):
        translate(b'msgid ""\nmsgstr "Content-Type: text/plain; charset=ISO-8859-1\\n"\n\nmsgid "a"\nmsgstr ""\n',
                  "po")
    with pytest.raises(DocumentError, match="nplurals=99"):
        translate(b'msgid ""\nmsgstr "Plural-Forms: nplurals=99; plural=n;\\n"\n\nmsgid "a"\nmsgstr ""\n', "po")
    with pytest.raises(DocumentError, match="line 1"):  # a one-line upload naming a file is not read as that file
        translate(b"/etc/hostname", "po")


# ---------------------------------------------------------------------------------------- XLIFF

XLIFF12 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- made by hand -->
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="app.properties">
    <header><note>Header note</note></header>
    <body>
      <trans-unit id="greeting">
        <source>Hello %s, welcome back</source>
        <note from="developer">Shown on login</note>
      </trans-unit>
      <trans-unit id="bold" datatype="html">
        <source>Click <g id="1" ctype="bold">the red button</g> to <x id="2" ctype="lb"/>continue.</source>
        <target/>
      </trans-unit>
      <trans-unit id="done">
        <source>Already done</source>
        <target state="translated">Schon fertig</target>
      </trans-unit>
      <group translate="no">
        <trans-unit id="brand"><source>Acme Cloud</source></trans-unit>
      </group>
      <trans-unit id="code"><source>Run <ph id="3">&lt;cmd&gt;</ph> now</source></trans-unit>
    </body>
  </file>
</xliff>
"""

XLIFF20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="fr">
  <file id="f1">
    <notes><note>File note</note></notes>
    <unit id="u1">
      <segment><source>Save the file</source></segment>
      <ignorable><source> </source></ignorable>
      <segment state="initial"><source>Open <pc id="1" dataRefStart="b">all {0} files</pc><ph id="2"/>.</source>
      </segment>
    </unit>
    <unit id="u2" translate="no"><segment><source>Acme</source></segment></unit>
    <unit id="u3"><segment state="final"><source>Done</source><target>Fini</target></segment></unit>
  </file>
</xliff>
"""


def _xml(data: bytes):
    from lxml import etree

    return etree.fromstring(data)


def test_xliff12_fills_empty_targets_for_review() -> None:
    upper = Upper()
    out = translate(XLIFF12.encode(), "xliff", upper)
    root = _xml(out)
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    targets = {u.get("id"): u.find("x:target", ns) for u in root.iterfind(".//x:trans-unit", ns)}
    assert targets["greeting"].text == "HELLO %s, WELCOME BACK"
    assert targets["greeting"].get("state") == "needs-review-translation"
    assert targets["greeting"].get("state-qualifier") == "leveraged-mt"
    assert targets["greeting"].get("{http://www.w3.org/XML/1998/namespace}lang") == "de"
    bold = targets["bold"]
    assert [(c.tag.split("}")[1], c.get("id")) for c in bold] == [("g", "1"), ("x", "2")]
    assert "".join(bold.itertext()) == "CLICK THE RED BUTTON TO CONTINUE."
    assert targets["done"].text == "Schon fertig" and targets["done"].get("state") == "translated"
    assert targets["brand"] is None  # translate="no" on its group
    code = targets["code"]
    assert code[0].text == "<cmd>" and "".join(code.itertext()) == "RUN <cmd> NOW"
    assert sorted(upper.seen) == sorted(["Hello %s, welcome back", "Click the red button to continue.", "Run now"])
    assert b"<!-- made by hand -->" in out and b"Header note" in out and b"Shown on login" in out
    unit = root.find(".//x:trans-unit[@id='greeting']", ns)
    assert [c.tag.split("}")[1] for c in unit] == ["source", "target", "note"]


def test_xliff20_fills_segments_state_translated() -> None:
    upper = Upper()
    out = translate(XLIFF20.encode(), "xliff", upper)
    root = _xml(out)
    ns = {"x": "urn:oasis:names:tc:xliff:document:2.0"}
    segments = root.findall(".//x:segment", ns)
    assert [s.get("state") for s in segments] == ["translated", "translated", None, "final"]
    assert segments[0].find("x:target", ns).text == "SAVE THE FILE"
    second = segments[1].find("x:target", ns)
    assert [(c.tag.split("}")[1], c.get("id")) for c in second] == [("pc", "1"), ("ph", "2")]
    assert second[0].get("dataRefStart") == "b" and "{0}" in "".join(second.itertext())
    assert segments[2].find("x:target", ns) is None  # translate="no"
    assert segments[3].find("x:target", ns).text == "Fini"
    assert root.find(".//x:ignorable/x:target", ns) is None
    assert len(upper.seen) == 2


def test_xliff_hostile_and_damaged_files_are_one_line() -> None:
    laughs = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
              '<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file><body><trans-unit id="a">'
              '<source>&lol2;</source></trans-unit></body></file></xliff>')
    for data, problem in ((laughs.encode(), "DOCTYPE"), (XLIFF12.encode()[:300], "not well-formed"),
                          (b"<html><body/></html>", "not <xliff>")):
        with pytest.raises(DocumentError, match=problem) as found:
            translate(data, "xliff")
        assert "\n" not in str(found.value)
