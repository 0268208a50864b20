"""Glossaries in `mt serve`, through real server processes on the tiny random checkpoint: a /v1
request's own glossary is kept (as `mt translate --glossary` keeps it) and replaces the server's
`--glossary`, which LibreTranslate's /translate keeps; sentences without a term come out as
without a glossary, also when batched beside another request's constrained ones; a malformed
glossary is a 400 naming the item, too many or too long terms a 413; a CTranslate2 export refuses
glossaries (400 per request, and a `--glossary` stops it at start-up, in one line)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_serve import ENV, free_port, httpx, mt_translate, server

from mt.text.glossary import occurs

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "fastapi_offline")

DEFAULT = "cat\tкошка\n"  # the server's --glossary for en-de
CAT = "the cat sat on a mat."
WORD = "zebrafish"  # a do-not-translate term in the requests' own glossaries
LINE = f"we saw {WORD} near the river."
PLAIN = "nothing to keep in this line."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the tiny random checkpoint, a glossary file holding DEFAULT)."""
    from mt.deploy.tiny import write_random_checkpoint
    root = tmp_path_factory.mktemp("gloss")
    (root / "terms.tsv").write_text(DEFAULT, encoding="utf-8")
    return write_random_checkpoint(root / "tiny.pt", seed=1), root / "terms.tsv"


@pytest.fixture(scope="module")
def glossary_server(tiny) -> str:
    ckpt, terms = tiny
    # no cache: every request reaches the batcher, so requests with and without terms share rounds
    with server(ckpt, "--glossary", f"en-de={terms}", "--max-glossary-terms", "3", "--cache-size", "0") as (url, _):
        yield url


def v1(url: str, segments: list[str], **fields: object) -> httpx.Response:
    return httpx.post(url + "/v1/translate", json={"segments": segments, **fields}, timeout=60)


def texts(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [row["text"] for row in response.json()["translations"]]


def test_request_glossary_is_kept_and_replaces_the_default(tiny, glossary_server: str, tmp_path: Path) -> None:
    ckpt, terms = tiny
    url = glossary_server
    own = tmp_path / "own.tsv"
    own.write_text(f"{WORD}\n", encoding="utf-8")
    plain = mt_translate(ckpt, [LINE, PLAIN, CAT])
    assert not occurs(WORD, plain[0]) and not occurs("кошка", plain[2])
    kept = texts(v1(url, [LINE, PLAIN, CAT], glossary=[{"source": WORD}]))
    # The term is kept, exactly as `mt translate --glossary` keeps it; lines without one (the default's
    # "cat" included: the request's glossary replaces it) are byte-identical to plain `mt translate`.
    assert kept[0] == mt_translate(ckpt, [LINE], "--glossary", own)[0] and occurs(WORD, kept[0])
    assert kept[1:] == plain[1:]
    # No glossary field: the server's default for the pair; an empty one: none at all.
    default = texts(v1(url, [CAT, LINE]))
    assert default == mt_translate(ckpt, [CAT, LINE], "--glossary", terms) and occurs("кошка", default[0])
    assert texts(v1(url, [CAT, LINE], glossary=[])) == [plain[2], plain[0]]
    # LibreTranslate's /translate keeps its shape and uses the default.
    lt = httpx.post(url + "/translate", json={"q": [CAT, PLAIN], "source": "en", "target": "de"}, timeout=60)
    assert lt.status_code == 200 and lt.json()["translatedText"] == [default[0], plain[1]]
    assert set(lt.json()) == {"translatedText", "confidence"}
    settings = httpx.get(url + "/v1/settings").json()
    assert settings["glossary"] is True and settings["max_glossary_terms"] == 3


def test_batched_requests_keep_their_own_terms(tiny, glossary_server: str) -> None:
    """The same sentence from clients with and without the term, sent together: each gets its own."""
    ckpt, _ = tiny
    plain = mt_translate(ckpt, [LINE])[0]
    kept = texts(v1(glossary_server, [LINE], glossary=[{"source": WORD}]))[0]

    def one(i: int) -> str:
        glossary = [{"source": WORD}] if i % 2 else []
        return texts(v1(glossary_server, [LINE, f"{PLAIN} {i}"], glossary=glossary))[0]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(16)))
    assert got == [kept if i % 2 else plain for i in range(16)]


@pytest.mark.parametrize(("glossary", "status", "message"), [
    ("cat", 400, "glossary: expected a list of"),
    ([{"source": "cat"}, ["dog"]], 400, "glossary[1]: expected an object"),
    ([{"target": "кошка"}], 400, "glossary[0].source: missing"),
    ([{"source": "cat", "target": 5}], 400, "glossary[0].target: expected a string, got int"),
    ([{"source": "cat", "tgt": "x"}], 400, "glossary[0].tgt: unknown field"),
    ([{"source": " "}], 400, "glossary[0].source: empty"),
    ([{"source": "cat", "target": "a"}, {"source": "cat", "target": "b"}], 400, "glossary[1]: 'cat' -> 'b', but"),
    ([{"source": f"w{i}"} for i in range(4)], 413, "glossary: 4 terms, the limit is 3 (--max-glossary-terms)"),
    ([{"source": "x" * 300}], 413, "glossary[0].source: 300 characters, a term has at most 256"),
])
def test_bad_glossaries(glossary_server: str, glossary: object, status: int, message: str) -> None:
    response = v1(glossary_server, [CAT], glossary=glossary)
    assert response.status_code == status and response.json()["error"].startswith(message), response.text


def test_sampling_cannot_keep_terms(glossary_server: str) -> None:
    response = v1(glossary_server, [CAT], sampling=True)  # the default glossary applies
    assert response.status_code == 400 and "sampling draws translations freely" in response.json()["error"]
    assert v1(glossary_server, [CAT], sampling=True, glossary=[]).status_code == 200


def serve_fails(*args: str) -> str:
    """The one stderr line of an `mt serve` that must not start (exit 2)."""
    run = subprocess.run([sys.executable, "-m", "mt", "serve", "--port", str(free_port()), *args], env=ENV,
                         capture_output=True, text=True, timeout=120)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and lines[-1].startswith("mt: ") and "Traceback" not in run.stderr, run.stderr
    return lines[-1]


def test_bad_server_glossaries_stop_it_in_one_line(tiny, tmp_path: Path) -> None:
    ckpt, terms = tiny
    bad = tmp_path / "bad.tsv"
    bad.write_text("cat\tкошка\ncat\tкот\n", encoding="utf-8")
    assert "bad.tsv:2: 'cat' -> 'кот', but line 1 says 'кошка'" in serve_fails("-c", str(ckpt), "--glossary", str(bad))
    assert "missing.tsv: cannot read" in serve_fails("-c", str(ckpt), "--glossary", str(tmp_path / "missing.tsv"))
    line = serve_fails("-c", str(ckpt), "--glossary", f"fr-en={terms}")
    assert "no model translates fr-en; this server translates en-de" in line


@pytest.mark.requires("ctranslate2")
def test_a_ctranslate2_model_refuses_glossaries(tiny, tmp_path: Path) -> None:
    from mt.deploy.export import export_ctranslate2
    ckpt, terms = tiny
    exported = export_ctranslate2(ckpt, tmp_path / "ct2")
    with server(exported) as (url, _):
        response = v1(url, [CAT], glossary=[{"source": "cat"}])
        assert response.status_code == 400 and "CTranslate2" in response.json()["error"]
        assert httpx.get(url + "/v1/settings").json()["glossary"] is False
        assert v1(url, [CAT]).status_code == 200
    assert "CTranslate2" in serve_fails("-c", str(exported), "--glossary", str(terms))
