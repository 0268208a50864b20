"""Protected spans and case styles through `mt serve` (one real server on the tiny random checkpoint):
LibreTranslate's /translate (text and format=html) and /v1/translate keep every placeholder, URL
and number verbatim, exactly once, and answer what `mt translate` writes for the same lines; a
line where nothing applies is what it is with `--protect none --no-case`; `--protect` is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_serve import httpx, mt_translate, server

from mt.errors import MTError
from mt.serve.settings import ServeSettings
from mt.text.protect import KINDS, find_spans

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "fastapi_offline")

LINES = ["Click {0} to see {1} people on the beach.", "Hello %s, write to support@example.com today.",
         "Visit https://example.org/dogs to see 3 dogs.", "TWO DOGS ARE PLAYING IN THE SNOW.",
         "the cat sat on the mat"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mt.deploy.tiny import write_random_checkpoint
    return write_random_checkpoint(tmp_path_factory.mktemp("protect") / "tiny.pt", seed=1)


def _spans(line: str) -> list[str]:
    return [line[a:b] for a, b, _ in find_spans(line, KINDS)]


def test_every_route_keeps_the_spans(tiny: Path) -> None:
    expected = mt_translate(tiny, LINES)
    for line, out in zip(LINES, expected):
        assert all(out.count(span) == 1 for span in _spans(line)), (line, out)
    assert expected[3] == expected[3].upper()
    with server(tiny, "--cache-size", "0") as (url, _):
        lt = httpx.post(url + "/translate", json={"q": LINES, "source": "en", "target": "de"}, timeout=60)
        assert lt.status_code == 200 and lt.json()["translatedText"] == expected
        v1 = httpx.post(url + "/v1/translate", json={"segments": LINES}, timeout=60)
        assert v1.status_code == 200 and [row["text"] for row in v1.json()["translations"]] == expected
        html = httpx.post(url + "/translate", json={"q": f"<p>{LINES[1]} <b>{LINES[2]}</b></p>", "source": "en",
                                                    "target": "de", "format": "html"}, timeout=60)
        assert html.status_code == 200, html.text
        out = html.json()["translatedText"]
        assert all(out.count(span) == 1 for span in _spans(LINES[1]) + _spans(LINES[2])), out


def test_protect_flags() -> None:
    flags = {"api_keys": None, "cors_origins": []}
    assert ServeSettings.from_flags(**flags).protect is None  # the checkpoint's decode.protect
    assert ServeSettings.from_flags(**flags, protect="none").protect == ()
    assert ServeSettings.from_flags(**flags, protect="urls,numbers").protect == ("urls", "numbers")
    with pytest.raises(MTError, match="--protect: unknown kind 'links'"):
        ServeSettings.from_flags(**flags, protect="links")
