"""The command-line reference (every command of `mt` and every option), generated from the Typer app.

docs/reference/cli.md holds it between the CLI-REFERENCE markers; the prose above them is written
by hand. The tables are read from the app in mt/cli.py (`typer.main.get_command`), the same Click
command tree `mt COMMAND --help` prints, with Rich markup removed from the help texts.

- `python scripts/tools/cli_reference.py` prints it; `--write` rewrites it in that page
  (tests/test_docs.py fails while the committed page is stale, naming this command, and while any
  option `--help` prints is missing from it). `make reference` rewrites both generated references.
- `mkdocs build` loads this file as a hook (mkdocs.yml, `hooks:`): the site's page is generated
  from the app as it is at build time, so the site is never stale.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# mkdocs loads this file as a hook by its path, with no package around it: the repository goes on
# sys.path so the page is generated from this checkout's mt (as scripts/tools/config_reference.py does).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import typer.main  # noqa: E402
from rich.markup import render  # noqa: E402

from mt.cli import app  # noqa: E402

PAGE = ROOT / "docs" / "reference" / "cli.md"
PAGE_URI = "reference/cli.md"  # the page, relative to docs/ (mkdocs' src_uri)
BEGIN, END = "<!-- CLI-REFERENCE:BEGIN -->", "<!-- CLI-REFERENCE:END -->"


def command_tree() -> Any:
    """The Click command tree of `mt`, as `mt --help` reads it."""
    return typer.main.get_command(app)


def commands(group: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(words after `mt`, command) for every command that runs (the groups `data`, `import` are
    walked), in the order `mt --help` lists them. The tree is Typer's (Click's API: a group has
    `commands`; Typer 0.2x carries its own copy of Click, so nothing here names a Click class)."""
    group = group or command_tree()
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        if hasattr(cmd, "commands"):
            yield from commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def plain(text: str | None) -> str:
    """A help text as `--help` shows it: Rich markup removed (`\\[serve]` -> `[serve]`), one line."""
    return " ".join(render(text or "").plain.split())


def _prose(text: str) -> str:
    """Text for the page: <run> outside a code span would be read as an HTML tag and vanish."""
    spans = text.split("`")
    return "`".join(s if i % 2 else s.replace("<", "&lt;") for i, s in enumerate(spans))


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a bare | would end the cell too."""
    return _prose(text.replace("|", "\\|"))


def option_names(param: Any) -> list[str]:
    """The flags of an option (`-c`, `--checkpoint`; `--segment`, `--no-segment`), or [] for an argument."""
    return [o for o in (*param.opts, *getattr(param, "secondary_opts", ())) if o.startswith("-")]


def _type(param: Any, ctx: Any) -> tuple[str, bool]:
    """(the type of one value as `--help` shows it, whether it is a list: repeatable / several)."""
    if hasattr(param, "display_type"):  # Typer >= 0.2x: '<int>', '<list[Path]>'
        shown = param.display_type(ctx).strip("<>")
    else:  # Click's own parameter types
        shown = param.type.name
    listed = re.fullmatch(r"list\[(.*)\]", shown)
    return (listed.group(1) if listed else shown), bool(listed) or bool(getattr(param, "multiple", False))


def _takes(param: Any, ctx: Any) -> str:
    """What the parameter takes: nothing for a flag, else its type (and `repeatable`, `required`)."""
    if getattr(param, "is_flag", False):
        return ""
    kind, several = _type(param, ctx)
    several_word = "repeatable" if option_names(param) else "one or more"
    return ", ".join([f"`{kind}`", *(w for w, on in ((several_word, several), ("required", param.required)) if on)])


def _default(param: Any) -> str:
    default: Any = param.default
    if getattr(param, "is_flag", False):
        if getattr(param, "secondary_opts", ()):  # --x/--no-x: the one in effect, or neither (None)
            return "" if default is None else f"`{param.opts[0] if default else param.secondary_opts[0]}`"
        return "off" if not default else "on"
    if param.required or default is None or default in ("", [], ()):
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{d}`" for d in default)
    return f"`{default}`"


def _usage(path: tuple[str, ...], cmd: Any) -> str:
    words = ["mt", *path, "[OPTIONS]"]
    for param in cmd.params:
        if not option_names(param):
            word = (param.name or "").upper() + ("..." if param.nargs == -1 else "")
            words.append(word if param.required else f"[{word}]")
    return " ".join(words)


def section(path: tuple[str, ...], cmd: Any) -> list[str]:
    """One command: its heading, help, usage and a table of its arguments and options."""
    lines = [f"### `mt {' '.join(path)}`", ""]
    for paragraph in re.split(r"\n\s*\n", cmd.help or ""):
        if paragraph.strip():
            lines += [_prose(plain(paragraph)), ""]
    ctx = cmd.context_class(cmd, info_name=" ".join(("mt", *path)))
    lines += ["```text", _usage(path, cmd), "```", "",
              "| argument or option | takes | default | what it does |", "| --- | --- | --- | --- |"]
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        names = option_names(param) or [(param.name or "").upper()]
        shown = ", ".join(f"`{n}`" for n in names)
        lines.append(f"| {shown} | {_takes(param, ctx)} | {_default(param)} | {_cell(plain(getattr(param, 'help', '')))} |")
    lines.append("| `--help` | | | Show the help and exit. |")
    return lines + [""]


def reference() -> str:
    """Every command's section, in the order `mt --help` lists them."""
    out = []
    for path, cmd in commands():
        out += section(path, cmd)
    return "\n".join(out).rstrip() + "\n"


def fill(page: str) -> str:
    """`page` with the text between the markers replaced by the current reference."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{reference()}{END}{tail}"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: the command-line page gets the reference of the code being built."""
    return fill(markdown) if page.file.src_uri == PAGE_URI else markdown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.relative_to(ROOT)} between its markers")
    args = parser.parse_args(argv)
    if args.write:
        page = PAGE.read_text(encoding="utf-8")
        new = fill(page)
        if new != page:
            PAGE.write_text(new, encoding="utf-8")
        print(f"{PAGE.relative_to(ROOT)}: {'rewritten' if new != page else 'already current'}")
    else:
        sys.stdout.write(reference())


if __name__ == "__main__":
    main()
