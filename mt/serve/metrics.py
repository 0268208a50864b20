"""Prometheus metrics of one server (one registry per app, so tests can run several apps).

`Metrics` counts requests and latency by route (and requests by API-key name, from
`mt.serve.access`), translate requests open (what the batcher asks), batches (segments, tokens,
seconds), segments translated, failed batches, batcher and worker restarts, reloads, the
translation cache's hits and misses and its entries by model, the queue depth summed over the
batchers (`depth_reporter`), the worker processes' resident memory (read at each scrape), the
load time and one `mt_model_info` gauge per model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mt.serve.batcher import BatchStats

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 30.0)
_SEGMENT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class Metrics:
    """requests by route and status (and by API key name), latency, queue depth, batch sizes, segments,
    model load time, translate requests open, translation cache hits, misses and size; failed batches,
    worker restarts, reloads, the workers' memory and which models run."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mt_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=r)
        self.key_requests = Counter("mt_key_requests", "Requests with a valid API key by the key's name "
                                                       "(never the key), route and status",
                                    ["key", "route", "status"], registry=r)
        self.latency = Histogram("mt_request_seconds", "Request latency by route", ["route"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("mt_queue_depth", "Segments waiting for the model worker", registry=r)
        self.batch_segments = Histogram("mt_batch_segments", "Segments per decoded batch",
                                        buckets=_SEGMENT_BUCKETS, registry=r)
        self.batch_tokens = Histogram("mt_batch_tokens", "Source tokens per decoded batch (unpadded)",
                                      buckets=_TOKEN_BUCKETS, registry=r)
        self.batch_seconds = Histogram("mt_batch_seconds", "Model time per decoded batch",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.segments = Counter("mt_segments_translated", "Segments (non-empty lines) translated", registry=r)
        self.load_seconds = Gauge("mt_model_load_seconds", "Seconds to load and warm up the model",
                                  registry=r)
        self.translate_open = Gauge("mt_translate_requests_open",
                                    "Translate requests received and not yet answered", registry=r)
        self.cache_hits = Counter("mt_cache_hits", "Segments answered from the translation cache", registry=r)
        self.cache_misses = Counter("mt_cache_misses", "Segments looked up in the translation cache and "
                                                       "not found (sent to the model)", registry=r)
        self.cache_entries = Gauge("mt_cache_segments", "Segments held in the translation cache, by model id",
                                   ["model"], registry=r)
        self.open_translations = 0  # the same count, read by the batchers' worker threads
        self.routed = 0  # of those, the ones that have reached a model (`OpenRequests.held`)
        self._depths: list[int] = []  # each batcher's queued segments (`depth_reporter`)
        self.batch_failures = Counter("mt_batch_failures",
                                      "Decoded batches that failed (their requests got 500)", registry=r)
        self.batcher_restarts = Counter("mt_batcher_restarts",
                                        "Batcher worker threads run again after one failed", registry=r)
        self.worker_restarts = Counter("mt_worker_restarts",
                                       "Model worker processes started again after one exited", registry=r)
        self.worker_memory = Gauge("mt_worker_memory_bytes", "Resident memory of the model worker processes "
                                                             "(all models together)", registry=r)
        self.model_info = Gauge("mt_model_info",
                                "The models served (value 1 each): weights' sha256, update, pairs",
                                ["id", "update", "pairs"], registry=r)
        self.reloads = Counter("mt_reloads",
                               "Reloads of the models (SIGHUP, POST /v1/admin/reload) by result",
                               ["result"], registry=r)

    def models_loaded(self, models: list[tuple[str, int, list[tuple[str, str]]]],
                      memory_bytes: Callable[[], float]) -> None:
        """Name the models now served ((id, update, pairs) each), and read their workers' memory at every
        scrape."""
        self.model_info.clear()
        self.cache_entries.clear()  # a reloaded model's cache starts empty; a replaced model's label goes
        for model_id, update, pairs in models:
            self.model_info.labels(model_id, str(update), ",".join(f"{s}-{t}" for s, t in pairs)).set(1)
            self.cache_entries.labels(model_id).set(0)
        self.worker_memory.set_function(memory_bytes)

    def on_failure(self, segments: int) -> None:
        self.batch_failures.inc()

    def translate_started(self) -> None:
        self.open_translations += 1
        self.translate_open.set(self.open_translations)

    def translate_ended(self, scope: dict[str, Any]) -> None:
        self.open_translations -= 1
        self.routed -= bool(scope.get("mt.routed"))
        self.translate_open.set(self.open_translations)

    def unrouted(self) -> int:
        """Translate requests open whose model is not known yet (body or routing under way): any
        model's batcher may get them."""
        return max(0, self.open_translations - self.routed)

    def on_batch(self, stats: BatchStats) -> None:
        self.batch_segments.observe(stats.segments)
        self.batch_tokens.observe(stats.tokens)
        self.batch_seconds.observe(stats.seconds)
        self.segments.inc(stats.segments)

    def cache_reporter(self, model_id: str) -> Callable[[int, int, int], None]:
        """A model's `TranslationCache.on_count`: hits and misses counted server-wide, entries by model."""
        def report(hits: int, misses: int, entries: int) -> None:
            self.cache_hits.inc(hits)
            self.cache_misses.inc(misses)
            self.cache_entries.labels(model_id).set(entries)
        return report

    def depth_reporter(self) -> Callable[[int], None]:
        """A batcher's `on_depth`: the gauge shows the segments queued on every model's batcher together."""
        slot = len(self._depths)
        self._depths.append(0)

        def report(depth: int) -> None:
            self._depths[slot] = depth
            self.queue_depth.set(sum(self._depths))
        return report

    def render(self) -> bytes:
        return generate_latest(self.registry)


class OpenRequests:
    """The translate requests one model's batcher should expect (its `open_requests`): those routed
    to this model and not yet answered, plus those open on the server whose model is not known yet.
    Traffic on another model is not counted: a lone request here need not wait for it."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.count = 0  # requests with a job on this model (event-loop thread only; read by the batcher)

    def now(self) -> int:
        return self.count + self.metrics.unrouted()

    @contextmanager
    def held(self, scope: dict[str, Any]) -> Iterator[None]:
        """Count a request (its ASGI scope) as this model's while it waits for its job."""
        if not scope.get("mt.routed"):
            scope["mt.routed"] = True  # counted once, however many models its texts go to
            self.metrics.routed += 1
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1
