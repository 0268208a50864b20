"""The server process's memory over reloads: `mt serve` with the tiny test model, idle, SIGHUPed N
times (each waited for through `mt_reloads_total`), its resident memory printed after each.

    python scripts/reload_memory.py --reloads 10

Prints one line per reload: the reload's number and the server process's RSS in MB (its model
worker is not counted: a reload replaces it).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import httpx  # noqa: E402
from tiny_checkpoint import write_random_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reloads", type=int, default=10)
    args = parser.parse_args()
    ckpt = write_random_checkpoint(Path(tempfile.mkdtemp(prefix="mt-reload-")) / "tiny.pt", seed=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen([sys.executable, "-m", "mt", "serve", "-c", str(ckpt), "--port", str(port),
                               "--threads", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def rss() -> float:
        return int(Path(f"/proc/{server.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def reloads() -> float:
        text = httpx.get(url + "/metrics", timeout=10).text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith('mt_reloads_total{result="ok"}'))

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("reload_memory: mt serve did not start")
            time.sleep(0.3)
        httpx.post(url + "/detect", json={"q": "hello"}, timeout=30)
        print(f"start {rss():.1f} MB", flush=True)
        for i in range(1, args.reloads + 1):
            before = reloads()
            server.send_signal(signal.SIGHUP)
            while reloads() < before + 1:
                time.sleep(0.3)
            httpx.post(url + "/detect", json={"q": "hello"}, timeout=30)
            time.sleep(1)
            print(f"reload {i} {rss():.1f} MB", flush=True)
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
