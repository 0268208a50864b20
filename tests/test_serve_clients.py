"""`mt serve` for the LibreTranslate clients people run (issue 35): each test replays one client's
own requests and reads the fields it reads, as its published code does (named with its version or
commit in the test). One module-scoped server (the tiny random en->de checkpoint of test_serve.py,
127.0.0.1, always stopped) answers them all; outputs are compared with the real `mt translate`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
import test_serve
from test_serve import httpx, mt_translate, server

from mt.decode.align import align_words
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.serve.languages import ServedLanguages
from mt.serve.requests import ApiError
from mt.serve.settings import ServeSettings
from mt.text.html import VOID, HtmlFragment

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "libretranslatepy", "py3langid")
tiny = test_serve.tiny  # the module-scoped tiny random checkpoint (and its synthetic lines)


@pytest.fixture(scope="module")
def lt_server(tiny) -> Iterator[str]:
    with server(tiny[0], "--beam", "2", "--cors-origin", "*") as (url, _):
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
    with pytest.raises(ApiError, match="language pair de-en: not served; this server translates en-de, en-zh"):
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
    # Weblate 5.x (WeblateOrg/weblate 1911786, the same file, BatchMachineTranslation): JSON with a
    # list q and Weblate's own codes (zh_Hans -> zh by its language_map, others as they are: pt_BR, de_DE)
    texts = tiny[1][2:5]
    payload = httpx.post(lt_server + "/translate", json={"api_key": None, "q": texts, "source": "en_US",
                                                         "target": "de_DE"}, timeout=60).json()
    assert [payload["translatedText"][i] for i in range(len(texts))] == mt_translate(tiny[0], texts, "--beam", "2")
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
    assert r.status_code == 400 and r.json() == {"error": "language pair fr-de: not served; this server translates en-de"}


class _Tags(HTMLParser):
    """An HTML string's start tags (with attributes), end tags and script/style text, to compare markup."""

    def __init__(self, markup: str, *, nested: bool = True) -> None:
        super().__init__(convert_charrefs=True)
        self.nested = nested  # check that the tags are properly nested (the server's outputs)
        self.starts: list[tuple[str, tuple]] = []
        self.ends: list[str] = []
        self.raw: list[str] = []
        self.open: list[str] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.starts.append((tag, tuple(attrs)))
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        self.ends.append(tag)
        closes = self.open.pop() if self.open else None
        assert closes == tag or not self.nested, f"</{tag}> closes {closes}"

    def handle_data(self, data):
        if self.lasttag in ("script", "style") and self.open and self.open[-1] in ("script", "style"):
            self.raw.append(data)


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def test_html_blocks_keep_markup() -> None:
    markup = ("<h1>The  title</h1>\n<ul>\n  <li>one &amp; two</li>\n  <li>three <em>four</em> five\n"
              "    <ol><li>six</li><li>seven <code>x = 1 &lt; 2</code></li></ol></li>\n</ul>"
              "<p>Line one<br>line <a href=\"/?a=1&amp;b=2\" title=\"A &quot;t&quot;\">two</a>.</p>"
              "<p translate=\"no\">keep me</p><script>var s = '<b>';</script><style>p {}</style>"
              "<p>a<p>b<div class=\"notranslate\">c</div>")
    fragment = HtmlFragment(markup)
    assert fragment.blocks == ["The title", "one & two", "three four five", "six", "seven", "Line one", "line two.",
                               "a", "b"]
    out = fragment.render([b.upper() for b in fragment.blocks])
    assert out == ("<h1>THE TITLE</h1>\n<ul>\n  <li>ONE &amp; TWO</li>\n  <li>THREE <em>FOUR</em> FIVE\n"
                   "    <ol><li>SIX</li><li>SEVEN <code>x = 1 &lt; 2</code></li></ol></li>\n</ul>"
                   "<p>LINE ONE<br>LINE <a href=\"/?a=1&amp;b=2\" title=\"A &quot;t&quot;\">TWO</a>.</p>"
                   "<p translate=\"no\">keep me</p><script>var s = '<b>';</script><style>p {}</style>"
                   "<p>A</p><p>B</p><div class=\"notranslate\">c</div>")
    # a translation with markup in it comes back as text
    assert HtmlFragment("<p>x</p>").render(["<script>alert(1)</script> & co"]) == \
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</p>"
    # open elements are closed, stray end tags dropped, mis-nested ones closed in order
    assert HtmlFragment("<b><i>x</b></i></div> y").render(["X Y"]) == "<b><i>X</i></b> Y"


def test_mastodon_html_list_end_to_end(tiny, lt_server: str) -> None:
    """Mastodon v4.2.0 (app/lib/translation_service/libre_translate.rb, #translate): a JSON body
    {q: [status html, ...], source, target, format: "html", api_key: nil}; reads translatedText[i]
    and detectedLanguage[i].language (falling back to the source it sent)."""
    statuses = ["<p>Hello <span class=\"h-card\"><a href=\"https://example.social/@bob\" class=\"u-url mention\">"
                "@<span>bob</span></a></span>, this is a <b>bold</b> idea &amp; a <a href=\"https://example.org/x?a=1&amp;b=2\" "
                "rel=\"nofollow noopener\" target=\"_blank\">good link</a>.</p><p>Second line<br>third line</p>",
                "<p>Short one.</p>",
                "<ul><li>One &amp; two &lt;3<ul><li>three <i>four</i></li><li>five</li></ul></li><li>six</li></ul>"]
    body = {"q": statuses, "source": "en", "target": "de", "format": "html", "api_key": None}
    r = httpx.post(lt_server + "/translate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()
    loaded = load_model([tiny[0]], "cpu")
    translated = [(text, (data.get("detectedLanguage") or [{}] * 3)[i].get("language") or "en")
                  for i, text in enumerate(data["translatedText"])]
    assert len(translated) == 3 and all(lang == "en" for _, lang in translated)
    for source, (out, _) in zip(statuses, translated):
        blocks = HtmlFragment(source).blocks
        want = mt_translate(tiny[0], blocks, "--beam", "2")
        assert [_collapsed(b) for b in HtmlFragment(out).blocks] == [_collapsed(w) for w in want]
        got, sent = _Tags(out), _Tags(source)
        assert got.starts == sent.starts and got.ends == sent.ends and not got.open
        # inline markup sits where the model's cross-attention aligns it (mt.decode.align), as rendered here
        fragment = HtmlFragment(source)
        marked = fragment.aligned_blocks
        alignments = align_words(loaded.engine.model, loaded.tokenizer, [blocks[b] for b in marked],
                                 [want[b] for b in marked])
        assert out == fragment.render(want, dict(zip(marked, alignments)))


def test_hostile_html_gives_back_nothing_executable_it_was_not_sent(lt_server: str) -> None:
    hostile = ["<p>&lt;script&gt;alert(1)&lt;/script&gt; and &lt;img src=x onerror=alert(2)&gt;</p>",
               "<scr<script>ipt>alert(3)</script><p title=\"&quot;&gt;&lt;script&gt;alert(4)&lt;/script&gt;\">t</p>",
               "<p a\"onmouseover=alert(5) x=1>u <b>v",
               "<!--<script>alert(6)</script>--><p>w</p><a href=\"javascript:alert(7)\">z</a></div></p>",
               "<math><mi xlink:href=\"javascript:alert(8)\">m</mi></math><svg><style>p{}</style></svg>",
               "<!-- a --!><script>alert(9)</script> --><p>w</p>",  # a comment that browsers end at --!>
               "<noscript><p title=\"</noscript><img src=x onerror=alert(10)>\"></noscript>"]
    r = httpx.post(lt_server + "/translate", json={"q": hostile, "source": "en", "target": "de", "format": "html"},
                   timeout=60)
    assert r.status_code == 200, r.text
    for sent, out in zip(hostile, r.json()["translatedText"]):
        got, given = _Tags(out), _Tags(sent, nested=False)  # the output's tags are properly nested
        for tag, attrs in got.starts:  # each tag was sent, with these attributes (or more: a broken one is dropped)
            assert any(tag == t and set(attrs) <= set(a) for t, a in given.starts), (sent, out)
        assert set(got.raw) <= set(given.raw) and not got.open
        assert out.count("<script") <= sent.count("<script") and "onmouseover" not in out
    outs = r.json()["translatedText"]
    assert all("<!--" not in out for out in outs) and "<script" not in outs[5]  # comments are dropped
    # an attribute that a browser's noscript parsing would end early comes back escaped: inert
    assert outs[6] == "<noscript><p title=\"&lt;/noscript&gt;&lt;img src=x onerror=alert(10)&gt;\"></p></noscript>"


ENGLISH = ["A man in a blue shirt is standing on a ladder.", "Two young girls are playing in the water.",
           "A dog runs across the green grass with a ball."]
GERMAN = "Ein Mann fährt mit dem Fahrrad über eine Brücke."


def test_detect_and_source_auto(tiny, lt_server: str) -> None:
    from libretranslatepy import LibreTranslateAPI

    # libretranslatepy 2.1.4 (argosopentech/LibreTranslate-py): detect(q) POSTs q, returns the JSON list
    lt = LibreTranslateAPI(lt_server)
    ranked = lt.detect(ENGLISH[0])
    assert ranked[0]["language"] == "en" and ranked[0]["confidence"] > 50 and len(ranked) == 2
    assert [x["confidence"] for x in ranked] == sorted((x["confidence"] for x in ranked), reverse=True)
    assert httpx.post(lt_server + "/detect", data={"q": GERMAN}, timeout=30).json()[0]["language"] == "de"
    assert httpx.post(lt_server + "/detect", json={"q": "12 345 !"}, timeout=30).json() == \
        [{"confidence": 0.0, "language": "en"}]
    assert httpx.post(lt_server + "/detect", json={}, timeout=30).json() == {"error": "q: missing"}
    # source auto (TYPO3, Mastodon): detectedLanguage per text, the identifier's confidence
    r = httpx.post(lt_server + "/translate", json={"q": ENGLISH, "source": "auto", "target": "de"}, timeout=60).json()
    assert r["translatedText"] == mt_translate(tiny[0], ENGLISH, "--beam", "2")
    assert [d["language"] for d in r["detectedLanguage"]] == ["en"] * 3
    assert all(50 < d["confidence"] <= 100 for d in r["detectedLanguage"])
    one = httpx.post(lt_server + "/translate", json={"q": ENGLISH[1], "source": "AUTO", "target": "DE"}, timeout=60)
    assert one.json()["detectedLanguage"] == r["detectedLanguage"][1]
    # a language the server serves (de, a target) but does not translate from: 400 naming it
    bad = httpx.post(lt_server + "/translate", json={"q": [ENGLISH[0], GERMAN], "source": "auto", "target": "de"},
                     timeout=60)
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("source auto: q[1] is German (de, confidence ")
    assert bad.json()["error"].endswith("this server translates into de from en")
    # Mastodon v4.2.0 with no source language: source "auto", format html; reads detectedLanguage[i].language
    statuses = [f"<p>{ENGLISH[0]} <a href=\"https://example.org/\">{ENGLISH[1]}</a></p>", f"<p>{ENGLISH[2]}</p>"]
    r = httpx.post(lt_server + "/translate", json={"q": statuses, "source": "auto", "target": "de", "format": "html",
                                                   "api_key": None}, timeout=60).json()
    assert [(r.get("detectedLanguage") or [{}] * 2)[i].get("language") for i in range(2)] == ["en", "en"]
    assert len(r["translatedText"]) == 2


def test_detect_accuracy_script_on_multi30k(multi30k_dir, capsys) -> None:
    from scripts.tools.detect_accuracy import main
    accuracy = main(["--data", str(multi30k_dir), "--langs", "en", "de", "fr", "--limit", "50"])
    assert set(accuracy) == {"en", "de", "fr"} and min(accuracy.values()) >= 0.9
    assert "CPU: " in capsys.readouterr().out


def test_frontend_settings_and_suggest_as_libretranslate(lt_server: str) -> None:
    """LibreTranslate's own front end (LibreTranslate/LibreTranslate 39429cb, libretranslate/app.py
    /frontend/settings, /suggest) starts from /frontend/settings; with suggestions off /suggest is a 403
(files: tests/test_serve_files.py)."""
    s = httpx.get(lt_server + "/frontend/settings", timeout=30).json()
    assert s == {"charLimit": 10000, "frontendTimeout": 500, "apiKeys": False, "keyRequired": False,
                 "suggestions": False, "filesTranslation": True,
                 "supportedFilesFormat": [".txt", ".html", ".htm", ".srt", ".vtt", ".docx", ".odt", ".pptx", ".odp",
                                          ".epub", ".md", ".markdown", ".po", ".pot", ".xlf", ".xliff"],
                 "language": {"source": {"code": "auto", "name": "Auto Detect"},
                              "target": {"code": "de", "name": "German"}}}
    r = httpx.post(lt_server + "/suggest", data={"q": "Hello", "s": "Hallo", "source": "en", "target": "de"},
                   timeout=30)
    assert r.status_code == 403 and r.json() == {"error": "Suggestions are disabled on this server."}


def test_cors_any_origin_with_a_real_preflight(lt_server: str) -> None:
    """A browser add-on (moz-extension://, chrome-extension://) or web app calling from another
    origin: the browser's preflight, then the request, against `--cors-origin '*'` (LibreTranslate's
    behaviour: it answers every origin)."""
    for origin in ("moz-extension://0c1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7", "chrome-extension://abcdefghijklmnop",
                   "https://app.example.org"):
        pre = httpx.options(lt_server + "/translate", timeout=30, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-api-key"})
        assert pre.status_code == 200, pre.text
        assert pre.headers["access-control-allow-origin"] == "*"
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert {"content-type", "x-api-key"} <= set(pre.headers["access-control-allow-headers"].lower().split(", "))
        r = httpx.post(lt_server + "/translate", json={"q": "Hello.", "source": "en", "target": "de"},
                       headers={"Origin": origin}, timeout=60)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    r = httpx.get(lt_server + "/languages", headers={"Origin": "null"}, timeout=30)
    assert r.headers["access-control-allow-origin"] == "*"


def test_cors_named_origins_of_any_scheme(tiny) -> None:
    from starlette.testclient import TestClient

    from mt.serve.app import create_app

    named = ("moz-extension://0c1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7", "chrome-extension://abcdefghijklmnop")
    client = TestClient(create_app(ServeSettings(cors_origins=named), [tiny[0]]))  # no lifespan: no model needed
    for origin in named:
        pre = client.options("/detect", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers": "content-type"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == origin
        assert client.get("/health", headers={"Origin": origin}).headers["access-control-allow-origin"] == origin
    pre = client.options("/detect", headers={"Origin": "chrome-extension://other", "Access-Control-Request-Method": "POST"})
    assert pre.status_code == 400 and "access-control-allow-origin" not in pre.headers
    for bad in ("https://example.org/", "example.org", "moz-extension://", "https://a.org/path", "ht tp://x", "1x://y"):
        with pytest.raises(MTError, match="--cors-origin"):
            ServeSettings(cors_origins=(bad,))
    assert ServeSettings(cors_origins=("*", "http://localhost:8080", "safari-web-extension://ID")).cors_origins


def test_libretranslatepy_client_translate_detect_languages(tiny, lt_server: str) -> None:
    """libretranslatepy 2.1.4 (argosopentech/LibreTranslate-py, libretranslatepy/api.py), every
    call it has: translate (urlencoded form, reads translatedText), detect (reads the list),
    languages (GET), and an error as the HTTPError it raises."""
    import urllib.error

    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(lt_server)
    want = mt_translate(tiny[0], ENGLISH, "--beam", "2")
    assert [lt.translate(line, "en", "de", timeout=60) for line in ENGLISH] == want
    assert lt.translate(ENGLISH[2], "auto", "de", timeout=60) == want[2]
    assert lt.translate(ENGLISH[0], "EN", "de_DE", timeout=60) == want[0]
    assert [x["language"] for x in lt.detect(GERMAN)] == ["de", "en"]
    assert lt.detect(ENGLISH[1])[0]["language"] == "en"
    assert lt.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                              {"code": "de", "name": "German", "targets": []}]
    with pytest.raises(urllib.error.HTTPError) as failed:
        lt.translate(ENGLISH[0], "de", "en")
    assert failed.value.code == 400
    assert json.loads(failed.value.read()) == {"error": "language pair de-en: not served; this server translates en-de"}
