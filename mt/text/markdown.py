"""Markdown (.md): headings, paragraphs, list items, block quotes and table cells translated;
everything else byte for byte.

Read with markdown-it-py (CommonMark, GFM tables and strikethrough enabled), the parser the
executable-books tools (MyST, mdformat) are built on. Only the source lines of blocks that hold
inline text are rewritten, located by the tokens' line maps: fenced and indented code, HTML blocks
and comments, reference-link definitions, thematic breaks, blank lines, container markers (`> `,
`- `, `1. `, indentation), a heading's `#`s and a table's pipes and delimiter row stay as they
were. YAML front matter (a first line `---` up to the next `---` or `...`) is kept whole, keys and
values: it holds slugs, dates and layout names as often as titles, and mt cannot tell them apart.

A block's inline content crosses the model as an HTML fragment (`translate_html`, as .docx runs
do; `mt.text.markdown_inline` is that half): emphasis becomes `<em>`/`<strong>`/`<s>` and a link
`<a>`, so they land on the words that translate what they marked; inline code, autolinks, images
and inline HTML become `<code>`, which
the HTML path never sends to the model, and come back as their source text. Each tag carries
`data-m="k"`, the index of its source syntax: the emphasis marker (`*`, `_`, `**`), the link's
destination part as written (`](url "title")`, `][ref]`; a shortcut or collapsed reference link
`[text]` is written `[translated][text]` so it still finds its definition). Text is escaped where
it would become syntax (`*`, `_`, `[`, a `#` or `1.` starting a line...). A block's translation is
wrapped to its source's line count where breaks can go (never inside code or a link's URL), and
a hard line break stays one.

The result is parsed again and its structure (block tokens with their nesting, each block's
inline emphasis, links and code, link targets) compared with the source's: a block whose inline
structure differs is written again with every punctuation mark escaped and `*` markers (the
model's punctuation can close an emphasis early); a difference in block structure is a
DocumentError, never a silently different document. Parsing is linear in the input; nesting
deeper than `MAX_NESTING` levels (100,000 list markers on a line) is refused in one line before
anything is translated.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from mt.text.limits import DocumentError, DocumentLimits, check_units, decode_text
from mt.text.markdown_inline import OPAQUE_KINDS, Mark, parts, to_html, words, wrap

logger = logging.getLogger("mt.text.markdown")

# open blocks or inline elements at once (markdown-it's own default is 100; real files nest < 10)
MAX_NESTING = 64
_LINE_END = re.compile(r"\r\n?|\n")
_PREFIX_ONLY = re.compile(r"(?:[ \t>]|[-+*][ \t]|\d{1,9}[.)][ \t])*")  # container markers before a table row

Translate = Callable[[list[str]], list[str]]


def _recorded(rule: Callable[[StateInline, bool], bool],
              kinds: tuple[str, ...]) -> Callable[[StateInline, bool], bool]:
    """`rule` that also stores the source text it consumed on the token it made (its `meta["src"]`;
    a link's label in `meta["label"]`): markdown-it keeps no inline positions."""

    def run(state: StateInline, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        ok = rule(state, silent)
        if ok and not silent:
            token = next((t for t in state.tokens[count:] if t.type in kinds), None)
            if token is not None:
                token.meta["src"] = state.src[start:state.pos]
                if token.type == "link_open" and token.markup != "autolink":
                    end = state.md.helpers.parseLinkLabel(state, start, True)
                    token.meta["label"] = state.src[start + 1:end] if end > start else ""
                    token.meta["tail"] = state.src[end:state.pos] if end > start else ""
        return ok

    return run


def parser() -> MarkdownIt:
    """CommonMark with GFM tables and strikethrough, recording inline source text (`_recorded`)."""
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable(["table", "strikethrough"])
    for name, kinds in (("link", ("link_open",)), ("image", ("image",)), ("autolink", ("link_open",)),
                        ("html_inline", ("html_inline",)), ("backticks", ("code_inline",))):
        rule = md.inline.ruler.__rules__[md.inline.ruler.__find__(name)].fn
        md.inline.ruler.at(name, _recorded(rule, kinds))
    return md


def _located(source: str, content: str) -> int:
    """Where `content` (a block's line as markdown-it read it) starts in its source line."""
    kept = source.rstrip()
    wanted = content.strip()
    if not kept.endswith(wanted):
        raise DocumentError(f"Markdown: cannot place a translation in the line {source[:60]!r}")
    return len(kept) - len(wanted)


@dataclass
class _Block:
    """An inline-bearing block: its inline token, how its source lines hold it, and its marks."""

    inline: Token
    kind: str  # "lines" (a paragraph or setext heading), "atx" (a `#` heading), "cell" (a table cell)
    line: int  # its first source line
    column: int = 0  # a cell's column; an ATX heading's level
    html: str = ""
    marks: tuple[Mark, ...] = ()


def _front_matter(lines: list[str]) -> int:
    """How many first lines are YAML front matter (`---` ... `---` or `...`), 0 when none."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    return 0 if end is None else end + 1


def _blocks(tokens: list[Token]) -> list[_Block]:
    """Every block with inline text to translate, in order (a code-only paragraph is left as it is)."""
    found: list[_Block] = []
    column = 0
    for i, token in enumerate(tokens):
        if token.type in ("tr_open",):
            column = -1
        if token.type in ("th_open", "td_open"):
            column += 1
        if token.type != "inline" or not token.map or not token.children:
            continue
        if not any(child.type == "text" and child.content.strip() for child in token.children):
            continue
        parent = tokens[i - 1]
        if parent.type in ("th_open", "td_open"):
            kind = "cell"
        elif parent.type == "heading_open" and parent.markup.startswith("#"):
            kind, column = "atx", len(parent.markup)
        else:
            kind = "lines"
        html, marks = to_html(token.children)
        found.append(_Block(token, kind, token.map[0], column, html, tuple(marks)))
    return found


def _shape(tokens: list[Token]) -> list[tuple]:
    """The structure the translation must keep: each token's type, tag, nesting, level and markup,
    an inline token as its children's emphasis, links (with their targets), code and breaks."""
    shape: list[tuple] = []
    for token in tokens:
        if token.type == "inline":
            shape.append(("inline", tuple((c.type, c.nesting, c.attrGet("href") or c.attrGet("src"))
                                          for c in token.children or ()
                                          if c.type not in ("text", "softbreak"))))
        else:
            shape.append((token.type, token.tag, token.nesting, token.level, token.markup))
    return shape


def _parse(md: MarkdownIt, lines: list[str], front: int) -> list[Token]:
    tokens = md.parse("\n".join([""] * front + lines[front:]))
    if any(token.level >= MAX_NESTING - 1 for token in tokens):
        raise DocumentError(f"Markdown nested deeper than {MAX_NESTING} levels (lists, quotes); "
                            "not translated")
    return tokens


def _groups(block: _Block) -> list[list[int]]:
    """The block's source line offsets, grouped between hard line breaks."""
    groups, line = [[0]], 0
    for child in block.inline.children or ():
        source = (child.meta.get("tail", child.meta.get("src", ""))
                  if child.type in (*OPAQUE_KINDS, "link_open") else "")
        line += source.count("\n")
        if child.type in ("softbreak", "hardbreak"):
            line += 1
            if child.type == "hardbreak":
                groups.append([])
            groups[-1].append(line)
        elif source.count("\n"):
            groups[-1].extend(range(groups[-1][-1] + 1, line + 1))
    return groups


def _rewrite_lines(block: _Block, lines: list[str], ends: list[str], markup: str,
                   strict: bool) -> dict[int, str]:
    """New text (ending included; "" drops the line) for the source lines of a paragraph or heading."""
    contents = block.inline.content.split("\n")
    first = block.line
    edits: dict[int, str] = {}
    if block.kind == "atx":
        source = lines[first]
        at = source.index("#") + block.column  # past the heading's `#`s
        starts = [at + len(source[at:]) - len(source[at:].lstrip(" \t"))]
        stops = [starts[0] + len(block.inline.content)]
        if source[starts[0]:stops[0]] != block.inline.content:
            raise DocumentError(f"Markdown: cannot place a translation in the heading {source[:60]!r}")
    else:
        starts = [_located(lines[first + k], text) for k, text in enumerate(contents)]
        stops = [len(lines[first + k].rstrip()) for k in range(len(contents))]
    sources = _groups(block)
    translated = parts(markup, block.marks, strict)
    if len(translated) != len(sources):  # the hard breaks did not come back: one group over all lines
        sources = [list(range(len(contents)))]
        translated = [[part for group in translated for part in group]]
    for k, (group, pieces) in enumerate(zip(sources, translated)):
        widths = [max(1, stops[j] - starts[j]) for j in group]
        new = wrap(words(pieces, strict), widths)
        if not new:  # nothing came back: the source's words stay
            continue
        last = group[-1]
        backslash = k + 1 < len(sources) and lines[first + last][:stops[last]].endswith("\\")
        for n, j in enumerate(group):
            row = first + j
            if n >= len(new):
                edits[row] = ""
                continue
            final = n == len(new) - 1
            tail_row = first + last if final else row
            text = lines[row][:starts[j]] + new[n] + ("\\" if final and backslash else "")
            edits[row] = text + lines[tail_row][stops[last if final else j]:] + ends[tail_row]
    return edits


def _cells(line: str) -> list[tuple[int, int]]:
    """A table row's cells as (start, end) in the line: split at pipes not after a backslash (as
    markdown-it splits them), container markers before the first pipe and an empty end dropped."""
    bounds, start = [], 0
    for i, ch in enumerate(line):
        if ch == "|" and (i == 0 or line[i - 1] != "\\"):
            bounds.append((start, i))
            start = i + 1
    bounds.append((start, len(line)))
    if len(bounds) > 1 and _PREFIX_ONLY.fullmatch(line[:bounds[0][1]]):
        bounds.pop(0)
    if len(bounds) > 1 and not line[bounds[-1][0]:].strip():
        bounds.pop()
    return bounds


def _rewrite_row(row: list[tuple[_Block, str]], lines: list[str], ends: list[str], strict: bool) -> str:
    """A table row's line with its cells' translations."""
    line = lines[row[0][0].line]
    cells = _cells(line)
    out, at = [], 0
    for block, markup in row:
        if block.column >= len(cells):
            continue
        start, stop = cells[block.column]
        cell = line[start:stop]
        source = block.inline.content.replace("|", "\\|")
        begin = start + len(cell.rstrip()) - len(source)
        if not cell.rstrip().endswith(source):
            raise DocumentError(f"Markdown: cannot place a translation in the table row {line[:60]!r}")
        new = " ".join(word for word, _ in words(parts(markup, block.marks, strict)[0], strict))
        new = re.sub(r"(?<!\\)\|", r"\\|", new)
        if new:
            out.append(line[at:begin] + new)
            at = begin + len(source)
    return "".join(out) + line[at:] + ends[row[0][0].line]


def _render(blocks: list[_Block], translated: list[str], lines: list[str], ends: list[str],
            strict: set[int]) -> list[str]:
    """The document's lines with every block's translation (blocks in `strict` written strictly)."""
    edits: dict[int, str] = {}
    rows: dict[int, list[tuple[_Block, str]]] = {}
    strict_rows: set[int] = set()
    for i, (block, markup) in enumerate(zip(blocks, translated)):
        if block.kind == "cell":
            rows.setdefault(block.line, []).append((block, markup))
            if i in strict:
                strict_rows.add(block.line)
        else:
            edits.update(_rewrite_lines(block, lines, ends, markup, i in strict))
    for line, row in rows.items():
        edits[line] = _rewrite_row(row, lines, ends, line in strict_rows)
    return [edits.get(i, lines[i] + ends[i]) for i in range(len(lines))]


def translate_md(data: bytes, translate_html: Translate, limits: DocumentLimits) -> bytes:
    """The Markdown file `data` with its text translated (see the module docstring)."""
    text = decode_text(data, ".md")
    lines = [line.replace("\0", "\ufffd") for line in _LINE_END.split(text)]  # as markdown-it reads them
    ends = [*_LINE_END.findall(text), ""]
    front = _front_matter(lines)
    md = parser()
    tokens = _parse(md, lines, front)
    blocks = _blocks(tokens)
    check_units(len(blocks), "blocks of text", limits)
    if not blocks:
        return data
    translated = translate_html([block.html for block in blocks])
    want, strict = _shape(tokens), set[int]()
    at = {id(block.inline): i for i, block in enumerate(blocks)}
    while True:  # at most three rounds: as translated, the differing blocks strictly, every block strictly
        out = "".join(_render(blocks, translated, lines, ends, strict))
        got = _shape(_parse(md, _LINE_END.split(out), front))
        if got == want:
            break
        same_blocks = len(got) == len(want) and all(a == b or a[0] == b[0] == "inline"
                                                    for a, b in zip(got, want))
        changed = ({at[id(t)] for t, a, b in zip(tokens, got, want) if a != b and id(t) in at} if same_blocks
                   else set(range(len(blocks))))
        if changed <= strict:
            if not same_blocks:
                raise DocumentError("Markdown: the translation would change the document's structure; "
                                    "not written")
            logger.warning("Markdown: %d blocks keep their words but lose some emphasis or links",
                           len(changed))
            break
        strict |= changed
    return out.encode("utf-8")
