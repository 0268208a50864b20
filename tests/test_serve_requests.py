"""Request checks of `mt serve` that need no server (mt.serve.requests): each refusal is an
`ApiError` with the status and one-line message the client sees; tests/test_serve.py runs the
same checks through a real server."""

from __future__ import annotations

import pytest

from mt.config import DecodeConfig, SearchConfig
from mt.serve.requests import (
    V1_SCHEMA,
    ApiError,
    check_known,
    form_fields,
    get_segments,
    parse_fields,
    v1_decode,
)
from mt.serve.settings import ServeSettings


def refused(call) -> tuple[int, str]:
    with pytest.raises(ApiError) as e:
        call()
    return e.value.status, e.value.message


def test_sampling_is_refused_up_front_for_a_model_that_only_searches() -> None:
    base, settings = DecodeConfig(search=SearchConfig(beam=4)), ServeSettings()
    decode, n_best = v1_decode({"sampling": True, "seed": 7}, base, settings, 4, samples=True)
    assert decode.search.sampling and decode.search.seed == 7 and n_best is None
    status, message = refused(lambda: v1_decode({"sampling": True}, base, settings, 4, samples=False))
    assert status == 400 and message.startswith("sampling: this server runs an `mt export` (CTranslate2) model")
    assert v1_decode({"beam": 2}, base, settings, 4, samples=False)[0].search.beam == 2  # searching is fine


def test_v1_names_unknown_fields_and_wants_a_list_of_segments() -> None:
    check_known({"segments": ["a"], "beam": 2, "api_key": "k"}, V1_SCHEMA, "/v1/translate")
    status, message = refused(lambda: check_known({"segments": ["a"], "n_bets": 2}, V1_SCHEMA, "/v1/translate"))
    assert status == 400 and message.startswith("n_bets: unknown field for /v1/translate; it takes alpha, api_key")
    assert get_segments({"segments": ["a", ""]}) == ["a", ""]
    for bad in ("a", [], {"a": 1}):
        assert refused(lambda bad=bad: get_segments({"segments": bad})) == (
            400, "segments: expected a non-empty list of strings")
    assert refused(lambda: get_segments({})) == (400, "segments: missing")


def test_form_fields_keep_repeats_as_lists_and_refuse_uploads() -> None:
    assert form_fields([("q", "a"), ("source", "en"), ("q", "b"), ("q", "c")]) == {"q": ["a", "b", "c"], "source": "en"}
    assert parse_fields(b"q=a&q=b&target=de", "application/x-www-form-urlencoded") == {"q": ["a", "b"], "target": "de"}
    assert refused(lambda: form_fields([("q", object())])) == (400, "q: expected a text field, got a file upload")


def test_json_nested_past_the_parsers_recursion_is_a_400() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert refused(lambda: parse_fields(deep, "application/json")) == (400, "body: invalid JSON (nested too deeply)")
