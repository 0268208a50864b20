"""POST /v1/complete (issue 73): a translator's typed target prefix continued exactly as typed, with
alternatives for the next word, through a real `mt serve` process on the tiny random checkpoint
(greedy): the same path as `mt translate --prefix`, batched with other requests, cached, and every
bad input a JSON 400 of one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_serve import httpx, metric, mt_translate, server

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "fastapi_offline")

SOURCES = ["a man rides a bike", "zpfv mouxt äñöää", "ydmdj gb цмнв", "the dog runs on the grass",
           "τηρθ αχγο ydeh", "she sings a song", "two cats sleep", "ущегой ñ mouxt"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mt.deploy.tiny import write_random_checkpoint
    return write_random_checkpoint(tmp_path_factory.mktemp("complete") / "tiny.pt", seed=1)


@pytest.fixture(scope="module")
def url(tiny: Path) -> Iterator[str]:
    with server(tiny, "--max-alternatives", "3", "--char-limit", "2000") as (address, _):
        yield address


def complete(url: str, **body: object) -> httpx.Response:
    return httpx.post(url + "/v1/complete", json=body, timeout=60)


# As a translator types them: none, a word cut short, whole words and a space (double spaces kept),
# one letter; in the tiny model's alphabets (lower case: its outputs are random pieces).
PREFIXES = ["", "mouxt yd", "zpfv  ", "α", "", "gb цм", "ydeh ", "ñ"]


def test_concurrent_completions_equal_mt_translate_prefix(tiny: Path, url: str, tmp_path: Path) -> None:
    """Eight clients at once (batched together) get exactly what `mt translate --prefix` writes;
    an empty prefix is /v1/translate's output; alternatives continue the prefix, most probable first."""
    plain = [row["text"] for row in httpx.post(url + "/v1/translate", json={"segments": SOURCES},
                                               timeout=60).json()["translations"]]
    prefixes = PREFIXES
    with ThreadPoolExecutor(len(SOURCES)) as pool:
        answers = list(pool.map(lambda pair: complete(url, q=pair[0], prefix=pair[1]), zip(SOURCES, prefixes)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
    found = [a.json() for a in answers]
    assert all(set(one) == {"translation", "alternatives", "confidence"} for one in found)
    (tmp_path / "typed.de").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    cli = mt_translate(tiny, SOURCES, "--prefix", str(tmp_path / "typed.de"))
    assert [one["translation"] for one in found] == cli
    for one, prefix, alone in zip(found, prefixes, plain):
        assert one["translation"].startswith(prefix) and one["alternatives"] == []
        if not prefix:
            assert one["translation"] == alone
        assert one["confidence"] is None or 0.0 <= one["confidence"] <= 1.0

    for source, prefix in zip(SOURCES[:3], prefixes[:3]):
        alternatives = complete(url, q=source, prefix=prefix, alternatives=3).json()["alternatives"]
        assert 1 <= len(alternatives) <= 3
        assert all(a["text"].startswith(prefix) and 0.0 < a["probability"] <= 1.0 for a in alternatives)
        assert [a["probability"] for a in alternatives] == sorted((a["probability"] for a in alternatives),
                                                                   reverse=True)


def test_a_repeated_completion_is_answered_from_the_cache(url: str) -> None:
    body = {"q": "a cat sees the moon", "prefix": "a c", "alternatives": 2}
    first = complete(url, **body)
    hits, misses = metric(url, "mt_cache_hits_total"), metric(url, "mt_cache_misses_total")
    again = complete(url, **body)
    assert again.status_code == first.status_code == 200 and again.json() == first.json()
    assert (metric(url, "mt_cache_hits_total") - hits, metric(url, "mt_cache_misses_total") - misses) == (1, 0)
    other = complete(url, **{**body, "alternatives": 1})  # k is part of the key
    assert other.status_code == 200 and metric(url, "mt_cache_misses_total") > misses


@pytest.mark.parametrize("body, needle", [
    ({"prefix": "a"}, "q: missing"),
    ({"q": 3}, "q: expected a string"),
    ({"q": "a\nb"}, "q: holds a line break"),
    ({"q": "a man", "prefix": 7}, "prefix: expected a string"),
    ({"q": "a man", "prefix": "a\nb"}, "prefix: one line"),
    ({"q": "a man", "prefix": "a " * 200}, "prefix: up to"),  # over the model's 256 positions
    ({"q": "a man", "prefix": "a שלום"}, "prefix: 4 letters"),  # a script the vocabulary lacks
    ({"q": "a man", "prefix": "a" * 1999}, "exceeds text limit"),  # q and prefix count together
    ({"q": "a man", "alternatives": -1}, "alternatives: must be at least 0"),
    ({"q": "a man", "alternatives": 4}, "alternatives: at most 3"),
    ({"q": "a man", "alternatives": True}, "alternatives: expected an integer"),
    ({"q": "a man", "alternatives": "two"}, "alternatives: expected an integer"),
    ({"q": "a man", "n_best": 2}, "n_best: unknown field"),
    ({"q": "a man", "beam": 2}, "beam: at most 1"),  # the server's bound, as on /v1/translate
    ({"q": "a man", "target": "xx"}, "target"),
])
def test_bad_input_is_a_json_400_of_one_line(url: str, body: dict, needle: str) -> None:
    answer = complete(url, **body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]
    assert needle in message and "\n" not in message and "Traceback" not in message, message


def test_the_route_is_documented(url: str) -> None:
    spec = httpx.get(url + "/openapi.json", timeout=10).json()
    route = spec["paths"]["/v1/complete"]["post"]
    schema = route["requestBody"]["content"]["application/json"]["schema"]
    assert set(schema["properties"]) >= {"q", "prefix", "alternatives", "source", "target"}
    answer = route["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(answer["properties"]) == {"translation", "alternatives", "confidence"}
    assert json.dumps(spec)  # serialisable as served


def test_the_typed_prefix_counts_towards_the_limits_before_the_model(tmp_path: Path) -> None:
    """No model needed: the per-address characters a day count q and prefix together, and over
    --char-limit is refused before the buckets are charged (a loading server answers 503 after)."""
    from starlette.testclient import TestClient

    from mt.serve.app import create_app
    from mt.serve.limits import Limiter
    from mt.serve.settings import ServeSettings

    app = create_app(ServeSettings(address_characters_per_day=12, char_limit=10), [tmp_path / "none.pt"])
    app.state.serve.limiter = Limiter(lambda: 1000.0)
    client = TestClient(app)
    over = client.post("/v1/complete", json={"q": "abcdef", "prefix": "ghijk"})  # 11 > --char-limit 10
    assert over.status_code == 400 and "request (11) exceeds text limit (10)" in over.json()["error"]
    assert client.post("/v1/complete", json={"q": "abc", "prefix": "defgh"}).status_code == 503  # 8 charged
    r = client.post("/v1/complete", json={"q": "abc", "prefix": "de"})  # 5 more: 13 > 12 a day
    assert r.status_code == 429 and "characters a day" in r.json()["error"]
