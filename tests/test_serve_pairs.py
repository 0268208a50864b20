"""`mt serve` with a multi-pair model (one model, target tags): the served languages, the target
that picks the tag on both APIs, and outputs equal to `mt translate --target-lang`."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_serve import httpx, mt_translate, server

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "py3langid")

LINES = ["He reads a book at home.", "", "She drinks tea."]


def test_multi_pair_model_serves_each_target(multi_run: tuple[Path, Path]) -> None:
    ckpt = multi_run[1] / "checkpoints" / "best.pt"
    want = {lang: mt_translate(ckpt, LINES, "--target-lang", lang) for lang in ("de", "ru")}
    assert want["de"] != want["ru"]
    with server(ckpt) as (url, _):
        assert httpx.get(url + "/languages").json() == [{"code": "en", "name": "English", "targets": ["de", "ru"]},
                                                        {"code": "de", "name": "German", "targets": []},
                                                        {"code": "ru", "name": "Russian", "targets": []}]
        assert httpx.get(url + "/v1/settings").json()["languages"] == [{"source": "en", "target": "de"},
                                                                       {"source": "en", "target": "ru"}]
        for lang in ("de", "ru"):
            got = httpx.post(url + "/v1/translate", json={"segments": LINES, "target": lang}).json()
            assert [t["text"] for t in got["translations"]] == want[lang]
            lt = httpx.post(url + "/translate", json={"q": "\n".join(LINES), "source": "en", "target": lang}).json()
            assert lt["translatedText"] == "\n".join(want[lang])
            for prefix in ("", want[lang][0][:3]):  # /v1/complete: the target's tag, its vocabulary
                done = httpx.post(url + "/v1/complete", json={"q": LINES[0], "prefix": prefix, "target": lang})
                assert done.status_code == 200, done.text
                assert done.json()["translation"].startswith(prefix)
                assert prefix or done.json()["translation"] == want[lang][0]
        missing = httpx.post(url + "/v1/translate", json={"segments": LINES})
        assert missing.status_code == 400
        assert missing.json() == {"error": "target: required: this model translates into de, ru"}
        unknown = httpx.post(url + "/translate", json={"q": "Hi.", "source": "en", "target": "fr"})
        assert unknown.status_code == 400 and "en-fr: not served; this server translates en-de, en-ru" in unknown.text
        auto = httpx.post(url + "/translate", json={"q": "She drinks tea.", "source": "auto", "target": "ru"}).json()
        assert auto["translatedText"] == want["ru"][2] and auto["detectedLanguage"]["language"] == "en"
