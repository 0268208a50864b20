"""What one server holds while it runs: a typed state on `app.state.serve` (the routes reach it
through `mt.serve.deps`).

The models load in a background thread at start-up (`load`), so the server answers /health at
once; until they are ready, `not_ready` says why (loading, or the one-line reason it failed). Two
models that claim one language pair, or a --glossary their model refuses, stop the server
(`fatal`). A reload (`reload`: SIGHUP, or POST /v1/admin/reload) re-reads the keys file and loads
every `-c` model again in new workers beside the old ones; when all are warm the new fleet is
swapped in, requests in flight finish on the old one, which is closed once idle. A model that fails
to load leaves the old ones serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mt.errors import MTError
from mt.serve.filestore import FileStore
from mt.serve.fleet import Fleet, StartupRefused
from mt.serve.limits import Limiter, read_keys_file
from mt.serve.metrics import Metrics
from mt.serve.model import load_served_model
from mt.serve.settings import ServeSettings
from mt.serve.specs import Spec, spec_name

log = logging.getLogger(__name__)


class ReloadBusy(MTError):
    """A reload was asked for while one runs."""


@dataclass
class ServeState:
    """One server's settings (limits and API keys), metrics, web page and models."""

    settings: ServeSettings
    specs: tuple[Spec, ...]  # what the `-c` options named: one model each
    metrics: Metrics
    page: bytes  # the web page at /, read once: a missing file fails at start-up, not per request
    fleet: Fleet | None = None  # set once every model is loaded and warmed up; swapped by a reload
    error: str | None = None  # why the models failed to load at start-up
    fatal: str | None = None  # a start-up error that stops the server (`mt.serve.server` raises it)
    on_fatal: Callable[[], None] | None = field(default=None, repr=False)  # asks the server to stop
    reloading: bool = False  # new models are loading beside the served ones (/ready 503)
    draining: bool = False  # a stop signal came: requests in flight finish, /ready 503
    cards: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)  # /v1/model-card, by model id
    # per key or client address (`mt.serve.limits`)
    limiter: Limiter = field(default_factory=Limiter, repr=False)
    # translated files to download (/translate_file)
    files: FileStore = field(default_factory=FileStore, repr=False)
    starting: bool = False  # the start-up thread is loading the models
    # one load or reload at a time
    _reload_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _swap_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # `fleet` against `close`
    _closed: bool = False

    def reload_keys(self) -> None:
        """Re-read --api-keys: the new keys and limits apply to the next request; a bad file logs
        one line and the old keys stay. The buckets are kept (by key name)."""
        path = self.settings.keys_file
        if path is None:
            return
        try:
            keys = read_keys_file(path)
        except MTError as e:
            log.error("serve: reload: keeping the old keys: %s", e)
            return
        self.settings = self.settings.with_keys(keys)
        log.info("serve: reload: %d keys from %s (%s)", len(keys.keys), path,
                 ", ".join(k.name for k in keys.keys))

    def load(self) -> None:
        """Load the models (the start-up thread's job); a failure is kept for /ready and logged, the
        server stays up; two models claiming one pair stop it. Holds the reload lock, so a reload
        (SIGHUP, POST /v1/admin/reload) in the first seconds is refused as busy instead of loading a
        second set beside these; one that came before this thread started has loaded them already."""
        with self._reload_lock:
            self.starting = True
            try:
                if self.fleet is None:
                    self._load()
            finally:
                self.starting = False

    def _load(self) -> None:
        try:
            self._install(self._build())
        except StartupRefused as e:
            self.error = self.fatal = str(e)
            if self.on_fatal is not None:
                self.on_fatal()
        except Exception as e:  # noqa: BLE001 - reported by /ready and the log; the server stays up
            self.error = str(e)
            log.error("serve: loading the model failed: %s", e)

    def reload(self, why: str) -> Fleet:
        """Re-read the keys, load every model again beside the served ones, swap when all are warm,
        then close the old ones once their requests are done. Blocking. The new fleet; an MTError
        (the old models keep serving) when a model fails to load, ReloadBusy while another reload runs."""
        self.reload_keys()  # at once, even while another reload loads models
        if not self._reload_lock.acquire(blocking=False):
            raise ReloadBusy("the models are still loading (start-up)" if self.starting
                             else "a reload is already running")
        try:
            self.reloading = True
            started = time.perf_counter()
            try:
                new = self._build()
            except Exception as e:  # noqa: BLE001 - the old models keep serving; one line says why
                self.metrics.reloads.labels("failed").inc()
                message = f"reload ({why}) failed, the old models keep serving: {e}"
                log.error("serve: %s", message)
                raise MTError(message) from None
            old = self._install(new)
            self.error = None
            self.metrics.reloads.labels("ok").inc()
            log.info("serve: reload (%s): %s serving after %.1f s", why,
                     ", ".join(m.identity.id[:12] for m in new.models), time.perf_counter() - started)
        finally:
            self.reloading = False
            self._reload_lock.release()
        if old is not None:  # requests in flight hold the old fleet: close it when they are done
            old.retire(grace_s=2 * self.settings.timeout_s + 5)
        return new

    def _install(self, new: Fleet) -> Fleet | None:
        """Serve `new`; the fleet it replaces. After `close` (the server is stopping) `new` is closed
        at once instead (an MTError): nothing started here outlives the server."""
        with self._swap_lock:
            if self._closed:
                new.close()
                raise MTError("the server is stopping")
            old, self.fleet = self.fleet, new
        return old

    def _build(self) -> Fleet:
        """Every `-c` model loaded and warmed up in its own worker (in parallel), as one fleet; the
        metrics then name them. Nothing is left running when one fails."""
        started = time.perf_counter()
        with ThreadPoolExecutor(len(self.specs), thread_name_prefix="mt-serve-load") as pool:
            futures = [pool.submit(load_served_model, self.settings, spec, self.metrics)
                       for spec in self.specs]
        models, errors = [], []
        for spec, future in zip(self.specs, futures):
            try:
                models.append(future.result())
            except Exception as e:  # noqa: BLE001 - one line naming the model
                errors.append(f"-c {spec_name(spec)}: {e}" if len(self.specs) > 1 else str(e))
        try:
            if errors:
                raise MTError("; ".join(errors))
            fleet = Fleet(models, self.specs, self.settings.glossaries)
        except BaseException:
            for model in models:
                model.close()
            raise
        self.metrics.load_seconds.set(time.perf_counter() - started)
        self.metrics.models_loaded([(m.identity.id, m.identity.update, m.pairs) for m in fleet.models],
                                   fleet.memory_bytes)
        self.cards = {}
        return fleet

    def not_ready(self) -> str | None:
        """Why the server should get no new traffic now (loading, a failed load, a reload not yet
        warm, draining); None when ready."""
        if self.draining:
            return "draining: the server is stopping"
        if self.fleet is None:
            return f"model failed to load: {self.error}" if self.error else "model is loading"
        if self.reloading:
            return "reloading: the new models are loading (the old ones still answer)"
        return None

    def close(self) -> None:
        """Stop the models' batchers and workers (at shutdown); a load or reload still running closes
        its models when it finishes (`_install`)."""
        with self._swap_lock:
            self._closed = True
            fleet = self.fleet
        if fleet is not None:
            fleet.close()
