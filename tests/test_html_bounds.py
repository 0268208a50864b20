"""What one HTML fragment may cost (`mt.text.html`): parsing is linear in its size, whatever its
nesting, and nesting beyond `MAX_DEPTH` is refused at once (issue 45, item 1: the old parser
scanned its stack of open elements for every tag, so n nested elements cost n squared)."""

from __future__ import annotations

import time

import pytest

from mt.text.html import MAX_DEPTH, HtmlFragment, HtmlTooDeep


def _seconds(markup: str) -> float:
    """The fastest of three parses (a shared machine's noise is one-sided)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        HtmlFragment(markup)
        best = min(best, time.perf_counter() - started)
    return best


def test_deep_nesting_costs_what_flat_markup_of_its_size_does() -> None:
    # 4,000 list items under 500 open <b>: each start tag used to list every open element (500).
    deep = "<b>" * 500 + "<li>x</li>" * 4000
    flat = "<i>x</i>" * 5000 + "<li>x</li>" * 4000  # as long, as many tags, nothing deep
    assert _seconds(deep) < 3 * _seconds(flat)


def test_nesting_beyond_the_bound_is_refused_before_it_is_parsed_further() -> None:
    HtmlFragment("<b>" * (MAX_DEPTH - 1) + "x")  # at the bound: fine
    started = time.perf_counter()
    with pytest.raises(HtmlTooDeep, match=f"deeper than {MAX_DEPTH}"):
        HtmlFragment("<b>" * 32_000 + "x")  # the 53-second request of the issue, 218 KiB
    assert time.perf_counter() - started < 0.5
    # Closed elements do not count: 32,000 siblings are as shallow as one.
    assert len(HtmlFragment("<p><b>x</b></p>" * 32_000).blocks) == 32_000
