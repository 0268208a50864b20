"""The FastAPI app: LibreTranslate-compatible /translate and /languages, mt's own /v1 API,
operations routes (/health, /ready, /metrics), the API reference (/docs, /redoc: no CDN) and the
web page at /.

`create_app(settings, specs)` assembles the server in the layout of FastAPI's full-stack
template: one `APIRouter` per API in `mt.serve.routes`, the dependencies they share in
`mt.serve.deps` (the state, the ready model, the request's fields, the key check), one typed state
on `app.state.serve` (`mt.serve.state.ServeState`), and here the error handlers, middleware and
lifespan. The models (one per `-c`, routed by language pair: `mt.serve.fleet`) are loaded
(`mt.serve.model`: each in a process of its own, `mt.serve.worker`) and warmed up in a background
thread at start-up, so /health answers at once and /ready turns 200 when translation can start
(translate routes answer 503 until then). Errors are always
`{"error": "..."}` with the right status; access logging and request metrics are a small ASGI
middleware (`mt.serve.access`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from mt.serve.access import AccessMiddleware
from mt.serve.metrics import Metrics
from mt.serve.requests import ApiError
from mt.serve.routes import docs, files, libretranslate, ops, page, v1
from mt.serve.settings import ServeSettings
from mt.serve.specs import Spec
from mt.serve.state import ServeState

log = logging.getLogger(__name__)


def create_app(settings: ServeSettings, specs: Sequence[Spec]) -> FastAPI:
    """The server for the models `specs` name (one per `-c`) under `settings` (see the module docstring)."""
    state = ServeState(settings, tuple(specs), Metrics(), page.read_page())
    app = FastAPI(title="mt serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Machine translation with mt models: LibreTranslate-compatible /translate "
                              "and /languages, and mt's own /v1/translate.")
    app.state.serve = state
    app.add_middleware(AccessMiddleware, metrics=state.metrics)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "X-API-Key", "Authorization"], max_age=86400)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, crashed)
    for router in (libretranslate.router, files.router, v1.router, ops.router, page.router, docs.router):
        app.include_router(router)
    app.mount(docs.ASSETS, StaticFiles(directory=docs.assets_folder()), name="docs-assets")  # no CDN
    return app


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load the models in a background thread (the server answers meanwhile); stop them at shutdown."""
    state: ServeState = app.state.serve
    threading.Thread(target=state.load, name="mt-serve-load", daemon=True).start()
    yield
    state.close()


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def api_error(request: Request, e: ApiError) -> JSONResponse:
    return _error(e.status, e.message, e.headers)


async def invalid_request(request: Request, e: RequestValidationError) -> JSONResponse:
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
    return _error(400, f"{where or 'request'}: {first.get('msg', 'invalid')}")


async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    return _error(e.status_code, str(e.detail), getattr(e, "headers", None))


async def crashed(request: Request, e: Exception) -> JSONResponse:
    log.exception("serve: %s %s failed", request.method, request.url.path)
    return _error(500, f"internal error: {type(e).__name__}")
