"""Load-test `mt serve` on loopback and compare it with offline `translate_lines` in the same run.

    python scripts/bench/bench_serve.py -c /work/models/demo_en_de.pt [--export DIR] [-n 300] [--out bench.json]

Single-sentence POST /v1/translate requests (the first N English lines of test_2016_flickr) at
concurrency 1, 8, 32 and 128, beam 5 and greedy, from a bounded asyncio generator (raw HTTP/1.1 keep-alive connections, or
httpx with --client httpx). For
each level: segments/s, p50/p95/p99 latency, and the batch sizes the server's batcher formed
(from the /metrics histograms, before/after). Also, in this same run: offline `translate_lines`
of the same N sentences with the same engine and beam (the ratio the issue asks for), the
server with batching off (--max-batch-tokens 1) at concurrency 32, and, with --export, the
CTranslate2 export served side by side. With --paragraphs, only the paragraph mode: the same
sentences one per request vs grouped into paragraphs (3-6 sentences, one request each, split by
the server's segmenter), sentences/s of each at --concurrency. Everything is bounded: N requests per level and a
per-level time cap. The load generator shares the machine with the server; say so with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import gzip
import json
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import serving

from mt.device import cpu_name

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SRC = REPO / "data" / "multi30k" / "test_2016_flickr.en.gz"  # make fetch


@contextlib.contextmanager
def served(model: str, *args: str) -> Iterator[tuple[str, int]]:
    """`mt serve -c model` on a free port until the block ends: (its URL, its pid). The translation cache is off:
    every level sends the same lines, and the benchmark measures the model, not the cache."""
    with serving.served("-c", model, "--queue-size", "100000", "--max-segments", "10000", "--timeout", "600",
                        "--cache-size", "0", *args) as (url, proc):
        yield url, proc.pid


def histogram(text: str, name: str) -> dict[str, float]:
    """Cumulative bucket counts of a Prometheus histogram, plus _sum and _count."""
    out = {m.group(1): float(m.group(2)) for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', text, re.M)}
    for part in ("sum", "count"):
        m = re.search(rf"^{name}_{part} (\S+)$", text, re.M)
        out[part] = float(m.group(1)) if m else 0.0
    return out


def batch_shape(before: str, after: str) -> dict[str, object]:
    """Batches formed between two /metrics scrapes: count, mean segments and tokens, and the
    distribution of segments per batch (bucket upper bound -> batches)."""
    seg0, seg1 = histogram(before, "mt_batch_segments"), histogram(after, "mt_batch_segments")
    tok0, tok1 = histogram(before, "mt_batch_tokens"), histogram(after, "mt_batch_tokens")
    n = seg1["count"] - seg0["count"]
    dist, prev = {}, 0.0
    for le in [k for k in seg1 if k not in ("sum", "count")]:
        cum = seg1[le] - seg0.get(le, 0.0)
        if cum - prev:
            dist[f"<={le}"] = int(cum - prev)
        prev = cum
    return {"batches": int(n), "mean_segments": round((seg1["sum"] - seg0["sum"]) / max(n, 1), 1),
            "mean_tokens": round((tok1["sum"] - tok0["sum"]) / max(n, 1), 1), "segments_per_batch": dist}


class RawHTTPConnection:
    """One keep-alive HTTP/1.1 connection on asyncio streams, for the load generator only.

    httpx costs about as much CPU per request as the server's own HTTP handling, and its pool scans
    its connections per request, so at 128 connections on a 2-core machine the generator, not the
    server, set the pace. This sends prebuilt request bytes and reads the status line, the headers
    and a Content-Length body: the least work a client can do, so the cores go to the server."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post_json(self, path: str, payload: object) -> tuple[int, bytes]:
        body = json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        writer.write(head + body)
        await writer.drain()
        header = await reader.readuntil(b"\r\n\r\n")
        status = int(header.split(b" ", 2)[1])
        length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", header)
        if length is None:
            raise ValueError("response without Content-Length")
        data = await reader.readexactly(int(length.group(1)))
        if re.search(rb"(?i)\r\nconnection:\s*close", header):
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.streams is not None:
            writer = self.streams[1]
            self.streams = None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def load(url: str, payloads: list[dict[str, object]], concurrency: int, cap_s: float,
               client: str = "raw", records: list[tuple[float, float, bool, str]] | None = None) -> dict[str, object]:
    """Send every payload as its own /v1/translate request from `concurrency` workers (one
    connection each); stop early after cap_s. A request counts as an error unless it is a 200 with
    one translation. `records`, when given, gets (start time, seconds, error, answering model id) per request."""
    todo = collections.deque(payloads)
    latencies: list[float] = []
    errors = 0
    stop_at = time.monotonic() + cap_s
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def worker(post) -> None:
        nonlocal errors
        while todo and time.monotonic() < stop_at:
            payload = todo.popleft()
            started, model = time.perf_counter(), ""
            try:
                status, data = await post(payload)
                answer = json.loads(data)
                failed = status != 200 or len(answer["translations"]) != 1
                model = "" if failed else answer["model"]["id"]
            except (OSError, ValueError, KeyError, asyncio.IncompleteReadError, httpx.HTTPError):
                failed = True
            errors += failed
            latencies.append(time.perf_counter() - started)
            if records is not None:
                records.append((started, latencies[-1], failed, model))

    started = time.perf_counter()
    if client == "raw":
        connections = [RawHTTPConnection(host, int(port)) for _ in range(concurrency)]
        await asyncio.gather(*(worker(lambda payload, c=c: c.post_json("/v1/translate", payload))
                               for c in connections))
        wall = time.perf_counter() - started
        for c in connections:
            await c.close()
    else:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(timeout=600, limits=limits) as http:
            async def post(payload: object) -> tuple[int, bytes]:
                r = await http.post(url + "/v1/translate", json=payload)
                return r.status_code, r.content

            await asyncio.gather(*(worker(post) for _ in range(concurrency)))
            wall = time.perf_counter() - started
    return {"requests": len(latencies), "errors": errors, "seg_per_s": round(len(latencies) / wall, 1),
            **percentiles(latencies)}


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50/p95/p99 of latencies, in ms."""
    ms = np.array(seconds) * 1000 if seconds else np.array([float("nan")])
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), 1) for q in (50, 95, 99)}


def level(url: str, lines: list[str], concurrency: int, beam: int, cap_s: float, client: str) -> dict[str, object]:
    before = httpx.get(url + "/metrics").text
    row = asyncio.run(load(url, [{"segments": [line], "beam": beam} for line in lines], concurrency, cap_s, client))
    row.update(batch_shape(before, httpx.get(url + "/metrics").text), concurrency=concurrency, beam=beam)
    print(json.dumps(row), flush=True)
    return row


def paragraph_levels(model: str, lines: list[str], concurrency: list[int], beam: int, cap_s: float, threads: int,
                     client: str, seed: int = 43) -> list[dict[str, object]]:
    """The same sentences served one per request and as paragraphs (seeded runs of 3-6 consecutive
    sentences joined by a space, one paragraph per request, segmented by the server), at each
    concurrency: sentences/s of each and their ratio (issue 43's target: >= 0.9)."""
    rng, groups, at = random.Random(seed), [], 0
    while at < len(lines):
        size = rng.randint(3, 6)
        groups.append(lines[at:at + size])
        at += size
    rows = []
    with served(model, "--beam", str(beam), "--threads", str(threads)) as (url, _):
        for c in concurrency:
            one = asyncio.run(load(url, [{"segments": [line], "beam": beam} for line in lines], c, cap_s, client))
            para = asyncio.run(load(url, [{"segments": [" ".join(g)], "beam": beam} for g in groups], c, cap_s, client))
            sentences_done = sum(len(g) for g in groups[:para["requests"]])  # the first ones are taken first
            row = {"concurrency": c, "beam": beam, "sentences_per_s_one_by_one": one["seg_per_s"],
                   "sentences_per_s_paragraphs": round(sentences_done / para["requests"] * para["seg_per_s"], 1),
                   "paragraph_p50_ms": para["p50_ms"], "sentence_p50_ms": one["p50_ms"],
                   "errors": one["errors"] + para["errors"]}
            row["ratio"] = round(row["sentences_per_s_paragraphs"] / row["sentences_per_s_one_by_one"], 2)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def offline(model: str, lines: list[str], beam: int, threads: int, chunk: int = 0) -> float:
    """Offline translate_lines of all `lines` with the engine `mt serve` would load: sentences/s.
    chunk > 0: one call per `chunk` lines (what a server batch of that size can do), else one call."""
    import torch

    from mt.decode.translate import translate_lines
    from mt.deploy.loading import load_model

    if threads:
        torch.set_num_threads(threads)  # as `mt serve --threads` does
    loaded = load_model([Path(model)], "auto")
    engine, tokenizer, cfg, dev = loaded.engine, loaded.tokenizer, loaded.config, loaded.device
    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=beam, n_best=1))
    translate_lines(engine, tokenizer, lines[:8], decode, device=dev)  # warm-up, as the server does
    step = chunk or len(lines)
    started = time.perf_counter()
    for i in range(0, len(lines), step):
        translate_lines(engine, tokenizer, lines[i:i + step], decode, device=dev)
    rate = len(lines) / (time.perf_counter() - started)
    print(json.dumps({"offline": model, "beam": beam, "chunk": chunk or len(lines), "seg_per_s": round(rate, 1)}),
          flush=True)
    return rate


def two_models(first: str, second: str, lines: list[str], reverse_lines: list[str], concurrency: int, beam: int,
               cap_s: float, threads: int, client: str) -> dict[str, object]:
    """One server with `-c first -c second` (first: src->tgt, second: tgt->src), requests for the
    two pairs interleaved at `concurrency`: seg/s and latency for each pair and together."""
    pair = _pair(first)
    payloads = [{"segments": [line], "beam": beam, "source": src}
                for a, b in zip(lines, reverse_lines) for line, src in ((a, pair[0]), (b, pair[1]))]
    records: list[tuple[float, float, bool, str]] = []
    with served(first, "-c", second, "--beam", str(beam), "--threads", str(threads)) as (url, _):
        ids = {m["id"]: "-".join((m["pairs"][0]["source"], m["pairs"][0]["target"]))
               for m in httpx.get(url + "/v1/models").json()["models"]}
        row = asyncio.run(load(url, payloads, concurrency, cap_s, client, records))
    for model_id, name in ids.items():
        mine = [r for r in records if r[3] == model_id]
        row[name] = {"requests": len(mine), **percentiles([r[1] for r in mine])}
    row.update(concurrency=concurrency, beam=beam, models=list(ids.values()))
    print(json.dumps({"two_models": row}), flush=True)
    return row


def reload_under_load(model: str, lines: list[str], concurrency: int, beam: int, seconds: float, threads: int,
                      client: str) -> dict[str, object]:
    """One server; requests at `concurrency` for `seconds`; a reload (SIGHUP, the same checkpoint
    loaded again in a new worker) at a third of the way: failed requests, the time until /ready is
    200 again, and latency before, during (SIGHUP until the swap + 1 s) and after."""
    payloads = [{"segments": [f"{line} ({i})"], "beam": beam}  # never the same line twice
                for i in range(100) for line in lines]
    records: list[tuple[float, float, bool, str]] = []
    with served(model, "--beam", str(beam), "--threads", str(threads)) as (url, pid):

        async def run() -> tuple[float, float]:
            task = asyncio.ensure_future(load(url, payloads, concurrency, seconds, client, records))
            await asyncio.sleep(seconds / 3)
            sent = time.perf_counter()
            os.kill(pid, signal.SIGHUP)
            async with httpx.AsyncClient() as http:
                await asyncio.sleep(0.05)
                while (await http.get(url + "/ready")).status_code != 200:
                    await asyncio.sleep(0.02)
            ready = time.perf_counter()
            await task
            return sent, ready

        sent, ready = asyncio.run(run())
    during = [r for r in records if sent <= r[0] + r[1] and r[0] <= ready + 1.0]
    before = [r for r in records if r[0] + r[1] < sent]
    after = [r for r in records if r[0] > ready + 1.0]
    row = {"requests": len(records), "errors": sum(r[2] for r in records), "reload_s": round(ready - sent, 2),
           "models_seen": len({r[3] for r in records if r[3]}),
           "before": {"requests": len(before), **percentiles([r[1] for r in before])},
           "during": {"requests": len(during), **percentiles([r[1] for r in during])},
           "after": {"requests": len(after), **percentiles([r[1] for r in after])},
           "concurrency": concurrency, "beam": beam}
    print(json.dumps({"reload": row}), flush=True)
    return row


def _pair(model: str) -> tuple[str, str]:
    from mt.deploy.loading import load_model

    cfg = load_model([Path(model)], "cpu").config
    return cfg.data.src_lang, cfg.data.tgt_lang


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--checkpoint", required=True)
    ap.add_argument("--export", help="an `mt export` directory (CTranslate2) to serve side by side")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("-n", type=int, default=1000, help="sentences (requests) per level")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--beams", type=int, nargs="+", default=[5, 1])
    ap.add_argument("--cap-s", type=float, default=60.0, help="time cap per level (fewer requests if reached)")
    ap.add_argument("--threads", type=int, default=1, help="model threads, offline and served (0 = torch default)")
    ap.add_argument("--client", choices=["raw", "httpx"], default="raw",
                    help="load generator: raw asyncio HTTP/1.1 connections (the least client CPU) or httpx")
    ap.add_argument("--offline-chunks", type=int, nargs="*", default=[],
                    help="also time offline translate_lines in calls of this many lines (e.g. 1 28: "
                         "the most that batches of that size can serve)")
    ap.add_argument("--second", help="a model of the reverse pair: also serve both in one server (-c A -c B), "
                                      "requests for the two pairs interleaved")
    ap.add_argument("--second-src", type=Path, default=DEFAULT_SRC.with_name("test_2016_flickr.de.gz"),
                    help="source lines for --second (default: the German side)")
    ap.add_argument("--reload-seconds", type=float, default=0.0,
                    help="also load the server for this long with a SIGHUP reload a third of the way in (0: no)")
    ap.add_argument("--operator-only", action="store_true",
                    help="only the two-model and reload runs (not the levels, offline and unbatched runs)")
    ap.add_argument("--paragraphs", action="store_true",
                    help="only the paragraph mode: the same sentences one per request vs as paragraphs of 3-6 "
                         "(at --concurrency, the first of --beams)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with gzip.open(args.src, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(args.n), f)]
    report: dict[str, object] = {"n": len(lines), "cpu": cpu_name(), "threads": args.threads, "client": args.client,
                                 "load_before": os.getloadavg()}
    if args.paragraphs:
        report["paragraphs"] = paragraph_levels(args.checkpoint, lines, args.concurrency, args.beams[0], args.cap_s,
                                                args.threads, args.client)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
        return
    models = [] if args.operator_only else [("native", args.checkpoint)] + ([("ct2", args.export)] if args.export else [])
    operator_runs(args, lines, report)
    for name, model in models:
        rates = {beam: offline(model, lines, beam, args.threads) for beam in args.beams}
        chunked = {f"beam {beam}, chunks of {chunk}": round(offline(model, lines, beam, args.threads, chunk), 1)
                   for beam in args.beams for chunk in args.offline_chunks}
        rows = []
        with served(model, "--beam", str(max(args.beams)), "--threads", str(args.threads)) as (url, _):
            for beam in args.beams:
                for c in args.concurrency:
                    row = level(url, lines, c, beam, args.cap_s, args.client)
                    row["ratio_offline"] = round(row["seg_per_s"] / rates[beam], 2)
                    rows.append(row)
        with served(model, "--beam", str(max(args.beams)), "--threads", str(args.threads),
                    "--max-batch-tokens", "1") as (url, _):
            unbatched = {beam: level(url, lines, 32, beam, args.cap_s, args.client) for beam in args.beams}
        for row in rows:
            if row["concurrency"] == 32:
                row["ratio_unbatched"] = round(row["seg_per_s"] / unbatched[row["beam"]]["seg_per_s"], 2)
        report[name] = {"model": model, "offline_seg_per_s": {str(b): round(r, 1) for b, r in rates.items()},
                        "offline_chunked_seg_per_s": chunked, "levels": rows, "unbatched_c32": list(unbatched.values())}
    report["load_after"] = os.getloadavg()
    _table(report, [name for name, _ in models])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")


def operator_runs(args: argparse.Namespace, lines: list[str], report: dict[str, object]) -> None:
    """The two-model run (with --second) and the reload run (with --reload-seconds), at concurrency
    32 (or the largest level asked for below it) and the first beam."""
    concurrency, beam = max([c for c in args.concurrency if c <= 32] or [1]), args.beams[0]
    if args.second:
        with gzip.open(args.second_src, "rt", encoding="utf-8") as f:
            reverse = [line.rstrip("\n") for _, line in zip(range(len(lines)), f)]
        report["two_models"] = two_models(args.checkpoint, args.second, lines, reverse, concurrency, beam,
                                          args.cap_s, args.threads, args.client)
    if args.reload_seconds > 0:
        report["reload"] = reload_under_load(args.checkpoint, lines, concurrency, beam, args.reload_seconds,
                                             args.threads, args.client)


def _table(report: dict, names: list[str]) -> None:
    print(f"\n{report['cpu']}, {report['n']} sentences/level, load {report['load_before'][0]:.1f} -> "
          f"{report['load_after'][0]:.1f}")
    print("| engine | beam | conc. | seg/s | p50 ms | p95 ms | p99 ms | x offline | x unbatched | mean batch (seg) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    if "two_models" in report:
        r = report["two_models"]
        print(f"two models in one server ({', '.join(r['models'])}), concurrency {r['concurrency']}, beam {r['beam']}: "
              f"{r['seg_per_s']} seg/s, p50/p95/p99 {r['p50_ms']}/{r['p95_ms']}/{r['p99_ms']} ms, errors {r['errors']}; "
              + "; ".join(f"{m}: p50/p99 {r[m]['p50_ms']}/{r[m]['p99_ms']} ms" for m in r["models"]))
    if "reload" in report:
        r = report["reload"]
        print(f"reload under load, concurrency {r['concurrency']}, beam {r['beam']}: {r['requests']} requests, "
              f"{r['errors']} failed, /ready 200 again {r['reload_s']} s after SIGHUP; p99 before/during/after "
              f"{r['before']['p99_ms']}/{r['during']['p99_ms']}/{r['after']['p99_ms']} ms")
    for name in names:
        for r in report[name]["levels"]:
            print(f"| {name} | {r['beam']} | {r['concurrency']} | {r['seg_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
                  f"{r['p99_ms']} | {r['ratio_offline']} | {r.get('ratio_unbatched', '')} | {r['mean_segments']} |")
        for r in report[name]["unbatched_c32"]:
            print(f"| {name} unbatched | {r['beam']} | 32 | {r['seg_per_s']} | {r['p50_ms']} | {r['p95_ms']} | "
                  f"{r['p99_ms']} | | | {r['mean_segments']} |")
        print(f"| {name} offline | " + ", ".join(f"beam {b}: {v} seg/s" for b, v in
                                                report[name]["offline_seg_per_s"].items()) + " |||||||||")
        if report[name]["offline_chunked_seg_per_s"]:
            print(f"| {name} offline in chunks | " + ", ".join(
                f"{k}: {v} seg/s" for k, v in report[name]["offline_chunked_seg_per_s"].items()) + " |||||||||")


if __name__ == "__main__":
    main()
