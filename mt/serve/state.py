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

from mt.serve.detect import LanguageDetector
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
