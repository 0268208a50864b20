"""Bounds that hold before the work starts, found past issue 45's list: what parsing a request body
may cost (a form with a field repeated 100,000 times was quadratic on the event loop; a JSON number
of 5,000 digits raised ValueError, a 500 with a traceback), and what the translation cache may hold
(unique lines at --char-limit filled it with hundreds of MB)."""

from __future__ import annotations

import pytest

from mt.serve.cache import Cached, TranslationCache
from mt.serve.requests import ApiError, parse_fields
from tests.support.scaling import assert_linear

pytestmark = pytest.mark.requires("fastapi")
FORM = "application/x-www-form-urlencoded"


def test_a_repeated_form_field_costs_linear_time() -> None:
    fields = parse_fields(("q=a&" * 40_000).encode(), FORM, max_fields=50_000)
    assert len(fields["q"]) == 40_000
    # was n squared (4.8 s at 40,000 fields, Zen 4)
    assert_linear(lambda n: parse_fields(("q=a&" * n).encode(), FORM, max_fields=50_000), 5_000, what="parse_fields")


def test_form_fields_beyond_the_bound_are_refused_before_they_are_split() -> None:
    with pytest.raises(ApiError) as e:
        parse_fields(("q=a&" * 300_000).encode(), FORM, max_fields=272)
    assert e.value.status == 413 and "more than 272 form fields" in e.value.message


def test_a_json_number_past_ints_digit_limit_is_a_400() -> None:
    with pytest.raises(ApiError) as e:
        parse_fields(b'{"q": "x", "alternatives": 1' + b"0" * 5000 + b"}", "application/json")
    assert e.value.status == 400 and e.value.message.startswith("body: invalid JSON (Exceeds the limit")


def test_the_cache_is_bounded_by_characters_too() -> None:
    cache = TranslationCache(100, max_chars=50_000)
    for i in range(100):  # lines at a 10,000-character limit, each unique
        cache.store(("m", f"{i:05d}" + "x" * 9_995), Cached([("y" * 10_000, 0.0)], False))
    assert cache.chars <= 50_000 and len(cache) == 2  # 20,000 characters an entry
    cache.store(("m", "short"), Cached([("kurz", 0.0)], False))
    assert len(cache) == 3 and cache.chars == 40_009
    cache.store(("m", "z" * 60_000), Cached([("", 0.0)], False))  # larger than the whole budget: not kept
    assert len(cache) == 3
    assert TranslationCache(10).max_chars == 10_000  # CHARS_PER_ENTRY a segment by default
