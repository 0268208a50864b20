"""Soak `mt serve`: two models under a mixed load for a long time, every answer checked.

    python scripts/stress/soak_serve.py                 # 30 minutes
    python scripts/stress/soak_serve.py --minutes 5 --out soak.json

Two tiny seeded models (en->de and en->fr, `mt.deploy.tiny`) in one server with API keys
(one unlimited, one of 30 requests a minute), --char-limit 2000 and a cache of 200 segments (the
pool is 2,000 lines: most segments go to the models). Client threads loop over: text
/translate (one line or a list, either model), format html (each block's text checked), /detect,
/v1/translate, requests over the character limit (413 expected), and the limited key (429 once
its minute is spent). Every 200 answer is compared with `mt translate` of the same lines (run once
per model before the load starts); every other status must be the one the request was built to
get. A SIGHUP reloads both models every minute. Sampled every 10 s: the resident memory of the
server and its workers, and of the server alone. At the end: counts by kind and status, wrong answers, unexpected statuses,
tracebacks in the server's log, reloads, latency p50/p99 and memory first/last/max, as JSON on
stdout (and in --out). Exit status 1 when anything was wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
from mt.text.html import HtmlFragment

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
KEYS = "keys:\n  - name: soak\n    key: k-soak\n  - name: limited\n    key: k-limited\n    requests_per_minute: 30\n"
CHAR_LIMIT = 2000


def expected_outputs(ckpt: Path, lines: list[str]) -> dict[str, str]:
    """`mt translate`'s output for each line (the reference every server answer is checked against)."""
    out = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(ckpt)], env=ENV, check=True,
                         input="".join(line + "\n" for line in lines).encode(), capture_output=True, timeout=600)
    return dict(zip(lines, out.stdout.decode("utf-8").split("\n")[:-1]))


def rss(pid: int) -> tuple[float, float]:
    """MB resident: (the server and its children (model workers, resource tracker), the server alone)."""
    pids = [pid] + [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == pid]
    sizes = []
    for p in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            sizes.append(int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20)
    return round(sum(sizes), 1), round(sizes[0] if sizes else 0.0, 1)


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


class Soak:
    """The load, its checks and its counts."""

    def __init__(self, url: str, lines: list[str], expected: dict[str, dict[str, str]], seed: int) -> None:
        self.url, self.lines, self.expected = url, lines, expected
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.latency: list[float] = []
        self.lock = threading.Lock()

    def note(self, kind: str, status: int, seconds: float, problem: str | None = None) -> None:
        with self.lock:
            self.counts[f"{kind} {status}"] += 1
            self.latency.append(seconds)
            if problem is not None and len(self.wrong) < 50:
                self.wrong.append(f"{kind}: {problem}")
            elif problem is not None:
                self.counts["problems not kept"] += 1

    def one(self, client: httpx.Client, rng: random.Random) -> None:
        """One request of a random kind, checked."""
        kind = rng.choice(["text", "list", "html", "detect", "v1", "too long", "limited"])
        target = rng.choice(["de", "fr"])
        picked = rng.sample(self.lines, rng.randint(1, 4))
        key = {"X-API-Key": "k-limited" if kind == "limited" else "k-soak"}
        body: dict[str, object] = {"source": "en", "target": target}
        route, want = "/translate", 200
        if kind in ("text", "limited"):
            body["q"] = picked[0]
        elif kind == "list":
            body["q"] = picked
        elif kind == "html":
            body.update(q=[f"<p><b>{line}</b></p><ul><li>{picked[0]}</li></ul>" for line in picked], format="html")
        elif kind == "detect":
            route, body = "/detect", {"q": picked[0]}
        elif kind == "v1":
            route, body = "/v1/translate", {"segments": picked, "target": target}
        else:
            body["q"], want = "word " * (CHAR_LIMIT // 4), 413
        started = time.perf_counter()
        try:
            r = client.post(self.url + route, json=body, headers=key)
        except httpx.HTTPError as e:
            self.note(kind, 0, time.perf_counter() - started, f"{type(e).__name__}: {e}")
            return
        seconds = time.perf_counter() - started
        if kind == "limited" and r.status_code == 429:
            self.note(kind, 429, seconds)
            return
        if r.status_code != want:
            self.note(kind, r.status_code, seconds, f"status {r.status_code} (expected {want}): {r.text[:200]}")
            return
        problem = self.check(kind, target, picked, r.json()) if want == 200 else None
        self.note(kind, r.status_code, seconds, problem)

    def check(self, kind: str, target: str, picked: list[str], answer: dict) -> str | None:
        """None when the answer is what `mt translate` says, else what differs."""
        want = self.expected[target]
        if kind in ("text", "limited"):
            got, expected = [answer["translatedText"]], [want[picked[0]]]
        elif kind == "list":
            got, expected = answer["translatedText"], [want[line] for line in picked]
        elif kind == "v1":
            got, expected = [t["text"] for t in answer["translations"]], [want[line] for line in picked]
        elif kind == "html":
            got = [" ".join(block.split()) for text in answer["translatedText"] for block in HtmlFragment(text).blocks]
            expected = [" ".join(want[line].split()) for line in picked for line in (line, picked[0])]
            expected = [e for e in expected if e]
        else:  # detect: a ranked list of served languages
            return None if isinstance(answer, list) and answer and "language" in answer[0] else f"detect: {answer}"
        return None if got == expected else f"{picked} -> {got}, mt translate: {expected}"


def run(minutes: float, clients: int, out: Path | None) -> int:
    work = Path(tempfile.mkdtemp(prefix="mt-soak-"))
    lines = [line for line in synthetic_sentences(2500, 7) if line.strip()][:2000]
    models = {"de": write_random_checkpoint(work / "de.pt", seed=1, tgt_lang="de"),
              "fr": write_random_checkpoint(work / "fr.pt", seed=2, tgt_lang="fr")}
    expected = {target: expected_outputs(ckpt, lines) for target, ckpt in models.items()}
    (work / "keys.yaml").write_text(KEYS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = work / "serve.log"
    server = subprocess.Popen([sys.executable, "-m", "mt", "serve", "-c", str(models["de"]), "-c", str(models["fr"]),
                               "--port", str(port), "--threads", "1", "--api-keys", str(work / "keys.yaml"),
                               "--char-limit", str(CHAR_LIMIT), "--cache-size", "200"], env=ENV, stdout=log.open("wb"),
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"soak: mt serve did not start; see {log}")
            time.sleep(0.2)
        soak = Soak(url, lines, expected, seed=0)
        memory: list[tuple[float, float, float]] = []  # (seconds, all MB, the server process's MB)
        stop = time.monotonic() + 60 * minutes
        started = time.monotonic()

        def client_loop(i: int) -> None:
            rng = random.Random(i)
            with httpx.Client(timeout=60) as client:
                while time.monotonic() < stop:
                    soak.one(client, rng)

        threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(clients)]
        for thread in threads:
            thread.start()
        next_reload, next_sample = time.monotonic() + 60, time.monotonic()
        while time.monotonic() < stop:
            now = time.monotonic()
            if now >= next_sample:
                memory.append((round(now - started, 1), *rss(server.pid)))
                next_sample += 10
            if now >= next_reload:
                server.send_signal(signal.SIGHUP)
                next_reload += 60
            time.sleep(0.5)
        for thread in threads:
            thread.join(90)
        metrics = httpx.get(url + "/metrics", timeout=10).text
        memory.append((round(time.monotonic() - started, 1), *rss(server.pid)))
    finally:
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(60)
        if server.poll() is None:
            server.kill()
    text = log.read_text(errors="replace")
    reloads = dict(re.findall(r'^mt_reloads_total\{result="(\w+)"\} (\S+)$', metrics, re.M))
    seconds = sorted(soak.latency)
    report = {"minutes": minutes, "clients": clients, "requests": len(seconds),
              "by_kind_and_status": dict(sorted(soak.counts.items())), "wrong_or_unexpected": len(soak.wrong),
              "examples": soak.wrong[:10], "tracebacks": text.count("Traceback"),
              "reloads": {k: float(v) for k, v in reloads.items()},
              "p50_ms": round(1000 * seconds[len(seconds) // 2], 1) if seconds else None,
              "p99_ms": round(1000 * seconds[int(0.99 * (len(seconds) - 1))], 1) if seconds else None,
              "memory_mb": {"first": memory[0][1], "last": memory[-1][1], "max": max(m[1] for m in memory),
                            "server_first": memory[0][2], "server_last": memory[-1][2],
                            "samples [s, all, server]": memory},
              "log": str(log)}
    rendered = json.dumps(report, indent=1)
    print(rendered)
    if out is not None:
        out.write_text(rendered + "\n")
    return 1 if soak.wrong or report["tracebacks"] else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs (default 30)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here (JSON)")
    args = parser.parse_args()
    raise SystemExit(run(args.minutes, args.clients, args.out))


if __name__ == "__main__":
    main()
