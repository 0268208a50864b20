"""What one server holds while it runs: a typed state on `app.state.serve` (the routes reach it
through `mt.serve.deps`).

The model loads in a background thread at start-up (`load`), so the server answers /health at
once; until the model is ready, `not_ready` says why (loading, or the one-line reason it failed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mt.errors import MTError
from mt.serve.detect import LanguageDetector
from mt.serve.limits import Limiter, read_keys_file
from mt.serve.metrics import Metrics
from mt.serve.model import ServedModel, load_served_model
from mt.serve.settings import ServeSettings

log = logging.getLogger(__name__)


@dataclass
class ServeState:
    """One server's settings (limits and API keys), metrics, web page and model (with its batcher)."""

    settings: ServeSettings
    checkpoints: tuple[Path, ...]  # what `-c` named
    metrics: Metrics
    page: bytes  # the web page at /, read once: a missing file fails at start-up, not per request
    model: ServedModel | None = None  # set once loaded and warmed up (after the detector)
    detector: LanguageDetector | None = None  # /detect and source "auto": over the model's languages
    error: str | None = None  # why the model failed to load
    card: dict[str, Any] | None = field(default=None, repr=False)  # /v1/model-card, built on first request
    limiter: Limiter = field(default_factory=Limiter, repr=False)  # per key or client address (`mt.serve.limits`)

    def reload_keys(self) -> None:
        """Re-read --api-keys (SIGHUP): the new keys and limits apply to the next request; a bad file
        logs one line and the old keys stay. The buckets are kept (by key name)."""
        path = self.settings.keys_file
        if path is None:
            log.info("serve: SIGHUP: no --api-keys file to re-read")
            return
        try:
            keys = read_keys_file(path)
        except MTError as e:
            log.error("serve: SIGHUP: keeping the old keys: %s", e)
            return
        self.settings = self.settings.with_keys(keys)
        log.info("serve: SIGHUP: %d keys from %s (%s)", len(keys.keys), path, ", ".join(k.name for k in keys.keys))

    def load(self) -> None:
        """Load the model, then the language detector over its languages (the start-up thread's job); a failure is kept for /ready and logged, the server stays up."""
        try:
            model = load_served_model(self.settings, self.checkpoints, self.metrics)
            try:
                self.detector = LanguageDetector(model.languages.all)
            except BaseException:
                model.close()
                raise
            self.model = model
        except Exception as e:  # noqa: BLE001 - reported by /ready and the log; the server stays up
            self.error = str(e)
            log.error("serve: loading the model failed: %s", e)

    def not_ready(self) -> str | None:
        """Why translation cannot start yet ("model is loading", or why loading failed); None when ready."""
        if self.model is not None:
            return None
        return f"model failed to load: {self.error}" if self.error else "model is loading"

    def close(self) -> None:
        """Stop the model's batcher and worker (at shutdown)."""
        if self.model is not None:
            self.model.close()
