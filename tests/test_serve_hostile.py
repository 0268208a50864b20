"""Hostile clients against a real `mt serve` on 127.0.0.1, bounded in count and time (one test,
~60 s): deep and wide HTML, huge `q` lists and forms, floods of tiny requests from many loopback
addresses (and X-Forwarded-For headers the server must not trust), slow heads and bodies,
disconnects mid-body and mid-answer, SIGHUPs during start-up and under load, and a worker killed
while a reload loads. Throughout, a probe in a process of its own asks /health and a one-sentence
/translate (a new sentence each time: the model's path, not the cache) every 100 ms: no probe may
fail, and their p99 must stay within 20 times the median /translate of the same server before the
attack (1 s at least: a bound that scales with the machine, not a deadline); afterwards the
server's memory (its process and its model workers) must be back within 10% of where it was before
the attack, nothing may be left queued or open, the log must hold no traceback, and exactly one
model worker may be running.

Run as a script, this file is the probe: `python tests/test_serve_hostile.py probe URL OUT SECONDS`.
"""

from __future__ import annotations

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_serve import wait_ready

try:
    import httpx
except ImportError:  # the requires marker fails the test (skips it offline)
    httpx = None

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn")

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
CHAR_LIMIT, MAX_SEGMENTS, TIMEOUT_S, PER_MINUTE, PER_DAY = 10_000, 256, 4, 600, 40_000
PROBE_EVERY_S = 0.1


def probe(url: str, out: str, seconds: float) -> None:
    """The probe client: GET /health and POST /translate (a new one-sentence text each time), one
    every PROBE_EVERY_S, for `seconds` at most or until OUT.stop exists; writes
    [[what, status or error, seconds], ...] to `out`."""
    import httpx

    found, i, deadline, stop = [], 0, time.monotonic() + seconds, Path(out + ".stop")
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < deadline and not stop.exists():
            started = time.perf_counter()
            try:
                if i % 2:
                    r = client.post(url + "/translate", json={"q": f"probe sentence number {i} .", "source": "en",
                                                             "target": "de"})
                else:
                    r = client.get(url + "/health")
                status: int | str = r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as e:
                status = type(e).__name__
            found.append(["translate" if i % 2 else "health", status, time.perf_counter() - started])
            i += 1
            time.sleep(max(0.0, PROBE_EVERY_S - (time.perf_counter() - started)))
    Path(out).write_text(json.dumps(found))


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _workers(pid: int) -> list[int]:
    """The server's model worker processes (multiprocessing's spawn children, not its resource tracker)."""
    out = []
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
    return out


def _rss(pid: int) -> int:
    """Resident bytes of the server and its model workers."""
    total = 0
    for p in [pid, *_workers(pid)]:
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _wait(check: Callable[[], bool], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def _server(ckpt: Path, log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`mt serve` on a free port, SIGHUPed three times while it starts (each must be refused as
    busy or load nothing twice); ready; always stopped afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mt", "serve", "-c", str(ckpt), "--port", str(port),
                                 "--threads", "1", "--char-limit", str(CHAR_LIMIT), "--max-segments", str(MAX_SEGMENTS),
                                 "--timeout", str(TIMEOUT_S), "--address-requests-per-minute", str(PER_MINUTE),
                                 "--address-characters-per-day", str(PER_DAY),
                                 "--max-connections", "400"], env=ENV, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            for delay in (1.2, 1.0, 1.5):  # the imports, the app, the model loading: every phase of start-up
                time.sleep(delay)
                assert proc.poll() is None, f"mt serve exited during start-up with {proc.returncode}"
                proc.send_signal(signal.SIGHUP)
            wait_ready(url, proc)
            yield url, proc
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def _raw(url: str, data: bytes, *, source: str = "127.0.0.1", close_after: bool = True) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0))
    sock.sendall(data)
    if close_after:
        sock.close()
    return sock


def _post(path: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _status(sock: socket.socket) -> int:
    """The status of the answer on `sock` (0 when the server closed it without one)."""
    head = b""
    with contextlib.suppress(OSError):
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    sock.close()
    found = re.match(rb"HTTP/1.1 (\d+)", head)
    return int(found.group(1)) if found else 0


def _client(address: str) -> httpx.Client:
    """An HTTP client whose connections come from `address` (any of 127.0.0.0/8): a client of its own."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def _attack_html(url: str) -> dict[str, list[int]]:
    lt, addresses = url + "/translate", iter(range(1, 255))

    def html(q: str | list[str]) -> int:  # each from an address of its own: 5 x 9,000 characters pass a day's 40,000
        with _client(f"127.0.2.{next(addresses)}") as client:
            return client.post(lt, json={"q": q, "source": "en", "target": "de", "format": "html"}).status_code

    return {"deep over the limit": [html("<b>" * 32_000 + "x") for _ in range(5)],  # the 53-second request
            "deep within the limit": [html("<b>" * 3_000 + "x") for _ in range(5)],  # 9,000 chars, 3,000 deep
            "deep at the bound": [html("<i>" * 500 + "a house") for _ in range(3)],
            "wide": [html("<p>a</p>" * 1_200) for _ in range(3)],  # 1,200 blocks > --max-segments
            "many in one block": [html("<b>x</b> " * 1_100) for _ in range(2)]}


def _attack_sizes(url: str) -> dict[str, list[int]]:
    lt = url + "/translate"
    huge_list = json.dumps({"q": [""] * 300_000, "source": "en", "target": "de"}).encode()  # 1.2 MB: over the body limit
    big_list = json.dumps({"q": ["a"] * 100_000, "source": "auto", "target": "de"}).encode()  # 0.5 MB: 100,000 texts
    form = ("source=en&target=de&" + "q=a&" * 200_000).encode()  # 0.8 MB of one repeated field
    huge_int = b'{"q": "a", "source": "en", "target": "de", "alternatives": 1' + b"0" * 20_000 + b"}"
    deep_json = b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    client = _client("127.0.3.1")
    post = lambda body, kind="application/json": client.post(lt, content=body,  # noqa: E731
                                                             headers={"Content-Type": kind}).status_code
    with client:
        return {"q list over the body limit": [post(huge_list) for _ in range(2)],
                "q list of 100,000 texts": [post(big_list) for _ in range(2)],
                "form of 200,000 fields": [post(form, "application/x-www-form-urlencoded") for _ in range(2)],
                "20,000-digit number": [post(huge_int) for _ in range(2)], "JSON 100,000 deep": [post(deep_json)],
                "detect over the limit": [client.post(url + "/detect", json={"q": "a " * 20_000}).status_code]}


def _attack_floods(url: str) -> dict[str, list[int]]:
    """Small requests: from 200 loopback addresses (one bucket each), and 300 of 200 characters
    from one address that claims 300 others in X-Forwarded-For (one bucket, as the server trusts no
    proxy: its day's 40,000 characters are gone after 200)."""
    def one(address: str, text: str = "a", forwarded: str | None = None) -> int:
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        with _client(address) as client:
            r = client.post(url + "/translate", json={"q": text, "source": "en", "target": "de"}, headers=headers)
        if r.status_code == 429 and "queue full" in r.text:
            return 503  # the model's queue on a loaded machine, not the limiter: let through, then dropped
        return r.status_code

    with ThreadPoolExecutor(4) as pool:
        many = list(pool.map(one, [f"127.0.1.{i % 200 + 1}" for i in range(200)]))
        spoofed = list(pool.map(lambda i: one("127.0.0.9", "b " * 100, f"10.{i // 256}.{i % 256}.7"), range(300)))
    return {"many addresses": many, "X-Forwarded-For spoofed": spoofed}


def _attack_connections(url: str) -> dict[str, list[int]]:
    """Slow heads and bodies, disconnects mid-body and mid-answer: each bounded by --timeout."""
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    slow_bodies = [_raw(url, head + b'{"q": "', close_after=False) for _ in range(40)]
    slow_heads = [_raw(url, b"POST /translate HTTP/1.1\r\nHost: x\r\n", close_after=False) for _ in range(40)]
    for _ in range(40):  # mid-body: the head promises 100 bytes, 7 come, the client goes
        _raw(url, head + b'{"q": "')
    long_text = json.dumps({"q": [f"sentence {i} of a long request that keeps the model busy ." for i in range(200)],
                            "source": "en", "target": "de"}).encode()
    for _ in range(10):  # mid-answer: a full request, and the client gone before the answer
        _raw(url, _post("/translate", long_text))
    for _ in range(int(TIMEOUT_S) + 1):  # trickle one byte a second: the deadline counts from the start
        time.sleep(1)
        for sock in slow_bodies + slow_heads:
            with contextlib.suppress(OSError):
                sock.sendall(b"a" if sock in slow_bodies else b"X")
    return {"slow bodies": [_status(sock) for sock in slow_bodies],
            "slow heads": [_status(sock) for sock in slow_heads]}


def _reloads(url: str, proc: subprocess.Popen) -> dict[str, float]:
    """Two SIGHUPs under the flood's load, then one whose new worker is killed while it loads."""
    ok = lambda: _metric(url, 'mt_reloads_total{result="ok"}')  # noqa: E731
    failed = lambda: _metric(url, 'mt_reloads_total{result="failed"}')  # noqa: E731
    before = ok()
    proc.send_signal(signal.SIGHUP)
    _wait(lambda: ok() == before + 1, "a SIGHUP reload under load", 40)
    _wait(lambda: len(_workers(proc.pid)) == 1, "the old worker closed after the reload", 40)
    serving = set(_workers(proc.pid))
    proc.send_signal(signal.SIGHUP)
    _wait(lambda: bool(set(_workers(proc.pid)) - serving), "the reload's new worker started", 20)
    os.kill(max(set(_workers(proc.pid)) - serving), signal.SIGKILL)  # while it loads: the reload fails
    _wait(lambda: failed() == 1, "the reload with a killed worker to fail", 40)
    assert set(_workers(proc.pid)) == serving, "the old worker must keep serving, alone"
    return {"reloads ok": ok() - before, "reloads failed": failed()}


def test_hostile_clients_do_not_stall_or_grow_the_server(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from mt.deploy.tiny import write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    log = tmp_path / "serve.log"
    started = time.monotonic()
    with _server(ckpt, log) as (url, proc):
        # A SIGHUP after start-up finished is a real reload: its new worker loads beside the old one
        # for a while; a leaked one (two loads racing) would stay for ever.
        _wait(lambda: len(_workers(proc.pid)) == 1, "one model worker after the SIGHUPs during start-up", 60)
        calm = []  # warm: allocations of the first requests are not the attack's; and this machine's calm speed
        for i in range(30):
            sent = time.perf_counter()
            httpx.post(url + "/translate", json={"q": f"warm {i}", "source": "en", "target": "de"}, timeout=30)
            calm.append(time.perf_counter() - sent)
        calm_median = sorted(calm)[len(calm) // 2]
        rss_before = _rss(proc.pid)
        out = tmp_path / "probe.json"
        prober = subprocess.Popen([sys.executable, __file__, "probe", url, str(out), "90"], env=ENV)
        time.sleep(1)
        outcomes: dict[str, list[int]] = {}
        flood = threading.Thread(target=lambda: outcomes.update(_attack_floods(url)), daemon=True)
        flood.start()  # the reloads under the flood's load
        reloads = _reloads(url, proc)
        flood.join(60)
        attacks = [threading.Thread(target=lambda attack=attack: outcomes.update(attack(url)), daemon=True)
                   for attack in (_attack_html, _attack_sizes, _attack_connections)]
        for attack in attacks:  # then these three at once
            attack.start()
        for attack in attacks:
            attack.join(60)
        Path(str(out) + ".stop").touch()
        assert prober.wait(30) == 0
        _wait(lambda: _metric(url, "mt_translate_requests_open") == 0 and _metric(url, "mt_queue_depth") == 0,
              "every request answered or dropped, nothing queued", 20)
        _wait(lambda: len(_workers(proc.pid)) == 1, "one model worker left", 20)
        time.sleep(1)
        rss_after = _rss(proc.pid)
    probes = json.loads(out.read_text())
    failed = [p for p in probes if p[1] != 200]
    print("failed probes:", failed[:5])
    seconds = sorted(p[2] for p in probes)
    p50, p99 = seconds[len(seconds) // 2], seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))]
    figures = {"probes": len(probes), "failed": len(failed), "p50_ms": round(1000 * p50, 1),
               "p99_ms": round(1000 * p99, 1), "max_ms": round(1000 * seconds[-1], 1),
               "translate_p50_ms": round(1000 * sorted(p[2] for p in probes if p[0] == "translate")[len(probes) // 4], 1),
               "calm_translate_p50_ms": round(1000 * calm_median, 1),
               "rss_before_mb": round(rss_before / 2**20, 1), "rss_after_mb": round(rss_after / 2**20, 1),
               "seconds": round(time.monotonic() - started, 1), **reloads}
    print(f"\nhostile: {json.dumps(figures)}")  # the figures docs/guides/hardening.md reports
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[text.index("Traceback") - 200:][:3000]
    # A stall is measured against this machine's own calm latency, not a wall-clock deadline: the
    # probes' p99 under attack within 20 calm /translate medians (1 s at least), so a slower CPU
    # gets a proportionally wider bound while a request that blocks the server for seconds fails
    # on any (and one of 10 s fails the probe itself).
    assert failed == [] and p99 < max(1.0, 20 * calm_median), figures
    assert abs(rss_after - rss_before) <= 0.10 * rss_before, figures
    assert reloads == {"reloads ok": 1, "reloads failed": 1}, reloads
    assert set(outcomes["deep over the limit"]) == {400} and set(outcomes["deep within the limit"]) == {400}
    assert set(outcomes["deep at the bound"]) == {200} and set(outcomes["wide"]) == {413}
    assert set(outcomes["many in one block"]) == {200}
    assert set(outcomes["q list over the body limit"]) == {413} and set(outcomes["q list of 100,000 texts"]) == {413}
    assert set(outcomes["form of 200,000 fields"]) == {413} and set(outcomes["20,000-digit number"]) == {400}
    assert set(outcomes["JSON 100,000 deep"]) == {400} and set(outcomes["detect over the limit"]) == {400}
    # 2 requests each, far under their own limit: never a 429 (a 503 is --timeout on a loaded machine)
    assert set(outcomes["many addresses"]) <= {200, 503} and 200 in outcomes["many addresses"]
    spoofed = outcomes["X-Forwarded-For spoofed"]
    # One bucket, whatever the header says: the limiter refuses exactly the 100 requests past its
    # 40,000 characters (refilling 0.46 a second, it cannot pass a 201st 200-character request
    # within the flood's 60 s). What it let through is answered, or dropped by --timeout or a full
    # queue while a reload and the other clients load a slow machine (a 503, counted as let through): counting
    # the limiter's decisions, not the machine's speed.
    assert spoofed.count(429) == 100, spoofed
    assert set(spoofed) <= {200, 429, 503}, spoofed
    assert set(outcomes["slow bodies"]) == {408} and set(outcomes["slow heads"]) == {0}  # closed, no answer


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    probe(sys.argv[2], sys.argv[3], float(sys.argv[4]))
