"""`mt serve` for the LibreTranslate clients people run (issue 35): each test replays one client's
own requests and reads the fields it reads, as its published code does (named with its version or
commit in the test). One module-scoped server (the tiny random en->de checkpoint of test_serve.py,
127.0.0.1, always stopped) answers them all; outputs are compared with the real `mt translate`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import test_serve
from test_serve import httpx, mt_translate, server

from mt.serve.languages import ServedLanguages
from mt.serve.requests import ApiError

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "libretranslatepy")
tiny = test_serve.tiny  # the module-scoped tiny random checkpoint (and its synthetic lines)


@pytest.fixture(scope="module")
def lt_server(tiny) -> Iterator[str]:
    with server(tiny[0], "--beam", "2") as (url, _):
        yield url


def test_codes_match_case_insensitively_with_aliases() -> None:
    langs = ServedLanguages([("en", "de"), ("en", "zh"), ("pt", "en"), ("zh-Hant", "en")])
    for code, want in [("EN", "en"), ("En", "en"), ("en_US", "en"), ("en-gb", "en"), ("DE", "de"), ("de_DE", "de"),
                       ("zh", "zh"), ("zh-Hans", "zh"), ("ZH_CN", "zh"), ("zh-SG", "zh"), ("zh-Hant", "zh-Hant"),
                       ("zh-TW", "zh-Hant"), ("zt", "zh-Hant"), ("pt", "pt"), ("pt-BR", "pt"), ("pt_br", "pt"),
                       ("pb", "pt"), ("PT-PT", "pt")]:
        assert langs.match(code, "source") == want, code
    assert langs.find("fr") is None and langs.find("zh-TW", ["en", "zh"]) is None
    with pytest.raises(ApiError, match="target fr: not served; this server's languages are en, pt, zh-Hant, de, zh"):
        langs.match("fr", "target")
    assert langs.pair("PT_br", "EN") == ("pt", "en") and langs.pair("en", "zh-CN") == ("en", "zh")
    with pytest.raises(ApiError, match="language pair de-en: not served; this model translates en-de, en-zh"):
        langs.pair("de", "en")
    served = ServedLanguages([("pt-BR", "en")])
    assert served.match("pt", "source") == "pt-BR" and served.match("pb", "source") == "pt-BR"
    assert served.listing() == [{"code": "pt-BR", "name": "Portuguese (Brazil)", "targets": ["en"]},
                                {"code": "en", "name": "English", "targets": []}]


def test_weblate_and_mastodon_find_en_de_in_languages(tiny, lt_server: str) -> None:
    listing = httpx.get(lt_server + "/languages", timeout=30).json()
    # LibreTranslate's shape: every language, each with the targets it translates into
    assert listing == [{"code": "en", "name": "English", "targets": ["de"]},
                       {"code": "de", "name": "German", "targets": []}]
    # Weblate (WeblateOrg/weblate 037eee0, weblate/machinery/libretranslate.py): download_languages()
    # keeps `code` only; a pair is supported when both codes are in that set; then it POSTs form data.
    codes = [x["code"] for x in listing]
    assert "en" in codes and "de" in codes
    line = tiny[1][0]
    payload = httpx.post(lt_server + "/translate", data={"api_key": "", "q": line, "source": "en", "target": "de"},
                         timeout=60).json()
    assert payload["translatedText"] == mt_translate(tiny[0], [line], "--beam", "2")[0]
    # Mastodon v4.2.0 (app/lib/translation_service/libre_translate.rb, #languages): code -> targets
    # without the code itself; languages[nil] (source "auto") = every target, flattened
    languages = {x["code"]: [t for t in x["targets"] if t != x["code"]] for x in listing}
    languages[None] = sorted({t for targets in languages.values() for t in targets})
    assert "de" in languages["en"] and languages[None] == ["de"]


def test_codes_in_any_case_and_alias_on_every_route(tiny, lt_server: str) -> None:
    line = tiny[1][1]
    want = mt_translate(tiny[0], [line], "--beam", "2")[0]
    for source, target in [("EN", "DE"), ("en_US", "de-DE"), ("En-gb", "de_at")]:
        r = httpx.post(lt_server + "/translate", json={"q": line, "source": source, "target": target}, timeout=60)
        assert r.status_code == 200 and r.json()["translatedText"] == want, (source, target, r.text)
    r = httpx.post(lt_server + "/v1/translate", json={"segments": [line], "target": "DE", "beam": 2}, timeout=60)
    assert r.status_code == 200 and r.json()["translations"][0]["text"] == want
    r = httpx.post(lt_server + "/translate", json={"q": line, "source": "fr", "target": "DE"}, timeout=60)
    assert r.status_code == 400 and r.json() == {"error": "language pair fr-de: not served; this model translates en-de"}
