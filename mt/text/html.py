"""LibreTranslate's `format: "html"`: translate the text of an HTML fragment and keep its markup.

Built on the standard library's `html.parser.HTMLParser` (maintained with CPython, no dependency,
the tokenizer of the HTML spec's tag and character-reference rules; LibreTranslate itself uses
BeautifulSoup through argos-translate-files). `HtmlFragment(markup)` parses a fragment into a
stream of markup and text; the text between block boundaries (any element that is not inline, and
`<br>`) is one *block*, its whitespace collapsed as a browser shows it, and `blocks` lists the
blocks with words, in order: each is one segment for the model, so it translates exactly as
`mt translate` does that line. Inline elements inside a block (`<a>`, `<b>`, `<em>`, `<span>`, ...)
are kept: `render(translations, alignments)` puts the translated block's words back into the
block's text slots by a word alignment when one is given (`mt.decode.align`, from the model's
cross-attention: the link lands on the words that translate the link's words, reordering
included as far as the slots' order allows), else in proportion to where the source words stood.

Never sent to the model: attributes, and the content of `code`, `kbd`, `samp`, `var`,
`pre`, `script`, `style`, `textarea`, `svg`, `math`, `template` and of any element marked
`translate="no"` or `class="notranslate"`. The output is rebuilt from the parsed tokens: tags and
attributes that were in the input (attribute values re-escaped; tag and attribute names that are
not plain names dropped), comments, doctypes and processing instructions dropped, text escaped
(`&`, `<`, `>`), elements left open closed at the end, stray end tags dropped, and an open
`<p>`/`<li>`/`<td>`... closed where HTML closes it implicitly. So nothing comes back as markup that
was not markup in the input: a translation or text reading `<script>` comes back as
`&lt;script&gt;`.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from html.parser import HTMLParser

from mt.errors import MTError

VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
INLINE = frozenset("a abbr b bdi bdo cite data del dfn em font i ins label mark q s small span strong "
                   "sub sup time tt u big".split())
INLINE_ATOMS = frozenset("img wbr input".split())  # void elements that sit inside a sentence
OPAQUE = frozenset("code kbd samp var pre script style textarea svg math template noscript iframe "
                   "object".split())
INLINE_OPAQUE = frozenset("code kbd samp var script style".split())  # opaque, yet inside a sentence
MAX_DEPTH = 512  # elements open at once at most (HtmlTooDeep beyond): real pages nest a few dozen
RAW_TEXT = frozenset(("script", "style"))  # the parser hands their content over as written
# kept outside a link or bold run that the source closed before it
TRAILING_PUNCTUATION = ".,;:!?…。、，！？"
MAX_PLACEMENT_WORK = 2_000_000  # words x slots^2 above which markup is placed in proportion, not by alignment
# A start tag closes an open element of these names (HTML's optional end tags), searched up to the
# elements named second.
IMPLIED = {"li": ({"li"}, {"ul", "ol"}), "dt": ({"dt", "dd"}, {"dl"}), "dd": ({"dt", "dd"}, {"dl"}),
           "tr": ({"tr"}, {"table"}), "td": ({"td", "th"}, {"tr", "table"}),
           "th": ({"td", "th"}, {"tr", "table"}),
           "option": ({"option"}, {"select"})}


def _plain_name(name: str) -> bool:
    return (bool(name) and name.isascii() and name[0].isalpha()
            and all(c.isalnum() or c in "-:_" for c in name))


def _is_opaque(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    values = {name: value or "" for name, value in attrs}
    return (tag in OPAQUE or values.get("translate", "").strip().lower() == "no"
            or "notranslate" in values.get("class", "").split())


class HtmlTooDeep(MTError):
    """A fragment nests more than `MAX_DEPTH` elements: refused, not parsed further."""


class _Tokens(HTMLParser):
    """HTML in, items out: ("markup", text, is_boundary) and ("text", text) (see the module docstring).

    Linear in the input: every start and end tag costs O(1) besides the elements it closes (each
    element is opened and closed once), so `<b>` nested n deep costs n, not n squared. The open
    elements are a stack; beside it, the open opaque elements are counted, each name's open
    positions are kept (an end tag or an implied end finds its element without scanning), and each
    stack entry carries how many non-inline elements are open up to it (HTML's `<p>` rule)."""

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        super().__init__(convert_charrefs=True)
        self.max_depth = max_depth
        self.items: list[tuple[str, str, bool]] = []
        # open elements: (tag, opaque, non-inline ones up to here)
        self.stack: list[tuple[str, bool, int]] = []
        self._opaque = 0  # open opaque elements
        self._at: dict[str, list[int]] = {}  # tag -> its open elements' stack indices, innermost last

    @property
    def opaque(self) -> bool:
        return self._opaque > 0

    def _markup(self, text: str, boundary: bool) -> None:
        self.items.append(("markup", text, boundary and not self.opaque))

    def _push(self, tag: str, opaque: bool) -> None:
        if len(self.stack) >= self.max_depth:
            raise HtmlTooDeep(f"HTML nested deeper than {self.max_depth} elements")
        blocks = (self.stack[-1][2] if self.stack else 0) + (tag not in INLINE)
        self._at.setdefault(tag, []).append(len(self.stack))
        self.stack.append((tag, opaque, blocks))
        self._opaque += opaque

    def _last(self, names: set[str] | frozenset[str]) -> int:
        """The stack index of the innermost open element named in `names`, -1 when none is open."""
        return max((self._at[name][-1] for name in names if self._at.get(name)), default=-1)

    def _close_to(self, index: int) -> None:
        while len(self.stack) > index:
            tag, opaque, _ = self.stack.pop()
            self._at[tag].pop()
            self._opaque -= opaque
            boundary = tag not in INLINE and tag not in INLINE_OPAQUE
            self._markup(f"</{tag}>", boundary)

    def _implied_end(self, tag: str) -> None:
        closes, scope = IMPLIED.get(tag, (set(), set()))
        if closes:
            found = self._last(closes)
            if found > self._last(scope):
                self._close_to(found)
                return
        if (tag not in INLINE and tag not in INLINE_ATOMS and tag not in INLINE_OPAQUE and tag != "br"
                and self._at.get("p")):
            at = self._at["p"][-1]  # a block start closes an open <p> (inline ones above it too)
            if self.stack[-1][2] == self.stack[at][2]:  # no non-inline element open above it
                self._close_to(at)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not _plain_name(tag):
            return
        if not self.opaque:
            self._implied_end(tag)
        shown = "".join(f" {name}" if value is None else f' {name}="{escape(value, quote=True)}"'
                        for name, value in attrs if _plain_name(name))
        self._markup(f"<{tag}{shown}>",
                     tag not in INLINE and tag not in INLINE_ATOMS and tag not in INLINE_OPAQUE)
        if tag not in VOID:
            self._push(tag, _is_opaque(tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)  # `<br/>` is `<br>`; `<span/>` is closed at once
        if tag not in VOID and self.stack and self.stack[-1][0] == tag:
            self._close_to(len(self.stack) - 1)

    def handle_endtag(self, tag: str) -> None:
        if self._at.get(tag):  # a stray end tag is dropped
            self._close_to(self._at[tag][-1])

    def handle_data(self, data: str) -> None:
        if self.opaque:
            raw = self.stack[-1][0] in RAW_TEXT  # script/style content, as the input had it
            self._markup(data if raw else escape(data, quote=False), False)
        else:
            self.items.append(("text", data, False))

    # Comments, declarations (a doctype, CDATA sections) and processing instructions are dropped: not
    # content, and where a browser ends a comment differs between parsers (`--!>`).
    def handle_comment(self, data: str) -> None:
        pass

    def handle_decl(self, decl: str) -> None:
        pass

    def handle_pi(self, data: str) -> None:
        pass

    def unknown_decl(self, data: str) -> None:
        pass

    def finish(self) -> list[tuple[str, str, bool]]:
        self.close()
        self._close_to(0)
        return self.items


def _words_with_space(text: str) -> list[str]:
    """`text` cut after each word's trailing whitespace: "a b  c" -> ["a ", "b  ", "c"]."""
    pieces, current = [], ""
    for ch in text:
        if not ch.isspace() and current and current[-1].isspace():
            pieces.append(current)
            current = ""
        current += ch
    return [*pieces, current] if current.strip() else pieces


class _Run:
    """One block: its items (markup and text slots) between two boundaries."""

    def __init__(self, items: list[tuple[str, str, bool]]) -> None:
        self.items = items
        self.texts = [text for kind, text, _ in items if kind == "text"]
        joined = "".join(self.texts)
        self.block = " ".join(joined.split())
        self.lead = joined[:len(joined) - len(joined.lstrip())]
        self.trail = joined[len(joined.rstrip()):] if joined.strip() else ""
        self.starts, words, in_word = [], 0, False  # starts[j]: words begun before slot j
        self.word_slots: list[int] = []  # the slot each word of `block` begins in
        for j, text in enumerate(self.texts):
            self.starts.append(words)
            for ch in text:
                if not ch.isspace() and not in_word:
                    words += 1
                    self.word_slots.append(j)
                in_word = not ch.isspace()
        self.words = words

    @property
    def has_inline_markup(self) -> bool:
        """True when the block's words sit in more than one text slot (inline markup between them):
        only then does where its translation's words go depend on an alignment."""
        return len(set(self.word_slots)) > 1

    def render(self, translation: str | None, alignment: list[int] | None = None) -> str:
        """The block with `translation`'s words in its text slots: by `alignment` (for each word of
        the translation, the index of the block word it translates, or -1) when given, else in
        proportion to where the source words stood."""
        if translation is None:  # no words: whitespace between markup, kept
            return "".join(text if kind == "markup" else escape(text, quote=False)
                           for kind, text, _ in self.items)
        pieces = _words_with_space(translation.strip())
        m = len(pieces)
        even = [round(start * m / self.words) for start in self.starts] + [m]
        bounds = even
        if alignment is not None and len(alignment) == m and m * len(self.texts) ** 2 <= MAX_PLACEMENT_WORK:
            bounds = aligned_bounds(alignment, self.word_slots, even, len(self.texts))
        slots = ["".join(pieces[bounds[j]:bounds[j + 1]]) for j in range(len(self.texts))]
        last = max((j for j in range(len(slots)) if slots[j]), default=0) if m else len(slots) - 1
        for j in range(1, len(slots)):  # spaces where the source had them around markup
            if not slots[j] or not self.texts[j][:1].isspace() or slots[j][:1].isspace():
                continue
            if self.texts[j - 1][-1:].isspace():  # `run <code>ls</code> now`: on both sides
                slots[j] = " " + slots[j]
            elif slots[j - 1][-1:].isspace():  # `<em>four</em> five`: after the element, not inside it
                slots[j - 1], slots[j] = slots[j - 1].rstrip(), " " + slots[j]
        for j in range(len(slots) - 1):  # `<a>bike</a>.`: the sentence's full stop stays outside the link
            word = slots[j].rstrip()
            end = len(word) - len(word.rstrip(TRAILING_PUNCTUATION))
            if (end and word[:-end].strip()
                    and not self.texts[j].rstrip().endswith(tuple(TRAILING_PUNCTUATION))):
                slots[j], slots[j + 1] = word[:-end], word[-end:] + slots[j][len(word):] + slots[j + 1]
        slots[0] = self.lead + slots[0]
        # The block's closing whitespace where the source had it: a `<li><a>Title</a>\n  </li>` keeps
        # its line break after the link, not inside it.
        end = max(j for j, text in enumerate(self.texts) if text.strip())
        slots[last] = slots[last].rstrip() + self.texts[end][len(self.texts[end].rstrip()):]
        for j in range(end + 1, len(slots)):
            slots[j] += self.texts[j]
        out, j = [], 0
        for kind, text, _ in self.items:
            if kind == "markup":
                out.append(text)
            else:
                out.append(escape(slots[j], quote=False))
                j += 1
        return "".join(out)


def aligned_bounds(alignment: list[int], word_slots: list[int], even: list[int], k: int) -> list[int]:
    """Monotone placement of m translated words into k text slots (slot j gets words
    bounds[j]:bounds[j + 1]) that agrees with the alignment as far as the slots' order allows.

    A dynamic programme over (word, slot): a word aligned to a source word costs 1 outside that
    word's slot; an unaligned word costs 0.1 outside the slot the proportional placement (`even`)
    gives it, so it stays beside its neighbours; a slot whose source had words but gets none costs
    1.5 (a link must not vanish: moving one word into it is cheaper). O(m k^2), bounded by
    MAX_PLACEMENT_WORK."""
    m = len(alignment)
    even_slot = [max(j for j in range(k) if even[j] <= w) for w in range(m)]
    wordy = [0] * k
    for j in word_slots:
        wordy[j] = 1
    skipped = [0.0] * (k + 1)  # skipped[j]: wordy slots before slot j
    for j in range(k):
        skipped[j + 1] = skipped[j] + 1.5 * wordy[j]

    def cost(w: int, j: int) -> float:
        v = alignment[w]
        if 0 <= v < len(word_slots):
            return 0.0 if word_slots[v] == j else 1.0
        return 0.0 if even_slot[w] == j else 0.1

    inf = float("inf")
    best = [[inf] * k for _ in range(m)]
    back = [[0] * k for _ in range(m)]
    for j in range(k):
        best[0][j] = cost(0, j) + skipped[j]
    for w in range(1, m):
        for j in range(k):
            for i in range(j + 1):
                value = best[w - 1][i] + skipped[j] - skipped[i + 1 if i < j else i]
                if value < best[w][j]:
                    best[w][j], back[w][j] = value, i
            best[w][j] += cost(w, j)
    last = min(range(k), key=lambda j: best[m - 1][j] + skipped[k] - skipped[j + 1])
    slots = [0] * m
    for w in range(m - 1, -1, -1):
        slots[w] = last
        last = back[w][last]
    return [next((w for w in range(m) if slots[w] >= j), m) for j in range(k)] + [m]


class HtmlFragment:
    """A parsed fragment: `blocks` (the text the model translates, one segment each) and
    `render(translations)` (the fragment with each block's text replaced by its translation).
    Parsing is linear in the markup's length; more than `max_depth` elements open at once is an
    `HtmlTooDeep` (raised as soon as the parser gets there)."""

    def __init__(self, markup: str, max_depth: int = MAX_DEPTH) -> None:
        self.source = markup
        parser = _Tokens(max_depth)
        parser.feed(markup)
        self.parts: list[str | _Run] = []
        run: list[tuple[str, str, bool]] = []
        for item in parser.finish():
            if item[0] == "markup" and item[2]:
                self.parts.extend([_Run(run), item[1]] if run else [item[1]])
                run = []
            else:
                run.append(item)
        if run:
            self.parts.append(_Run(run))
        self.blocks = [part.block for part in self.parts if isinstance(part, _Run) and part.words]

    def text(self) -> str:
        """The fragment's translatable text, blocks joined by newlines (what language detection reads)."""
        return "\n".join(self.blocks)

    @property
    def aligned_blocks(self) -> list[int]:
        """Indices (into `blocks`) of the blocks with inline markup between their words: the ones
        whose rendering uses a word alignment when `render` is given one."""
        runs = [part for part in self.parts if isinstance(part, _Run) and part.words]
        return [i for i, run in enumerate(runs) if run.has_inline_markup]

    def render(self, translations: list[str], alignments: dict[int, list[int]] | None = None) -> str:
        """The fragment with block i's text replaced by translations[i]; `alignments[i]` (for each
        word of translations[i], the index of the block word it translates, or -1) places block
        i's inline markup on the words that translate what it marked (`mt.decode.align`)."""
        if len(translations) != len(self.blocks):
            raise ValueError(f"{len(translations)} translations for {len(self.blocks)} blocks")
        alignments = alignments or {}
        out, i = [], 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif not part.words:
                out.append(part.render(None))
            else:
                out.append(part.render(translations[i], alignments.get(i)))
                i += 1
        return "".join(out)


Aligner = Callable[[list[str], list[str]], "list[list[int]] | None"]


def render_fragments(fragments: list[HtmlFragment], translations: list[str],
                     align: Aligner | None) -> list[str]:
    """Each fragment rendered with its blocks' translations (`translations`: every fragment's
    blocks in order); `align(sources, targets)` gives the word alignments (mt.decode.align) of the
    blocks with inline markup, so their markup lands on the words that translate what it marked
    (None, or an aligner answering None: by position)."""
    starts = [0]
    for fragment in fragments:
        starts.append(starts[-1] + len(fragment.blocks))
    if len(translations) != starts[-1]:
        raise ValueError(f"{len(translations)} translations for {starts[-1]} blocks")
    marked = [(f, b) for f, fragment in enumerate(fragments) for b in fragment.aligned_blocks]
    found = align([fragments[f].blocks[b] for f, b in marked],
                  [translations[starts[f] + b] for f, b in marked]) if marked and align else None
    alignments = dict(zip(marked, found or []))
    return [fragment.render(translations[starts[f]:starts[f + 1]],
                            {b: alignments[(f, b)] for b in fragment.aligned_blocks if (f, b) in alignments})
            for f, fragment in enumerate(fragments)]

