"""Fuzzing at realistic sizes (kilobytes, deep nesting, long digit runs, every Unicode category)
of the HTML renderer (`mt.text.html`) and the cleaning rules (`mt.data.clean_rules`), asserting
what their docstrings promise: the renderer parses anything (refusing only nesting past
MAX_DEPTH), in time linear in the input, gives back no markup the input did not have whatever
the translations say, drops comments, keeps each block's words; each cleaning rule answers None or
a short one-line reason for any pair, never an exception, in time linear in the text."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mt.data import clean_rules
from mt.text.html import MAX_DEPTH, HtmlFragment, HtmlTooDeep
from tests.support.scaling import assert_linear

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TAGS = ["p", "b", "i", "a", "span", "div", "li", "ul", "td", "tr", "table", "br", "img", "code", "pre", "script",
        "style", "h1", "em", "q", "svg", "template", "x-y", "option", "select", "dt", "dl"]
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=200)  # every category, surrogates too
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:_-]*)")


def _pieces() -> st.SearchStrategy[str]:
    """Markup as people and attackers write it: tags (closed, unclosed, stray), attributes, comments,
    character references, raw '<' and '&', and text of every Unicode category."""
    tag = st.sampled_from(TAGS)
    return st.one_of(
        ANY_TEXT,
        st.builds(lambda t, v: f'<{t} class="{v}" translate="{v[:2]}">', tag, st.text(max_size=8)),
        st.builds(lambda t: f"<{t}>", tag), st.builds(lambda t: f"</{t}>", tag), st.builds(lambda t: f"<{t}/>", tag),
        st.sampled_from(["<!-- c -->", "<!--", "-->", "&amp;", "&#60;script&#62;", "&lt;", "<", ">", "&", "<!DOCTYPE html>",
                         "<?pi?>", "<![CDATA[x]]>", "</", "<a href='javascript:alert(1)'>"]),
        st.builds(lambda t, n: f"<{t}>" * n, tag, st.integers(1, 300)),  # deep runs
        st.builds(lambda n: "1" * n, st.integers(1, 5000)))


HTML = st.lists(_pieces(), max_size=60).map("".join)


def _tags(markup: str) -> set[str]:
    return {name.lower() for _, name in _TAG.findall(markup)}


@FUZZ
@given(HTML, st.lists(ANY_TEXT | st.sampled_from(["<script>alert(1)</script>", "</p><p>", "&lt;b&gt;", "a\nb"]),
                      max_size=5))
def test_the_renderer_keeps_its_promises_on_any_markup(markup: str, words: list[str]) -> None:
    try:  # its cost: tests/test_html_bounds.py, by growth (linear), not a deadline
        fragment = HtmlFragment(markup)
    except HtmlTooDeep:
        assert markup.count("<") > MAX_DEPTH  # refused only when that many elements could be open
        return
    translations = [words[i % len(words)] if words else block for i, block in enumerate(fragment.blocks)]
    out = fragment.render(translations)
    assert "<!--" not in out  # comments dropped
    assert _tags(out) <= _tags(markup)  # no markup that was not markup in the input, whatever the translations say
    again = HtmlFragment(out)
    if not words:  # identity translations: the same blocks come back
        assert again.blocks == fragment.blocks
    else:  # the translations' words, and nothing else, are the text
        assert " ".join(again.blocks).split() == " ".join(" ".join(t.split()) for t in translations).split()


@FUZZ
@given(st.integers(1, 2 * MAX_DEPTH), st.sampled_from(TAGS))
def test_nesting_at_any_depth_is_parsed_or_refused(depth: int, tag: str) -> None:
    """Parsed below the bound, refused at or past it (its cost by depth: tests/test_html_bounds.py)."""
    markup = f"<{tag}>" * depth + "words here" + f"</{tag}>" * depth
    try:
        HtmlFragment(markup)
    except HtmlTooDeep:
        assert depth >= MAX_DEPTH


RULES = [lambda s, t: clean_rules.no_text(s, t),
         lambda s, t: clean_rules.length(s, t, max_words=250, max_char_ratio=3.0, ratio_min_chars=20),
         lambda s, t: clean_rules.copy(s, t, max_overlap=0.7),
         lambda s, t: clean_rules.script(s, t, src_scripts=clean_rules.scripts_of("en"),
                                         tgt_scripts=clean_rules.scripts_of("ja"), min_share=0.5),
         clean_rules.numbers]
DIGITS = st.sampled_from(["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "०१२३४५६७८९"])
LINES = st.one_of(
    st.text(st.characters(codec=None), max_size=3000),
    st.builds(lambda d, n, t: t + d[n % 10] * n + t, DIGITS, st.integers(1, 20_000), ANY_TEXT),  # long digit runs
    st.builds(lambda t, n: f"see https://example.org/{'x' * n} or me@example.org {t}", ANY_TEXT, st.integers(0, 5000)))


@FUZZ
@given(LINES, LINES)
def test_every_rule_answers_a_short_reason_or_none_for_any_pair(src: str, tgt: str) -> None:
    for rule in RULES:  # their cost on the long families: test_every_rule_is_linear_in_its_input
        reason = rule(src, tgt)
        assert reason is None or (isinstance(reason, str) and 0 < len(reason) <= 120 and "\n" not in reason)
    assert clean_rules.numbers(src, src) is None  # a number is on both sides of a copy


@pytest.mark.parametrize("family", ["digits", "url", "text"])
def test_every_rule_is_linear_in_its_input(family: str) -> None:
    """The long inputs LINES draws, at two sizes in one run: each rule's cost grows by the size
    factor, not its square (the e-mail pattern once scanned from every digit: 1.5 s at 19,000)."""
    make = {"digits": lambda n: "a " + "٣" * n + " me@example.org",
            "url": lambda n: f"see https://example.org/{'x' * n} or me@example.org",
            "text": lambda n: "Ein Hund läuft über die Wiese, 42 mal. " * (n // 40)}[family]
    for i, rule in enumerate(RULES):
        assert_linear(lambda n, rule=rule: rule(make(n), make(n // 2)), 4_000, what=f"rule {i} on {family}")
