"""Markdown's inline content through the HTML path and back (`mt.text.markdown`'s other half).

`to_html(children)`: a block's inline tokens (markdown-it) as an HTML fragment for
`translate_html`, with the `Mark`s its `data-m="k"` attributes stand for (emphasis markers, a
link's destination as written, the source text of code, autolinks, images and inline HTML).
`parts(markup, marks, strict)`: a translated fragment back as Markdown pieces, split at hard
line breaks; `words` and `wrap` lay them out in lines, text escaped where it would become syntax
(strictly: every ASCII punctuation mark, `*` for `_` emphasis) and a line's first character where
it would start another block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser

from markdown_it.token import Token

OPAQUE_KINDS = ("code_inline", "image", "html_inline")  # source text kept, never translated
_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark: CommonMark lets each be escaped
_SPECIAL = re.compile(r"([\\`*_\[\]<~])|&(?=#?\w+;)")  # what turns text into inline syntax
_BLOCK_START = re.compile(r"[#>+=|-]|\d{1,9}[.)]")  # what turns a line into another block


@dataclass
class Mark:
    """What `data-m="k"` stands for: the syntax written before and after the element's content;
    `opaque`: the whole source text, its content never translated."""

    before: str
    after: str = ""
    opaque: bool = False


def to_html(children: list[Token]) -> tuple[str, list[Mark]]:
    """A block's inline tokens as an HTML fragment for `translate_html`, and its marks (module docstring)."""
    out: list[str] = []
    marks: list[Mark] = []
    skip = 0  # inside an autolink: its text is the URL, kept with the link
    for token in children:
        kind = token.type
        if skip:
            skip += token.nesting
            continue
        if kind == "text":
            out.append(escape(token.content, quote=False))
        elif kind == "softbreak":
            out.append("\n")
        elif kind == "hardbreak":
            out.append("<br>")
        elif kind in OPAQUE_KINDS or (kind == "link_open" and token.markup == "autolink"):
            code = escape(token.meta.get("src", token.content), quote=False)
            out.append(f'<code data-m="{len(marks)}">{code}</code>')
            marks.append(Mark(token.meta.get("src", token.content), opaque=True))
            skip = 1 if kind == "link_open" else 0
        elif kind == "link_open":
            tail = token.meta.get("tail", "")
            if tail in ("]", "][]"):  # shortcut / collapsed reference: the translated text is no label
                tail = f"][{token.meta.get('label', '')}]"
            out.append(f'<a href="{escape(str(token.attrGet("href") or ""))}" data-m="{len(marks)}">')
            marks.append(Mark("[", tail))
        elif kind in ("em_open", "strong_open", "s_open"):
            out.append(f'<{token.tag} data-m="{len(marks)}">')
            marks.append(Mark(token.markup, token.markup))
        elif kind in ("em_close", "strong_close", "s_close", "link_close"):
            out.append(f"</{token.tag}>")
        else:  # anything a plugin adds: its content as text
            out.append(escape(token.content, quote=False))
    return "".join(out), marks


class _Back(HTMLParser):
    """A translated fragment back into parts: ("text", t) to escape, ("raw", syntax), ("br", "")."""

    def __init__(self, marks: list[Mark], strict: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.marks, self.strict = marks, strict
        self.parts: list[tuple[str, str]] = []
        self.stack: list[tuple[str, bool]] = []  # per open element: syntax after it, whether opaque
        self.hidden = 0  # open opaque elements: their content is the source's, already written

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.parts.append(("br", ""))
            return
        found = dict(attrs).get("data-m") or ""
        mark = self.marks[int(found)] if found.isdigit() and int(found) < len(self.marks) else None
        if mark is None:
            self.stack.append(("", False))
            return
        before, after = mark.before, mark.after
        if self.strict and not mark.opaque and before in ("_", "__"):  # `*` also works inside a word
            before = after = "*" * len(before)
        if not self.hidden:
            self.parts.append(("raw", before))
        self.stack.append((after, mark.opaque))
        self.hidden += mark.opaque

    def handle_endtag(self, tag: str) -> None:
        if tag == "br" or not self.stack:
            return
        after, opaque = self.stack.pop()
        self.hidden -= opaque
        if after and not self.hidden:
            self.parts.append(("raw", after))

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(("text", data))


def _escape(text: str, strict: bool) -> str:
    return _PUNCT.sub(r"\\\1", text) if strict else _SPECIAL.sub(lambda m: "\\" + (m.group(1) or "&"), text)


def words(parts: list[tuple[str, str]], strict: bool) -> list[tuple[str, bool]]:
    """One line's worth of parts as words (text split at its spaces, syntax never split), each with
    whether a line may start with it (a word that begins with syntax might begin a block)."""
    words: list[list] = [["", False]]
    for kind, text in parts:
        if kind == "raw":
            words[-1][0] += text
            continue
        pieces = re.split(r"\s+", text)
        words[-1][0] += _escape(pieces[0], strict)
        for piece in pieces[1:]:
            words.append([_escape(piece, strict), True])
    return [(word, starts) for word, starts in words if word]


def _guard(line: str) -> str:
    """A line's text with its first character escaped when it would start another block."""
    found = _BLOCK_START.match(line)
    if not found:
        return line
    at = found.end() - 1
    return line[:at] + "\\" + line[at:]


def wrap(words: list[tuple[str, bool]], widths: list[int]) -> list[str]:
    """`words` in at most len(widths) lines, breaks where the source's line widths put them as
    near as a word that may start a line allows; no line empty."""
    if not words:
        return []
    total = sum(len(word) + 1 for word, _ in words)
    scale = total / (sum(widths) + len(widths))
    lines: list[str] = []
    current: list[str] = []
    done, target, line = 0, 0.0, 0
    for word, may_start in words:
        if (current and may_start and line + 1 < len(widths)
                and done + len(word) / 2 > target + (widths[line] + 1) * scale):
            lines.append(" ".join(current))
            target += (widths[line] + 1) * scale
            line += 1
            current = []
        current.append(word)
        done += len(word) + 1
    lines.append(" ".join(current))
    return [_guard(text) for text in lines]


def parts(markup: str, marks: tuple[Mark, ...], strict: bool) -> list[list[tuple[str, str]]]:
    """A translated fragment as parts, split at its hard line breaks (a code's own line breaks
    become spaces: a continuation line would lose its container's markers)."""
    back = _Back(list(marks), strict)
    back.feed(markup)
    back.close()
    groups: list[list[tuple[str, str]]] = [[]]
    for kind, text in back.parts:
        if kind == "br":
            groups.append([])
        else:
            groups[-1].append((kind, text.replace("\n", " ") if kind == "raw" else text))
    return groups
