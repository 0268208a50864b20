"""What the benchmarks that load `mt serve` share (bench_serve.py, bench_paragraphs.py,
reload_memory.py): a free loopback port, and `mt serve` started as a child process of this
checkout, waited for until /ready answers 200, always stopped when the block ends. Not a benchmark."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}  # the children run this checkout's mt


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(*args: str, env: dict[str, str] | None = None, ready_s: float = 180
           ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`mt serve ARGS --port P` on a free port until the block ends: (its URL, its process), once
    /ready answers 200 (SystemExit when the server exits first or is not ready in `ready_s`)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mt", "serve", *args, "--port", str(port)], env=env or ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"mt serve {' '.join(args)} exited with {proc.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"mt serve not ready in {ready_s:.0f} s")
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
