"""The server process's memory over reloads: `mt serve` with the tiny test model, idle, SIGHUPed N
times (each waited for through `mt_reloads_total`), its resident memory printed after each.

    python scripts/bench/reload_memory.py --reloads 10

Prints one line per reload: the reload's number and the server process's RSS in MB (its model
worker is not counted: a reload replaces it).
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
from serving import ENV, served

from mt.deploy.tiny import write_random_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reloads", type=int, default=10)
    args = parser.parse_args()
    ckpt = write_random_checkpoint(Path(tempfile.mkdtemp(prefix="mt-reload-")) / "tiny.pt", seed=1)
    with served("-c", str(ckpt), "--threads", "1", env={**ENV, "OMP_NUM_THREADS": "1"}, ready_s=120) as (url, server):
        def rss() -> float:
            return int(Path(f"/proc/{server.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

        def reloads() -> float:
            text = httpx.get(url + "/metrics", timeout=10).text
            return sum(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith('mt_reloads_total{result="ok"}'))

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


if __name__ == "__main__":
    main()
