"""Access log and request metrics: a plain ASGI middleware (no body buffering, so a client's
disconnect still reaches the route).

Each HTTP request gets an id (the client's X-Request-ID when it is a short token, else a new
one), echoed in the X-Request-ID response header, and one JSON log line on the
"mt.serve.access" logger: {"id", "method", "route", "status", "ms"}, and "key" (the API key's name)
when the request gave a valid key. Keys and bodies are never logged.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from mt.serve.metrics import Metrics

access_log = logging.getLogger("mt.serve.access")

TRANSLATE_ROUTES = frozenset({"/translate", "/v1/translate", "/v1/complete"})
KNOWN_ROUTES = frozenset({"/translate", "/languages", "/detect", "/frontend/settings", "/suggest",
                          "/translate_file", "/v1/translate", "/v1/complete", "/v1/settings", "/v1/models",
                          "/v1/model-card",
                          "/v1/admin/reload", "/health", "/ready", "/metrics", "/docs", "/redoc",
                          "/openapi.json", "/"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class AccessMiddleware:
    """Counts requests by route and status, times them, logs one line each; keeps the count of
    translate requests open (received, not yet answered) for the batcher."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex[:16]
        path = scope.get("path", "")
        route = (path if path in KNOWN_ROUTES
                 else "/download_file" if path.startswith("/download_file/") else "other")
        status = 500

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        translating = route in TRANSLATE_ROUTES
        if translating:  # counted from its first byte, so the batcher knows a request is on its way
            self.metrics.translate_started()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if translating:
                self.metrics.translate_ended(scope)
            seconds = time.perf_counter() - started
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            line = {"id": request_id, "method": scope.get("method"), "route": route, "status": status,
                    "ms": round(seconds * 1000, 1)}
            key = scope.get("mt.key")  # the key's name, set by the key check (`mt.serve.deps.require_key`)
            if key is not None:
                line["key"] = key
                self.metrics.key_requests.labels(key, route, str(status)).inc()
            access_log.info(json.dumps(line))
