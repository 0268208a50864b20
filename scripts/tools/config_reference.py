"""The configuration reference (every key, its default and its comment), generated from mt/config.py.

docs/reference/configuration.md holds the tables between the CONFIG-REFERENCE markers.

- `python scripts/tools/config_reference.py` prints them; `--write` rewrites them in that page
  (tests/test_docs.py fails while the committed page is stale, naming this command).
- `mkdocs build` loads this file as a hook (mkdocs.yml, `hooks:`): the site's page is generated
  from the dataclasses as they are at build time, so the site is never stale.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[2]
# mkdocs loads this file as a hook (mkdocs.yml) by its path, with no package around it: the one
# script that still puts the repository on sys.path, so the site is built from this checkout's mt
# (not another one installed in the environment).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mt.config import Config  # noqa: E402
from mt.config_load import config_to_dict  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "configuration.md"
PAGE_URI = "reference/configuration.md"  # the page, relative to docs/ (mkdocs' src_uri)
BEGIN, END = "<!-- CONFIG-REFERENCE:BEGIN -->", "<!-- CONFIG-REFERENCE:END -->"


def _comments(cls: type) -> dict[str, str]:
    """Field name -> its comment in the class source: the `#:` lines right above the field, joined
    (the Sphinx convention, for a comment too long to trail the field), else its trailing `# comment`.
    A plain `#` line above a field is a note on the fields that follow, not the field's."""
    out = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        doc = re.match(r"\s+#:\s*(.*)$", line)
        if doc:
            above.append(doc.group(1).strip())
            continue
        m = re.match(r"\s+(\w+):[^#]*?(?:#\s*(.*))?$", line)
        if m:
            out[m.group(1)] = " ".join(above) or (m.group(2) or "").strip()
        above = []
    return out


def _meaning(comment: str, tp: Any) -> str:
    """The table cell: the field's comment plus, for a choice key, its choices (from the Literal)."""
    parts = [comment] if comment else []
    if typing.get_origin(tp) is Literal:
        parts.append("choices: " + ", ".join(f"`{c}`" for c in typing.get_args(tp)))
    text = "; ".join(parts).replace("|", "\\|")  # a bare | would end the table cell
    # <unk> outside a code span would be read as an HTML tag and vanish from the page
    spans = text.split("`")
    return "`".join(s if i % 2 else s.replace("<", "&lt;") for i, s in enumerate(spans))


def _list_item(tp: Any) -> type | None:
    """The dataclass of a `tuple[SomeConfig, ...]` field (a list of sections, e.g. data.pairs), else None."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args and dataclasses.is_dataclass(args[0]):
        return args[0]
    return None


def _rows(prefix: str, cls: type, value: Any, written: dict[str, Any] | None = None) -> list[str]:
    """One table row per field of the dataclass `cls` (defaults from `value`, an instance of it, or
    from `written`, that instance as a config file holds it: `config_to_dict`)."""
    notes = _comments(cls)
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):  # a section of the section: a table of its own
            continue
        default = written[f.name] if written is not None else getattr(value, f.name)
        shown = list(default) if isinstance(default, tuple) else default
        meaning = _meaning(notes.get(f.name, ""), hints[f.name])
        rows.append(f"| `{prefix}.{f.name}` | `{shown!r}` | {meaning} |")
    return rows


def _table(rows: list[str]) -> list[str]:
    return ["| key | default | meaning |", "| --- | --- | --- |", *rows]


def _section(prefix: str, value: Any, written: dict[str, Any], heading: str) -> list[str]:
    """The heading and table of the section `value` (a config dataclass) at `prefix`, then one for
    each section inside it (decode.search: `heading` one level down) and for the fields of each
    entry of a list-of-sections key (such as data.pairs)."""
    cls = type(value)
    doc = " ".join((cls.__doc__ or "").split()) if heading != "###" else (cls.__doc__ or "").strip().splitlines()[0]
    out = ["", f"{heading} `{prefix}`", "", doc, "", *_table(_rows(prefix, cls, value, written))]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _section(f"{prefix}.{f.name}", getattr(value, f.name), written[f.name], heading + "#")
            continue
        item = _list_item(hints[f.name])
        if item is None:
            continue
        item_doc = " ".join((item.__doc__ or "").split())
        out += ["", f"{heading}# Each entry of `{prefix}.{f.name}`", "", item_doc, "",
                *_table(_rows(f"{prefix}.{f.name}[]", item, item()))]
    return out


def reference() -> str:
    """The reference as Markdown: one heading and table per config section, and one for the fields of
    each entry of a list-of-sections key (such as data.pairs)."""
    top = Config()
    written = config_to_dict(top)  # as a config file writes them (a bilingual model's `pairs: []`)
    out = ["### Top level", "",
           *_table(["| `name` | file name | run directory is `run_root/name` |",
                    f"| `run_root` | `{top.run_root}` | where run directories live |"])]
    for section in dataclasses.fields(Config):
        value = getattr(top, section.name)
        if dataclasses.is_dataclass(value):
            out += _section(section.name, value, written[section.name], "###")
    return "\n".join(out)


def fill(text: str, where: str = str(PAGE)) -> str:
    """`text` with the reference between the markers replaced by the current one."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{where}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{reference()}\n{END}{tail}"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """mkdocs hook: the configuration page gets the reference of the dataclasses as they are now."""
    if page.file.src_uri == PAGE_URI:
        return fill(markdown, page.file.src_uri)
    return markdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"rewrite the tables inside {PAGE.relative_to(ROOT)}")
    args = parser.parse_args()
    if not args.write:
        print(reference())
        return
    PAGE.write_text(fill(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated {PAGE}")


if __name__ == "__main__":
    main()
