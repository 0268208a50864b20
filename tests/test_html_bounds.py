"""What one HTML fragment may cost (`mt.text.html`): parsing is linear in its size, whatever its
nesting, and nesting beyond `MAX_DEPTH` is refused at once (issue 45, item 1: the old parser
scanned its stack of open elements for every tag, so n nested elements cost n squared)."""

from __future__ import annotations

import pytest

from mt.text.html import MAX_DEPTH, HtmlFragment, HtmlTooDeep
from tests.support.scaling import assert_flat, assert_linear, fastest


def _seconds(markup: str) -> float:
    """The fastest of three parses (a shared machine's noise is one-sided)."""
    return fastest(lambda: HtmlFragment(markup))


def test_parsing_grows_linearly_with_blocks_and_with_depth() -> None:
    assert_linear(lambda n: HtmlFragment("<p><b>x</b> y</p>" * n), 500, what="flat markup")
    for tag in ("b", "div", "li", "td"):  # up to the bound: depth 63 -> 504
        assert_linear(lambda n, tag=tag: HtmlFragment(f"<{tag}>" * n + "words here" + f"</{tag}>" * n),
                      (MAX_DEPTH - 8) // 8, what=f"<{tag}> nested")


def test_deep_nesting_costs_what_flat_markup_of_its_size_does() -> None:
    # 4,000 list items under 500 open <b>: each start tag used to list every open element (500).
    deep = "<b>" * 500 + "<li>x</li>" * 4000
    flat = "<i>x</i>" * 5000 + "<li>x</li>" * 4000  # as long, as many tags, nothing deep
    assert _seconds(deep) < 3 * _seconds(flat)


def test_nesting_beyond_the_bound_is_refused_before_it_is_parsed_further() -> None:
    HtmlFragment("<b>" * (MAX_DEPTH - 1) + "x")  # at the bound: fine
    with pytest.raises(HtmlTooDeep, match=f"deeper than {MAX_DEPTH}"):
        HtmlFragment("<b>" * 32_000 + "x")  # the 53-second request of the issue, 218 KiB

    def refuse(depth: int) -> None:
        with pytest.raises(HtmlTooDeep):
            HtmlFragment("<b>" * depth + "x")

    # refused where it passes the bound: 8 times the depth costs what just past the bound does
    assert_flat(refuse, 4_000, what="refusing markup nested past MAX_DEPTH")
    # Closed elements do not count: 32,000 siblings are as shallow as one.
    assert len(HtmlFragment("<p><b>x</b></p>" * 32_000).blocks) == 32_000
