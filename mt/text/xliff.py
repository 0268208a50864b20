"""XLIFF 1.2 and 2.0 (.xlf, .xliff): the segments without a translation filled in, marked for review.

Worked on with lxml directly, not translate-toolkit: the toolkit is GPL-2.0-or-later (mt is
not), pulls in its own stack, and reads a unit's inline codes into its placeables model only to
write them back; on the XML the file keeps every element, attribute, note, comment and
processing instruction mt does not fill, the way .docx and .odt keep their parts. The parser is
`mt.text.zipparts`'s: entities and DTDs are never expanded or fetched, and a file with a DOCTYPE
(which XLIFF never needs: its schemas are namespaces) is refused in one line, billion laughs
included.

What is filled (as translate-toolkit's `pretranslate` and Weblate's machine translation do):
- 1.2: each `<trans-unit>` whose `<target>` is missing or empty and that is not
  `translate="no"` (on itself or a `<group>` around it). The new `<target>` follows `<source>`
  (or `<seg-source>`), with `state="needs-review-translation"` and
  `state-qualifier="leveraged-mt"` (1.2's "needs review" state and its qualifier for machine
  translation), `xml:lang` from the file's `target-language` when it has one.
- 2.0: each `<segment>` of a `<unit>` (not `translate="no"`, inherited) whose `<target>` is
  missing or empty; its `state` becomes `translated`, and the unit gets a `<note category="mt"
  appliesTo="target">` saying its targets are machine translation, not reviewed (`MT_NOTE`).
- Given confidences (`scored`), a plain segment whose translation is under `LOW_CONFIDENCE` (0.3,
  `mt.text.uistrings`) gets a note a reviewer sees: 1.2 `<note from="mt" annotates="target">`,
  2.0 a `<note category="mt-confidence" appliesTo="target">` in its unit's notes. XLIFF 2.0 has four
  states only (initial, translated, reviewed, final): `translated` is the one before review, which
  translate-toolkit (and so Weblate) reads as translated but not reviewed; no `subState` is written,
  since its values belong to a named authority.
Everything else (units with targets, `<note>`s, `<context-group>`s, `<ignorable>`s, other files'
bodies) is left as it was.

Inline elements cross the model like a .docx run's formatting: a source with elements becomes an
HTML fragment for `translate_html`, paired codes with translatable content (1.2 `<g>`, `<mrk>`;
2.0 `<pc>`, `<mrk>`) as `<span>`s whose words land on what translates them, every other code
(`<x/>`, `<bx/>`, `<ex/>`, `<bpt>`, `<ept>`, `<ph>`, `<it>`; 2.0 `<ph/>`, `<sc/>`, `<ec/>`,
`<sm/>`, `<em/>`, `<cp/>`) as an empty `<code>`, which the model never reads and which comes back
as a copy of the element, id and content unchanged. A source of plain text goes through
`translate_texts` (line breaks kept) with the UI-string rules of `mt.text.uistrings` (an
accelerator `_`, `&` or `~` that the file's sources use taken out and put back, brackets balanced,
a doubled word once). Placeholders in the text are protected by those callables
(mt.text.protect), as in .po files.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from html import escape
from html.parser import HTMLParser

from lxml import etree

from mt.text.inline import NOT_XML
from mt.text.limits import DocumentError, DocumentLimits, check_units
from mt.text.uistrings import Scored, accelerator_of, low_confidence_note, translate_messages, unscored
from mt.text.zipparts import parse_xml

Translate = Callable[[list[str]], list[str]]
NS = {"urn:oasis:names:tc:xliff:document:1.2": "1.2", "urn:oasis:names:tc:xliff:document:2.0": "2"}
PAIRED = frozenset(("g", "mrk", "pc"))  # inline elements whose content is text to translate
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
MT_NOTE = "Machine translation (mt): not reviewed."  # 2.0: what 1.2's state-qualifier="leveraged-mt" says


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname if isinstance(element.tag, str) else ""


def _kept(element: etree._Element) -> bool:
    """Whether `element` or an element around it says translate="no"."""
    return any(node.get("translate") == "no" for node in (element, *element.iterancestors()))


def _empty(target: etree._Element | None) -> bool:
    return target is None or (not (target.text or "").strip() and len(target) == 0)


def _to_html(element: etree._Element, codes: list[etree._Element]) -> str:
    """The content of `element` as an HTML fragment; `codes` collects its inline elements by index."""
    out = [escape(element.text or "", quote=False)]
    for child in element:
        if isinstance(child.tag, str):
            codes.append(child)
            k = len(codes) - 1
            if _local(child) in PAIRED:
                out.append(f'<span data-x="{k}">{_to_html(child, codes)}</span>')
            else:
                out.append(f'<code data-x="{k}"></code>')
        out.append(escape(child.tail or "", quote=False))
    return "".join(out)


class _Builder(HTMLParser):
    """A translated fragment into a target element: text, copies of the paired codes refilled,
    copies of the other codes as they were."""

    def __init__(self, target: etree._Element, codes: list[etree._Element]) -> None:
        super().__init__(convert_charrefs=True)
        self.codes = codes
        self.open: list[etree._Element | None] = [target]  # where text goes; None inside a kept code

    def _add(self, element: etree._Element) -> None:
        parent = self.open[-1]
        if parent is not None:
            parent.append(element)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs).get("data-x") or ""
        code = self.codes[int(found)] if found.isdigit() and int(found) < len(self.codes) else None
        if code is None or self.open[-1] is None:
            self.open.append(self.open[-1])
            return
        if tag == "span":
            made = code.makeelement(code.tag, dict(code.attrib))
            self._add(made)
            self.open.append(made)
        else:
            made = copy.deepcopy(code)
            made.tail = None
            self._add(made)
            self.open.append(None)

    def handle_endtag(self, tag: str) -> None:
        if len(self.open) > 1:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        parent = self.open[-1]
        if parent is None:
            return
        data = NOT_XML.sub("", data)
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + data
        else:
            parent.text = (parent.text or "") + data


def _slots(root: etree._Element, version: str) -> list[tuple[etree._Element, etree._Element]]:
    """(source, the element its target belongs in) for every source to translate, in order."""
    ns = etree.QName(root).namespace
    found = []
    if version == "1.2":
        for unit in root.iter(f"{{{ns}}}trans-unit"):
            source = unit.find(f"{{{ns}}}source")
            if source is not None and not _kept(unit) and _empty(unit.find(f"{{{ns}}}target")):
                found.append((source, unit))
    else:
        for unit in root.iter(f"{{{ns}}}unit"):
            if _kept(unit):
                continue
            for segment in unit.iterchildren(f"{{{ns}}}segment"):
                source = segment.find(f"{{{ns}}}source")
                if source is not None and _empty(segment.find(f"{{{ns}}}target")):
                    found.append((source, segment))
    return [(source, parent) for source, parent in found if "".join(source.itertext()).strip()]


def _place(source: etree._Element, parent: etree._Element, version: str) -> etree._Element:
    """The empty target of `source` (an empty one reused), after the source as the schema orders it."""
    ns = etree.QName(source).namespace
    target = parent.find(f"{{{ns}}}target")
    if target is None:
        target = parent.makeelement(f"{{{ns}}}target", {})
        after = parent.find(f"{{{ns}}}seg-source") if version == "1.2" else None
        anchor = after if after is not None else source
        anchor.addnext(target)
        target.tail, anchor.tail = anchor.tail, source.tail
    target.text = None
    for child in list(target):
        target.remove(child)
    if version == "1.2":
        target.set("state", "needs-review-translation")
        target.set("state-qualifier", "leveraged-mt")
        file = next((node for node in parent.iterancestors() if _local(node) == "file"), None)
        if file is not None and file.get("target-language") and target.get(XML_LANG) is None:
            target.set(XML_LANG, file.get("target-language"))
    else:
        parent.set("state", "translated")
        _note(parent.getparent())
    return target


def _confidence_note(parent: etree._Element, version: str, text: str) -> None:
    """A low-confidence note on the target: 1.2, a `<note from="mt" annotates="target">` at the end
    of the trans-unit (where the schema lets notes follow the target); 2.0, one in its unit's notes."""
    ns = etree.QName(parent).namespace
    if version == "1.2":
        note = parent.makeelement(f"{{{ns}}}note", {"from": "mt", "annotates": "target"})
        last = parent[-1] if len(parent) else None
        parent.append(note)
        if last is not None:
            note.tail, last.tail = last.tail, (parent.text or "")
    else:
        notes = parent.getparent().find(f"{{{ns}}}notes")
        note = notes.makeelement(f"{{{ns}}}note", {"category": "mt-confidence", "appliesTo": "target"})
        notes.append(note)
    note.text = text


def _note(unit: etree._Element) -> None:
    """A 2.0 unit's note that its targets are machine translation (once per unit), in its `<notes>`
    (made where the schema puts it: before `<originalData>` and the segments)."""
    ns = etree.QName(unit).namespace
    notes = unit.find(f"{{{ns}}}notes")
    if notes is None:
        notes = unit.makeelement(f"{{{ns}}}notes", {})
        anchor = next((child for child in unit
                       if _local(child) in ("originalData", "segment", "ignorable")), None)
        if anchor is None:
            unit.append(notes)
        else:
            anchor.addprevious(notes)
            notes.tail = anchor.getprevious().tail if anchor.getprevious() is not None else None
    if not any(note.get("category") == "mt" for note in notes):
        note = notes.makeelement(f"{{{ns}}}note", {"category": "mt", "appliesTo": "target"})
        note.text = MT_NOTE
        notes.append(note)


def translate_xliff(data: bytes, translate_texts: Translate, translate_html: Translate,
                    limits: DocumentLimits, *, scored: Scored | None = None) -> bytes:
    """The XLIFF `data` with every untranslated segment filled (see the module docstring). With
    `scored` (texts -> (translation, confidence)) in place of `translate_texts`, a plain segment
    under the low-confidence threshold gets a note on its target."""
    root = parse_xml(data, "XLIFF")
    if root.getroottree().docinfo.doctype:
        raise DocumentError("XLIFF: a DOCTYPE (DTD) is not allowed; entities are never expanded")
    version = NS.get(etree.QName(root).namespace or "")
    if _local(root) != "xliff" or version is None:
        raise DocumentError("XLIFF: the root is not <xliff> in the XLIFF 1.2 or 2.0 namespace")
    slots = _slots(root, version)
    check_units(len(slots), "segments", limits)
    plain = [k for k, (source, _) in enumerate(slots) if len(source) == 0]
    marked = [k for k, (source, _) in enumerate(slots) if len(source)]
    codes: dict[int, list[etree._Element]] = {k: [] for k in marked}
    fragments = [_to_html(slots[k][0], codes[k]) for k in marked]
    sources = [slots[k][0].text or "" for k in plain]
    texts = (translate_messages(sources, scored or unscored(translate_texts), accelerator_of(sources))
             if plain else [])
    markup = translate_html(fragments) if fragments else []
    for k, (text, sure) in zip(plain, texts):
        _place(*slots[k], version).text = NOT_XML.sub("", text)
        note = low_confidence_note(sure)
        if note:
            _confidence_note(slots[k][1], version, note)
    for k, html in zip(marked, markup):
        builder = _Builder(_place(*slots[k], version), codes[k])
        builder.feed(html)
        builder.close()
    # Node by node: lxml drops the line breaks between a comment before the root and the root.
    around = [*reversed(list(root.itersiblings(preceding=True))), root, *root.itersiblings()]
    return b"\n".join([b'<?xml version="1.0" encoding="UTF-8"?>', *(etree.tostring(node, encoding="UTF-8")
                                                                       for node in around)]) + b"\n"
