"""Print the config reference table (every key, its default and its comment) from mt/config.py.

README.md embeds this output between the CONFIG-REFERENCE markers; tests/test_readme.py checks
that it is current. Regenerate with: .venv/bin/python scripts/config_reference.py --write
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

from mt.config import Config

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- CONFIG-REFERENCE:BEGIN -->", "<!-- CONFIG-REFERENCE:END -->"


def _comments(cls: type) -> dict[str, str]:
    """Field name -> its trailing `# comment` in the class source."""
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+):[^#]*?(?:#\s*(.*))?$", line)
        if m:
            out[m.group(1)] = (m.group(2) or "").strip()
    return out


def _meaning(comment: str, tp: Any) -> str:
    """The table cell: the field's comment plus, for a choice key, its choices (from the Literal)."""
    parts = [comment] if comment else []
    if typing.get_origin(tp) is Literal:
        parts.append("choices: " + ", ".join(f"`{c}`" for c in typing.get_args(tp)))
    return "; ".join(parts).replace("|", "\\|")  # a bare | would end the table cell


def reference() -> str:
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    top = Config()
    rows.append("| `name` | file name | run directory is `run_root/name` |")
    rows.append(f"| `run_root` | `{top.run_root}` | where run directories live |")
    for section in dataclasses.fields(Config):
        value = getattr(top, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        notes = _comments(type(value))
        hints = typing.get_type_hints(type(value))
        doc = (type(value).__doc__ or "").strip().splitlines()[0]
        rows.append(f"| **{section.name}** | | {doc} |")
        for f in dataclasses.fields(value):
            default = getattr(value, f.name)
            shown = list(default) if isinstance(default, tuple) else default
            meaning = _meaning(notes.get(f.name, ""), hints[f.name])
            rows.append(f"| `{section.name}.{f.name}` | `{shown!r}` | {meaning} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the table inside README.md")
    args = parser.parse_args()
    table = reference()
    if not args.write:
        print(table)
        return
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        sys.exit(f"{README}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", encoding="utf-8")
    print(f"updated {README}")


if __name__ == "__main__":
    main()
