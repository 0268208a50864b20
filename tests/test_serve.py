"""`mt serve` end to end: a real server process (uvicorn via the CLI, 127.0.0.1, a free port),
spoken to over HTTP with httpx and LibreTranslate's own client. Every server is stopped, even on
failure. Outputs are compared with the real `mt translate` CLI on the same lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mt.decode.repeats import retry_wins

try:
    import httpx
except ImportError:  # the requires marker below fails every test (skips it offline)
    httpx = None
pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "libretranslatepy", "fastapi_offline")

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    """Until `url`/ready answers 200; fails when the server exits first or takes longer than `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"mt serve exited early with {proc.returncode}"
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        assert time.monotonic() < deadline, f"mt serve not ready in {seconds:g} s"
        time.sleep(0.1)


@contextlib.contextmanager
def server(ckpt: Path, *args: str, log: Path | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`mt serve -c ckpt args...` on a free loopback port, ready; always stopped afterwards."""
    port = free_port()
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "mt", "serve", "-c", str(ckpt), "--port", str(port), *args],
                            env=ENV, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if log:
            out.close()


def run_translate(ckpt: Path, lines: list[str], *args: str) -> subprocess.CompletedProcess:
    """The real CLI on `lines` (stdout and stderr captured as bytes)."""
    return subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(ckpt), *args],
                          input="".join(line + "\n" for line in lines).encode(), env=ENV, capture_output=True,
                          check=True, timeout=120)


def mt_translate(ckpt: Path, lines: list[str], *args: str) -> list[str]:
    """The real CLI's output lines for `lines`."""
    return run_translate(ckpt, lines, *args).stdout.decode("utf-8").split("\n")[:-1]


def metric(url: str, name: str) -> float:
    """A server's metric `name` (a gauge or an unlabelled counter) as /metrics shows it now."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", httpx.get(url + "/metrics", timeout=10).text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def wait_until(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    """Poll `check` until it holds; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.05)


def request_on_its_way(url: str, body_bytes: int) -> socket.socket:
    """A connection holding a POST /v1/translate whose head is sent and whose body (`body_bytes`
    long) is not: the server counts it open (it is on its way) until the body comes or --timeout."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % body_bytes)
    return sock


def refusing(url: str) -> bool:
    """True once nothing listens at the server's address any more (a new connection is refused)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def read_until_closed(sock: socket.socket, seconds: float = 30) -> bytes:
    """Everything the server sends on `sock` until it closes the connection (within `seconds`)."""
    sock.settimeout(seconds)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
    # Seed 1: its greedy outputs vary with the input (seed 0's are one repeated piece, told apart by
    # length alone), so 1000 seeded lines have enough different outputs for 64 clients x 3 segments.
    return (write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt", seed=1),
            synthetic_sentences(1000, 11))


@pytest.fixture(scope="module")
def main_server(tiny) -> Iterator[str]:
    with server(tiny[0], "--beam", "4", "--max-alternatives", "3", "--char-limit", "20000",
                "--cors-origin", "https://app.example") as (url, _):
        yield url


def test_v1_and_concurrent_clients_match_mt_translate(tiny, main_server: str) -> None:
    ckpt, lines = tiny
    # 64 clients of 3 segments each, all 192 expected outputs different, so no answer given to the
    # wrong client or segment can pass: the first lines of the pool with an output not seen before.
    first_with: dict[str, str] = {}
    for line, out in zip(lines, mt_translate(ckpt, lines, "--beam", "1")):
        first_with.setdefault(out, line)
    expected, sources = list(first_with)[:192], list(first_with.values())[:192]
    assert len(set(expected)) == len(expected) == 192, "too few different outputs in the pool"
    clients = [sources[i:i + 3] for i in range(0, 192, 3)]

    async def one(client: httpx.AsyncClient, segments: list[str]) -> list[str]:
        r = await client.post(main_server + "/v1/translate", json={"segments": segments, "beam": 1})
        assert r.status_code == 200, r.text
        return [t["text"] for t in r.json()["translations"]]

    async def all_clients() -> list[list[str]]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.wait_for(asyncio.gather(*(one(client, segments) for segments in clients)), 120)

    assert asyncio.run(all_clients()) == [expected[i:i + 3] for i in range(0, 192, 3)]  # each client its own

    # Unsegmented, the last line is longer than the model's limit: cut as `mt translate --no-segment`
    # cuts it, with its warning (segmented, tests/test_paragraphs.py breaks such a sentence instead).
    # Lines ending in a mark of their own ('?', '!', ':', '…') are left out: the server's text rules end
    # their translation with it (tests/test_ui_strings.py), the plain search of --no-segment does not.
    bare = [line for line in lines if line.rstrip()[-1:] not in "?!:…"]
    segments = [*bare[:10], " ".join(bare[100:140])]  # ~1300 characters: over 255 pieces
    r = httpx.post(main_server + "/v1/translate", json={"segments": segments, "beam": 4, "segment": False},
                   timeout=60).json()
    run = run_translate(ckpt, segments, "--beam", "4", "--no-segment")
    # --no-segment is the plain search; the server also searches a looping sentence again with no
    # piece twice (the loop retry) and keeps what repeats less
    plain = run.stdout.decode("utf-8").split("\n")[:-1]
    strict = mt_translate(ckpt, segments, "--beam", "4", "--no-segment", "--no-repeat-ngram", "1")
    want = [t if retry_wins(s, p, t) else p for s, p, t in zip(segments, plain, strict)]
    assert [t["text"] for t in r["translations"]] == want and want != plain  # the random model loops
    assert re.fullmatch(r"[0-9a-f]{64}", r["model"]["id"]) and r["model"]["update"] == 0
    assert len(r["warnings"]) == 1 and r["warnings"][0].startswith("1 of 11 source lines longer than 255 pieces")
    assert f"mt: warning: {r['warnings'][0]}" in run.stderr.decode("utf-8").splitlines()

    r = httpx.post(main_server + "/v1/translate", json={"segments": lines[:5], "beam": 4, "n_best": 3}, timeout=60)
    assert r.json()["warnings"] == []  # none cut, no warning
    got = [f"{i} ||| {h['text']} ||| {h['score']:.4f}" for i, t in enumerate(r.json()["translations"])
           for h in t["n_best"]]
    assert got == mt_translate(ckpt, lines[:5], "--beam", "4", "--n-best", "3")

    # Every output's confidence (mt.decode.confidence): what `mt translate --scores` writes, cached or not.
    scored = mt_translate(ckpt, lines[:5], "--beam", "4", "--scores")
    for _ in ("decoded", "from the cache"):
        r = httpx.post(main_server + "/v1/translate", json={"segments": lines[:5], "beam": 4}, timeout=60).json()
        assert [f"{t['confidence']:.3f}\t{t['text']}" for t in r["translations"]] == scored

    r = httpx.post(main_server + "/v1/translate", json={"segments": lines[:6], "sampling": True, "seed": 9},
                   timeout=60)
    assert [t["text"] for t in r.json()["translations"]] == mt_translate(ckpt, lines[:6], "--sampling", "--seed", "9")

    # A segment's own lines are kept; empty lines stay empty.
    r = httpx.post(main_server + "/v1/translate", json={"segments": [f"{sources[0]}\n\n{sources[1]}"], "beam": 1},
                   timeout=60)
    assert r.json()["translations"][0]["text"] == f"{expected[0]}\n\n{expected[1]}"


def test_cors_allows_its_origins_only(main_server: str) -> None:
    """main_server runs with --cors-origin https://app.example: a browser's preflight from there is
    allowed (POST, the X-API-Key header), one from elsewhere refused, and only answers to the
    allowed origin carry Access-Control-Allow-Origin (a browser withholds the others from the page)."""
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, x-api-key"}
    r = httpx.options(main_server + "/v1/translate", headers={"Origin": "https://app.example", **preflight})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "x-api-key" in r.headers["access-control-allow-headers"].lower()
    r = httpx.options(main_server + "/v1/translate", headers={"Origin": "https://elsewhere.example", **preflight})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    for origin, allowed in (("https://app.example", True), ("https://elsewhere.example", False)):
        r = httpx.post(main_server + "/v1/translate", json={"segments": ["a b"]}, headers={"Origin": origin},
                       timeout=60)
        assert r.status_code == 200 and r.headers.get("access-control-allow-origin") == (origin if allowed else None)


def _multipart(fields: list[tuple[str, str]]) -> bytes:
    """A multipart/form-data body of text fields, boundary "mt-boundary"."""
    parts = [f'--mt-boundary\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
             for name, value in fields]
    return ("".join(parts) + "--mt-boundary--\r\n").encode()


def test_libretranslate_client_and_routes(tiny, main_server: str) -> None:
    from libretranslatepy import LibreTranslateAPI

    ckpt, lines = tiny
    expected = mt_translate(ckpt, lines[:3], "--beam", "4")
    lt = LibreTranslateAPI(main_server)
    assert lt.translate(lines[0], "en", "de") == expected[0]
    assert lt.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                              {"code": "de", "name": "German", "targets": []}]

    r = httpx.post(main_server + "/translate", json={"q": lines[:3], "source": "en", "target": "de",
                                                     "alternatives": 2}, timeout=60).json()
    assert r["translatedText"] == expected
    assert len(r["alternatives"]) == 3 and all(len(a) == 2 for a in r["alternatives"])
    r = httpx.post(main_server + "/translate", data={"q": f"{lines[0]}\n\n{lines[1]}", "source": "en",
                                                     "target": "de"}, timeout=60).json()
    assert r["translatedText"] == f"{expected[0]}\n\n{expected[1]}"
    # multipart form data (a browser's FormData): a repeated q is a list, as in urlencoded forms
    fields = [("q", lines[0]), ("q", lines[1]), ("source", "en"), ("target", "de")]
    r = httpx.post(main_server + "/translate", content=_multipart(fields),
                   headers={"content-type": "multipart/form-data; boundary=mt-boundary"}, timeout=60)
    confidence = r.json()["confidence"]  # mt's one extra key: each text's confidence in [0, 1]
    assert r.json() == {"translatedText": expected[:2], "confidence": confidence}
    assert len(confidence) == 2 and all(0.0 <= c <= 1.0 for c in confidence)
    r = httpx.post(main_server + "/translate", data={"source": "en", "target": "de"},
                   files={"q": ("q.txt", lines[0].encode())}, timeout=60)
    assert r.status_code == 400 and r.json() == {"error": "q: expected a text field, got a file upload"}
    s = httpx.get(main_server + "/v1/settings").json()
    assert s == {"char_limit": 20000, "max_segments": 256, "max_beam": 4, "max_alternatives": 3,
                 "keys_required": False, "sampling": True, "languages": [{"source": "en", "target": "de"}],
                 "glossary": True, "max_glossary_terms": 1000, "low_confidence": 0.3}
    assert httpx.get(main_server + "/health").json() == {"status": "ok"}
    assert httpx.get(main_server + "/docs").status_code == 200
    assert "/v1/translate" in httpx.get(main_server + "/openapi.json").json()["paths"]


@pytest.mark.parametrize("route, body, status, message", [
    ("/translate", {"source": "en", "target": "de"}, 400, "q: missing"),
    ("/translate", {"q": "", "source": "en", "target": "de"}, 400, "q: empty"),
    ("/translate", {"q": 5, "source": "en", "target": "de"}, 400, "q: expected a string"),
    ("/translate", {"q": ["a", 3], "source": "en", "target": "de"}, 400, "q[1]: expected a string"),
    ("/translate", {"q": "a", "target": "de"}, 400, "source: missing"),
    ("/translate", {"q": "a", "source": "en", "target": "de", "format": "xml"}, 400, "format 'xml': not supported"),
    ("/translate", {"q": "a", "source": "fr", "target": "de"}, 400, "language pair fr-de: not served"),
    ("/translate", {"q": "a", "source": "en", "target": "de", "alternatives": 4}, 400, "alternatives: at most 3"),
    ("/translate", {"q": "a", "source": "en", "target": "de", "alternatives": "x"}, 400, "expected an integer"),
    ("/translate", {"q": "a\ud800", "source": "en", "target": "de"}, 400, "invalid UTF-8"),
    ("/v1/translate", {"segments": "a"}, 400, "segments: expected a non-empty list of strings"),
    ("/v1/translate", {"beam": 2}, 400, "segments: missing"),
    ("/v1/translate", {"segments": ["a"], "n_bets": 2, "temp": 1}, 400,
     "n_bets, temp: unknown fields for /v1/translate; it takes alpha, api_key, beam, glossary, n_best,"),
    ("/v1/translate", {"segments": []}, 400, "non-empty list"),
    ("/v1/translate", {"segments": ["a"], "beam": 5}, 400, "beam: at most 4"),
    ("/v1/translate", {"segments": ["a"], "n_best": 5}, 400, "n_best: at most 4"),
    ("/v1/translate", {"segments": ["a"], "beam": 0}, 400, "beam: must be at least 1"),
    ("/v1/translate", {"segments": ["a"], "seed": 3}, 400, "seed: only applies to sampling"),
    ("/v1/translate", {"segments": ["a"], "sampling": True, "beam": 2}, 400, "beam: sampling"),
    ("/v1/translate", {"segments": ["a"], "temperature": -1.0, "sampling": True}, 400, "temperature"),
    ("/v1/translate", {"segments": ["x" * 20001]}, 400, "Invalid request: request (20001) exceeds text limit (20000)"),
    ("/translate", {"q": ["x" * 10000] * 3, "source": "en", "target": "de", "format": "html"}, 400,
     "Invalid request: request (30000) exceeds text limit (20000)"),
    ("/v1/translate", {"segments": ["a"] * 257}, 413, "257 segments"),
])
def test_bad_requests(main_server: str, route: str, body: dict, status: int, message: str) -> None:
    r = httpx.post(main_server + route, content=json.dumps(body).encode(), timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]


def test_bad_bytes_and_bodies(tiny, main_server: str) -> None:
    post = lambda content, kind="application/json": httpx.post(  # noqa: E731
        main_server + "/translate", content=content, headers={"content-type": kind}, timeout=30)
    r = post(b'{"q": "caf\xe9", "source": "en", "target": "de"}')
    assert r.status_code == 400 and r.json() == {"error": "body: invalid UTF-8 (invalid continuation byte at byte 10)"}
    r = post(b"q=caf%E9&source=en&target=de", "application/x-www-form-urlencoded")
    assert r.status_code == 400 and "invalid UTF-8" in r.json()["error"]
    assert post(b"{not json").json()["error"].startswith("body: invalid JSON")
    r = post(b"[" * 100_000 + b"]" * 100_000)  # within the size limit, deeper than json's recursion
    assert r.status_code == 400 and r.json() == {"error": "body: invalid JSON (nested too deeply)"}
    r = post(b'{"q": "' + b"a" * (1 << 21) + b'"}')
    assert r.status_code == 413 and "body" in r.json()["error"]
    # NUL passes through to the tokenizer as in `mt translate` (which gives the same output).
    r = post(json.dumps({"q": "a\u0000b c", "source": "en", "target": "de"}).encode())
    assert r.status_code == 200 and r.json()["translatedText"] == mt_translate(tiny[0], ["a\u0000b c"], "--beam", "4")[0]
    r = httpx.get(main_server + "/nowhere")
    assert r.status_code == 404 and "error" in r.json()
    assert httpx.get(main_server + "/translate").status_code == 405


def test_metrics_move(main_server: str) -> None:
    def value(text: str, name: str) -> float:
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    before = httpx.get(main_server + "/metrics").text
    # not asked before: the cache misses, the model translates (in letters: a number is a protected
    # span, taken out of what the model reads and caches)
    fresh = lambda: "".join(chr(ord("a") + int(d)) for d in str(time.monotonic_ns()))  # noqa: E731
    segments = [f"a b {fresh()}", f"c d {fresh()}"]
    httpx.post(main_server + "/v1/translate", json={"segments": segments}, timeout=60)
    after = httpx.get(main_server + "/metrics").text
    ok = 'mt_requests_total{route="/v1/translate",status="200"}'
    assert value(after, ok) == value(before, ok) + 1
    # two segments, each searched again at most once if its output loops (the loop retry)
    assert 2 <= value(after, "mt_segments_translated_total") - value(before, "mt_segments_translated_total") <= 4
    assert value(after, "mt_batch_segments_count") > value(before, "mt_batch_segments_count")
    # every search of the path goes through the cache: each segment missed once, and its retry once more
    misses = value(after, "mt_cache_misses_total") - value(before, "mt_cache_misses_total")
    assert misses == value(after, "mt_segments_translated_total") - value(before, "mt_segments_translated_total")
    assert value(after, "mt_queue_depth") == 0 and value(after, "mt_model_load_seconds") > 0
    assert "mt_request_seconds_bucket" in after and "mt_batch_tokens_bucket" in after


def test_queue_limits_timeout_and_disconnect(tiny, tmp_path: Path) -> None:
    """An idle worker that waits 20 s to fill a batch keeps segments queued: 429 when the queue is
    full, 503 after --timeout, and a client that hangs up leaves the queue empty. A body that never
    comes gets 408 and a head that never ends a closed connection, both after --timeout. The worker waits
    because another translate request is open (its headers sent, its body not yet): a lone
    request would start at once."""
    ckpt, lines = tiny
    log = tmp_path / "serve.log"
    with server(ckpt, "--max-wait-ms", "20000", "--max-batch-tokens", "100000", "--queue-size", "4",
                "--timeout", "4", log=log) as (url, _):
        def depth() -> float:
            return metric(url, "mt_queue_depth")

        port = int(url.rsplit(":", 1)[1])
        trickling = socket.create_connection(("127.0.0.1", port))  # a request head that never ends (slowloris)
        trickling.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\n")
        on_its_way = request_on_its_way(url, 100)
        wait_until(lambda: metric(url, "mt_translate_requests_open") == 1, "the open request counted", 3)
        body = json.dumps({"segments": lines[:3]}).encode()
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 3
        while depth() != 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert depth() == 3
        r = httpx.post(url + "/v1/translate", json={"segments": lines[3:5]}, timeout=30)
        assert r.status_code == 429 and r.headers["retry-after"] == "1" and "queue full" in r.json()["error"]
        sock.close()  # hang up mid-request: its 3 queued segments must go
        deadline = time.monotonic() + 3
        while depth() != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert depth() == 0
        started = time.monotonic()
        r = httpx.post(url + "/v1/translate", json={"segments": lines[:1]}, timeout=30)
        assert r.status_code == 503 and "--timeout" in r.json()["error"] and time.monotonic() - started >= 3.9
        assert depth() == 0
        on_its_way.settimeout(10)  # its body never came: 408 once --timeout has passed since it began
        answer = on_its_way.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 408 ") and '{"error":"body: not received within 4 s (--timeout)"}' in answer
        on_its_way.close()
        trickling.settimeout(10)  # closed by the server once --timeout passed without a whole head
        assert trickling.recv(65536) == b""
        trickling.close()
        cut = socket.create_connection(("127.0.0.1", port))  # a body cut short: the client goes away
        cut.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"X-Request-ID: cut-body\r\nContent-Length: 1000\r\n\r\n{\"q\": \"a")
        time.sleep(0.2)
        cut.close()
        wait_until(lambda: '"id": "cut-body"' in log.read_text(errors="replace"), "the cut body's access line", 5)
    text = log.read_text(errors="replace")
    cut_lines = [json.loads(line[line.index("{"):]) for line in text.splitlines() if '"id": "cut-body"' in line]
    assert [(entry["route"], entry["status"]) for entry in cut_lines] == [("/translate", 499)]
    assert "Traceback" not in text and "ClientDisconnect" not in text


def test_keys_request_ids_and_sigterm_drains(tiny, tmp_path: Path) -> None:
    """API keys; X-Request-ID echoed and logged; SIGTERM while a request is provably in flight
    (queued in the batcher): the server stops listening (a request arriving now is refused), still
    answers that request 200 and then exits 0.

    The request is held in the batcher by the batcher's own rule, not by a timer: another translate
    request is on its way (its head sent, its body not yet), so the round waits for it (up to
    --max-wait-ms, here 60 s). Its body, sent after the signal, starts the round for both."""
    ckpt, lines = tiny
    keys = tmp_path / "keys.txt"
    keys.write_text("# clients\nk-alpha\nk-beta  # second\n", encoding="utf-8")
    log = tmp_path / "serve.log"
    with server(ckpt, "--api-keys", str(keys), "--max-wait-ms", "60000", log=log) as (url, proc):
        body = {"q": lines[0], "source": "en", "target": "de"}
        assert httpx.post(url + "/translate", json=body).status_code == 403
        r = httpx.post(url + "/translate", json={**body, "api_key": "k-gamma"})
        assert r.status_code == 403 and r.json() == {"error": "api_key: not valid"}
        assert httpx.post(url + "/v1/translate", json={"segments": ["a"]}).status_code == 403
        assert httpx.post(url + "/translate", data={**body, "api_key": "k-beta"}, timeout=30).status_code == 200
        assert httpx.post(url + "/v1/translate", json={"segments": ["a"]}, headers={"X-API-Key": "k-alpha"},
                          timeout=30).status_code == 200
        assert httpx.get(url + "/v1/settings").json()["keys_required"] is True
        for free in ("/health", "/ready", "/metrics", "/languages"):
            assert httpx.get(url + free).status_code == 200

        # X-Request-ID: a client's short token is echoed (and logged, below); anything else gets a new id.
        r = httpx.post(url + "/v1/translate", json={"segments": ["a"]}, timeout=30,
                       headers={"X-API-Key": "k-alpha", "X-Request-ID": "client-7.a_b"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "client-7.a_b"
        made = httpx.get(url + "/health", headers={"X-Request-ID": "not a token " + "x" * 80}).headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{16}", made)

        held_body = json.dumps({"segments": [lines[2]], "api_key": "k-alpha"}).encode()
        on_its_way = request_on_its_way(url, len(held_body))
        wait_until(lambda: metric(url, "mt_translate_requests_open") == 1, "the request on its way counted")
        got: dict[str, httpx.Response] = {}
        t = threading.Thread(target=lambda: got.setdefault("r", httpx.post(
            url + "/v1/translate", json={"segments": lines[3:5], "api_key": "k-alpha"}, timeout=30)))  # uncached
        t.start()
        wait_until(lambda: metric(url, "mt_queue_depth") == 2 and metric(url, "mt_translate_requests_open") == 2,
                   "the request's 2 segments queued")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: refusing(url), "the server stops listening after SIGTERM")
        with pytest.raises(httpx.ConnectError):  # a request arriving after the signal
            httpx.post(url + "/v1/translate", json={"segments": ["a"], "api_key": "k-alpha"}, timeout=10)
        assert proc.poll() is None and t.is_alive() and not got  # still in flight
        on_its_way.sendall(held_body)
        t.join(30)
        assert got["r"].status_code == 200 and len(got["r"].json()["translations"]) == 2
        assert read_until_closed(on_its_way).startswith(b"HTTP/1.1 200 ")
        on_its_way.close()
        assert proc.wait(timeout=30) == 0
    text = log.read_text(encoding="utf-8")
    assert "k-alpha" not in text and "k-beta" not in text and "k-gamma" not in text
    access = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {"id", "method", "route", "status", "ms"} <= set(access[0])
    assert any(a["status"] == 403 for a in access)
    logged = {a["id"]: (a["route"], a["status"]) for a in access}
    assert logged["client-7.a_b"] == ("/v1/translate", 200) and logged[made] == ("/health", 200)


def test_a_second_signal_exits_at_once(tiny, tmp_path: Path) -> None:
    """After SIGTERM the server waits for its requests in flight (here one whose body never comes:
    up to --timeout, 30 s); a second signal, any, exits at once with 128 + its number."""
    log = tmp_path / "serve.log"
    with server(tiny[0], log=log) as (url, proc):
        stuck = request_on_its_way(url, 100)
        wait_until(lambda: metric(url, "mt_translate_requests_open") == 1, "the request on its way counted")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: refusing(url), "the server stops listening after SIGTERM")
        assert proc.poll() is None  # draining: the request in flight holds the stop
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 128 + signal.SIGINT
        stuck.close()
    assert "mt: serve: second SIGINT: exiting at once" in log.read_text(encoding="utf-8")


def test_cli_errors_are_one_line(tiny, tmp_path: Path) -> None:
    ckpt = str(tiny[0])
    no_extra = ("import sys; sys.modules['uvicorn'] = None; from mt.cli import main; "
                f"sys.argv = ['mt', 'serve', '-c', {ckpt!r}]; main()")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # a port another program holds: refused before the model loads
    serve = [sys.executable, "-m", "mt", "serve", "-c"]
    with taken:
        for argv, message in (([sys.executable, "-c", no_extra], "needs the serve extra"),
                              ([*serve, ckpt, "--char-limit", "0"], "--char-limit"),
                              ([*serve, ckpt, "--api-keys", str(tmp_path / "none.txt")], "none.txt"),
                              ([*serve, str(tmp_path / "missing.pt")], "missing.pt: not found"),
                              ([*serve, ckpt, "--port", str(taken.getsockname()[1])], "cannot listen there"),
                              ([*serve, ckpt, "--host", "192.0.2.1"], "cannot listen there")):  # TEST-NET-1
            run = subprocess.run(argv, env=ENV, capture_output=True, timeout=60)
            lines = run.stderr.decode().strip().splitlines()
            assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("mt: "), run.stderr
            assert message in lines[0], lines[0]
    assert 'pip install -e ".[serve]"' in subprocess.run([sys.executable, "-c", no_extra], env=ENV,
                                                          capture_output=True, timeout=60).stderr.decode()


def test_bound_socket_gives_connections_tcp_nodelay() -> None:
    """`mt serve` binds its own socket (mt.serve.server.bind); asyncio switches Nagle off only on
    sockets created with proto IPPROTO_TCP. Without it each small response waited ~40 ms for a
    delayed ACK (greedy p50 at one client 31 -> 76 ms, measured)."""
    from mt.serve.server import bind

    sock = bind("127.0.0.1", free_port())
    seen: list[int] = []

    async def check() -> None:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            for _ in range(200):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(check())
    assert len(seen) == 1 and seen[0] != 0


def _model_worker_pid(server_pid: int) -> int:
    """The pid of `mt serve`'s model worker: its child started by multiprocessing's spawn (from
    whichever of its threads started it)."""
    children = [pid for task in Path(f"/proc/{server_pid}/task").iterdir()
                for pid in (task / "children").read_text().split()]
    for pid in children:
        with contextlib.suppress(FileNotFoundError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return int(pid)
    raise AssertionError(f"no model worker among the children {children} of mt serve")


def test_health_is_503_while_the_model_worker_is_dead_and_it_is_restarted(tiny) -> None:
    """Liveness tells the truth: a worker killed with SIGKILL makes /health 503 naming it; a new
    worker is started without waiting for a request (/health 200 again, the restart counted), and
    answers as before."""
    ckpt, lines = tiny
    # no cache, so the repeated request needs the model; no loop retry, so one batch per request
    with server(ckpt, "--threads", "1", "--cache-size", "0", "--no-loop-retry") as (url, proc):
        body = {"segments": lines[:2], "beam": 1}
        before = httpx.post(url + "/v1/translate", json=body, timeout=60).json()["translations"]
        # The answer can come before the worker has reported its batch done (a request is answered as
        # its sentences end): killed in between, that batch would fail. Kill an idle worker.
        wait_until(lambda: metric(url, "mt_batch_seconds_count") == 2, "the warm-up's and the request's batches done")
        worker = _model_worker_pid(proc.pid)
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (health := httpx.get(url + "/health", timeout=5)).status_code == 200:
            assert time.monotonic() < deadline, "/health still 200 10 s after the worker was killed"
            time.sleep(0.02)
        assert health.status_code == 503 and "model worker process exited (code -9)" in health.json()["error"]
        wait_until(lambda: httpx.get(url + "/health", timeout=5).status_code == 200, "/health 200 again", 60)
        assert metric(url, "mt_worker_restarts_total") == 1
        after = httpx.post(url + "/v1/translate", json=body, timeout=60)
        assert after.status_code == 200 and after.json()["translations"] == before
        new_worker = _model_worker_pid(proc.pid)
        assert new_worker != worker
        # The metrics an operator watches: the restart counted, the new worker's memory, which model runs.
        assert metric(url, "mt_worker_restarts_total") == 1 and metric(url, "mt_batch_failures_total") == 0
        rss = int(Path(f"/proc/{new_worker}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        assert 0.5 * rss < metric(url, "mt_worker_memory_bytes") < 2 * rss
        ready = httpx.get(url + "/ready", timeout=5).json()["model"]
        info = f'mt_model_info{{id="{ready["id"]}",pairs="en-de",update="{ready["update"]}"}} 1.0'
        assert info in httpx.get(url + "/metrics", timeout=10).text.splitlines()


def test_model_card_names_files_not_the_servers_paths(tiny, main_server: str) -> None:
    """/v1/model-card is public: it names the checkpoint and the training data by file name only."""
    ckpt, _ = tiny
    card = httpx.get(main_server + "/v1/model-card", timeout=30).json()
    assert card["checkpoint"] == ckpt.name == "tiny.pt"
    assert "/" not in json.dumps({k: card[k] for k in ("checkpoint", "training_data", "ensemble")})
    assert str(ckpt.parent) not in json.dumps(card)


def test_docs_and_redoc_load_nothing_from_another_host(main_server: str) -> None:
    """/docs and /redoc work on an air-gapped host: every script, stylesheet and icon they name is
    served by mt serve itself (and is there), none from a CDN."""
    import re

    for page_path, kinds in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")), ("/redoc", ("redoc.standalone.js",))):
        page_html = httpx.get(main_server + page_path, timeout=30)
        assert page_html.status_code == 200
        urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""", page_html.text)
        named = [a or b for a, b in urls]
        assert named and all(u.startswith("/") and not u.startswith("//") for u in named), named
        assert "http://" not in page_html.text and "https://" not in page_html.text
        for kind in kinds:
            assert any(u.endswith(kind) for u in named), (kind, named)
        for url in named:
            asset = httpx.get(main_server + url, timeout=30)
            assert asset.status_code == 200 and len(asset.content) > 0, url


PROTECTED = ["Click {0} to see {1} people on the beach.", "Hello %s, write to support@example.com today.",
             "Visit https://example.org/dogs to see 3 dogs.", "TWO DOGS ARE PLAYING IN THE SNOW.", "the cat sat on the mat"]


def test_every_route_keeps_protected_spans(tiny, main_server: str) -> None:
    """/translate (text and html) and /v1/translate keep every placeholder, URL and number verbatim,
    exactly once (mt.text.protect), answering what `mt translate` writes for the same lines."""
    from mt.text.protect import KINDS, find_spans

    def spans(line: str) -> list[str]:
        return [line[a:b] for a, b, _ in find_spans(line, KINDS)]

    expected = mt_translate(tiny[0], PROTECTED, "--beam", "4")
    assert all(out.count(span) == 1 for line, out in zip(PROTECTED, expected) for span in spans(line)), expected
    lt = httpx.post(main_server + "/translate", json={"q": PROTECTED, "source": "en", "target": "de"}, timeout=60)
    assert lt.status_code == 200 and lt.json()["translatedText"] == expected
    v1 = httpx.post(main_server + "/v1/translate", json={"segments": PROTECTED}, timeout=60)
    assert v1.status_code == 200 and [row["text"] for row in v1.json()["translations"]] == expected
    html = httpx.post(main_server + "/translate", timeout=60, json={
        "q": f"<p>{PROTECTED[1]} <b>{PROTECTED[2]}</b></p>", "source": "en", "target": "de", "format": "html"})
    assert html.status_code == 200, html.text
    out = html.json()["translatedText"]
    assert all(out.count(span) == 1 for span in spans(PROTECTED[1]) + spans(PROTECTED[2])), out
