"""The FastAPI app: LibreTranslate-compatible /translate and /languages, mt's own /v1 API, and
operations routes (/health, /ready, /metrics, /docs).

`create_app(settings, checkpoints)` returns the app; the model is loaded (`load_engine`, what
`mt translate -c` takes, in a process of its own: `mt.serve.worker`) and warmed up in a background
thread at start-up, so /health answers at once and /ready turns 200 when translation can start
(translate routes answer 503 until then).
Every translate request is read with a byte limit, checked (`mt.serve.requests`), its lines
queued on the `Batcher`, and awaited without blocking the event loop; a client that goes away
or waits past --timeout has its segments dropped from the queue. Errors are always
`{"error": "..."}` with the right status; access logging and request metrics are a small ASGI
middleware (`mt.serve.access`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from mt.config import Config, DecodeConfig
from mt.data.pairs import tokenizer_for_target
from mt.data.tokenizer import Tokenizer
from mt.deploy.loading import weight_files
from mt.errors import MTError
from mt.serve.access import AccessMiddleware
from mt.serve.batcher import Batcher, Hyps, QueueFull
from mt.serve.metrics import Metrics
from mt.serve.requests import (
    LT_SCHEMA,
    V1_SCHEMA,
    ApiError,
    body_doc,
    check_key,
    check_known,
    check_size,
    form_fields,
    get_int,
    get_segments,
    get_str,
    get_texts,
    parse_fields,
    v1_decode,
)
from mt.serve.settings import ServeSettings
from mt.serve.worker import ModelProcess
from mt.textio import sha256_file

log = logging.getLogger(__name__)

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian",
                  "pt": "Portuguese", "nl": "Dutch", "ru": "Russian", "zh": "Chinese", "ja": "Japanese",
                  "ko": "Korean", "ar": "Arabic", "pl": "Polish", "tr": "Turkish", "uk": "Ukrainian"}
STATIC = Path(__file__).resolve().parent / "static"  # index.html, shipped as package data
TRANSLATE_ROUTES = ("/translate", "/v1/translate")


@dataclasses.dataclass
class Model:
    """The loaded model and what the routes need from it."""

    engine: ModelProcess
    batcher: Batcher
    cfg: Config
    decode: DecodeConfig  # the server's default: checkpoint decode settings, server beam and batch budget
    max_beam: int
    model_id: str
    update: int
    tokenizer: Tokenizer  # the checkpoint's; a multi-pair model's adds a target tag (`for_target`)
    pairs: list[tuple[str, str]]  # (source, target) languages served: one, or a multi-pair model's pairs
    samples: bool  # /v1's sampling works (mt's own models; an exported CTranslate2 one only searches)


def load_model(settings: ServeSettings, checkpoints: Sequence[Path], metrics: Metrics) -> Model:
    """Load, identify and warm up the model behind `-c`; start its batcher."""
    started = time.perf_counter()
    shas = [sha256_file(path) for path in weight_files(checkpoints)]
    model_id = shas[0] if len(shas) == 1 else hashlib.sha256(" ".join(shas).encode()).hexdigest()
    engine = ModelProcess(checkpoints, settings.device, threads=settings.threads)
    tokenizer, cfg, update = engine.loaded.tokenizer, engine.loaded.cfg, engine.loaded.update
    max_beam = settings.max_beam or cfg.decode.beam
    decode = dataclasses.replace(cfg.decode, beam=max_beam, n_best=min(cfg.decode.n_best, max_beam),
                                 max_tokens=settings.max_batch_tokens or cfg.decode.max_tokens)
    batcher = Batcher(engine, tokenizer, max_wait_ms=settings.max_wait_ms, queue_size=settings.queue_size,
                      on_batch=metrics.on_batch, on_depth=metrics.on_depth,
                      open_requests=lambda: metrics.open_translations)
    warm = tokenizer.for_target(cfg.data.pairs[0].tgt_lang) if cfg.data.pairs else tokenizer
    try:
        batcher.submit(["Warm-up."], decode, n_best=None, tokenizer=warm).future.result()  # allocations, not a client
    except BaseException:
        batcher.stop()
        engine.close()
        raise
    seconds = time.perf_counter() - started
    metrics.load_seconds.set(seconds)
    log.info("serve: model %s (update %d, %s-%s, beam %d) ready in %.1f s", model_id[:12], update,
             cfg.data.src_lang, cfg.data.tgt_lang, max_beam, seconds)
    pairs = [(p.src_lang, p.tgt_lang) for p in cfg.data.pairs] or [(cfg.data.src_lang, cfg.data.tgt_lang)]
    return Model(engine, batcher, cfg, decode, max_beam, model_id, update, tokenizer, pairs, engine.loaded.samples)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def create_app(settings: ServeSettings, checkpoints: Sequence[Path]) -> FastAPI:
    """The server for `checkpoints` under `settings` (see the module docstring)."""
    metrics = Metrics()
    state: dict[str, Any] = {"model": None, "error": None}

    def load() -> None:
        try:
            state["model"] = load_model(settings, checkpoints, metrics)
        except Exception as e:  # noqa: BLE001 - reported by /ready and the log; the server stays up
            state["error"] = str(e)
            log.error("serve: loading the model failed: %s", e)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        threading.Thread(target=load, name="mt-serve-load", daemon=True).start()
        yield
        if state["model"] is not None:
            state["model"].batcher.stop()
            state["model"].engine.close()

    app = FastAPI(title="mt serve", version="1", lifespan=lifespan,
                  description="Machine translation with an mt model: LibreTranslate-compatible /translate "
                              "and /languages, and mt's own /v1/translate.")
    app.state.metrics = metrics
    app.state.model_state = state
    app.add_middleware(AccessMiddleware, metrics=metrics)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "X-API-Key"])

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.message, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return _error(400, f"{where or 'request'}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail), getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def crashed(request: Request, e: Exception) -> JSONResponse:
        log.exception("serve: %s %s failed", request.method, request.url.path)
        return _error(500, f"internal error: {type(e).__name__}")

    def ready_model() -> Model:
        if state["model"] is None:
            raise ApiError(503, f"model failed to load: {state['error']}" if state["error"] else "model is loading",
                           {"Retry-After": "1"})
        return state["model"]

    async def read_fields(request: Request) -> dict[str, Any]:
        """The body's fields, read with the byte limit (413) and within --timeout (408) before
        anything is parsed."""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise ApiError(413, f"body: {declared} bytes, the limit is {settings.max_body_bytes}")

        async def body() -> bytes:
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > settings.max_body_bytes:
                    raise ApiError(413, f"body: over {settings.max_body_bytes} bytes, the limit")
                chunks.append(chunk)
            return b"".join(chunks)

        try:  # a client trickling its body would otherwise hold its connection for ever
            raw = await asyncio.wait_for(body(), settings.timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(408, f"body: not received within {settings.timeout_s:g} s (--timeout)") from None
        content_type = request.headers.get("content-type", "")
        if content_type.lower().startswith("multipart/form-data"):
            request._body = raw  # let Starlette's parser read what we already took off the wire
            form = await request.form()
            return form_fields(form.multi_items())
        return parse_fields(raw, content_type)

    def target_tokenizer(model: Model, target: str | None, field: str) -> Tokenizer:
        """The tokenizer that makes the model translate into `target` (a multi-pair model's tag in
        front); a target the model does not know is a 400 naming the ones it knows."""
        try:
            return tokenizer_for_target(model.tokenizer, model.cfg, target, flag=field)
        except MTError as e:
            raise ApiError(400, str(e)) from None

    async def translate(request: Request, model: Model, texts: list[str], decode: DecodeConfig,
                        n_best: int | None, tokenizer: Tokenizer) -> tuple[list[Hyps], list[str]]:
        """Each text's outputs, its lines translated and joined back with '\\n' (k-th outputs line by line)."""
        lines = check_size(texts, settings)
        flat = [line for text_lines in lines for line in text_lines]
        try:
            job = model.batcher.submit(flat, decode, n_best=n_best, tokenizer=tokenizer)
        except QueueFull as e:
            raise ApiError(429, f"queue full ({e}); retry later", {"Retry-After": "1"}) from None
        waiter = asyncio.ensure_future(asyncio.wrap_future(job.future))
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({waiter, gone}, timeout=settings.timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if waiter not in done:
            model.batcher.cancel(job)
            waiter.cancel()
            if gone in done:
                raise ApiError(499, "client closed the request")
            raise ApiError(503, f"request waited more than --timeout {settings.timeout_s:g} s; retry later",
                           {"Retry-After": "5"})
        found = waiter.result()
        out, at = [], 0
        for text_lines in lines:
            per_line = found[at:at + len(text_lines)]
            at += len(text_lines)
            k = max(len(h) for h in per_line)
            out.append([("\n".join(h[min(i, len(h) - 1)][0] for h in per_line),
                         _mean([h[min(i, len(h) - 1)][1] for h in per_line])) for i in range(k)])
        return out, job.warnings

    def key_of(request: Request, fields: dict[str, Any]) -> str | None:
        header = request.headers.get("x-api-key")
        given = fields.get("api_key")
        return header if header else (given if isinstance(given, str) else None)

    # ------------------------------------------------------------------ LibreTranslate API

    @app.post("/translate", summary="Translate (LibreTranslate-compatible; JSON or form data)",
              openapi_extra=body_doc(LT_SCHEMA, form=True))
    async def lt_translate(request: Request) -> JSONResponse:
        fields = await read_fields(request)
        check_key(key_of(request, fields), settings)
        model = ready_model()
        texts, as_list = get_texts(fields, "q")
        source, target = get_str(fields, "source"), get_str(fields, "target")
        fmt = get_str(fields, "format", required=False, default="text")
        if fmt not in ("text", ""):
            raise ApiError(400, f"format {fmt!r}: not supported; only \"text\" (send plain text, not HTML)")
        sources = list(dict.fromkeys(s for s, _ in model.pairs))
        if source == "auto" and len(sources) > 1:
            raise ApiError(400, f"source auto: this model translates from {', '.join(sources)}; name the source language")
        src = sources[0] if source == "auto" else source
        if (src, target) not in model.pairs:
            served = ", ".join(f"{s}-{t}" for s, t in model.pairs)
            raise ApiError(400, f"language pair {source}-{target}: not served; this model translates {served}")
        tokenizer = target_tokenizer(model, target, "target")
        alternatives = get_int(fields, "alternatives", low=0) or 0
        if alternatives > settings.max_alternatives:
            raise ApiError(400, f"alternatives: at most {settings.max_alternatives} on this server, got {alternatives}")
        decode, n_best = model.decode, None
        if alternatives:
            n_best = alternatives + 1
            decode = dataclasses.replace(decode, n_best=n_best, beam=max(decode.beam, n_best), sampling=False)
        found, _ = await translate(request, model, texts, decode, n_best, tokenizer)
        best = [hyps[0][0] for hyps in found]
        body: dict[str, Any] = {"translatedText": best if as_list else best[0]}
        if alternatives:
            alts = [[text for text, _ in hyps[1:]] for hyps in found]
            body["alternatives"] = alts if as_list else alts[0]
        if source == "auto":
            body["detectedLanguage"] = ([{"confidence": 100.0, "language": src}] * len(texts) if as_list
                                        else {"confidence": 100.0, "language": src})
        return JSONResponse(body)

    @app.get("/languages", summary="Languages (LibreTranslate shape)")
    async def languages() -> JSONResponse:
        model = ready_model()
        sources = dict.fromkeys(s for s, _ in model.pairs)
        return JSONResponse([{"code": src, "name": LANGUAGE_NAMES.get(src, src),
                              "targets": [t for s, t in model.pairs if s == src]} for src in sources])

    # ------------------------------------------------------------------ mt's own API

    @app.post("/v1/translate", summary="Translate segments with decoding options (mt's API)",
              openapi_extra=body_doc(V1_SCHEMA, form=False))
    async def v1_translate(request: Request) -> JSONResponse:
        fields = await read_fields(request)
        check_key(key_of(request, fields), settings)
        model = ready_model()
        check_known(fields, V1_SCHEMA, "/v1/translate")
        segments = get_segments(fields)
        decode, n_best = v1_decode(fields, model.decode, settings, model.max_beam, samples=model.samples)
        target = get_str(fields, "target", required=False) or None  # required when the model has several
        found, notes = await translate(request, model, segments, decode, n_best,
                                       target_tokenizer(model, target, "target"))
        rows = []
        for hyps in found:
            score = hyps[0][1] if n_best is not None else None
            row: dict[str, Any] = {"text": hyps[0][0], "score": _finite(score)}
            if n_best is not None:
                row["n_best"] = [{"text": text, "score": _finite(s)} for text, s in hyps]
            rows.append(row)
        return JSONResponse({"translations": rows, "model": {"id": model.model_id, "update": model.update},
                             "warnings": notes})

    @app.get("/v1/settings", summary="The server's limits and language pairs")
    async def v1_settings() -> JSONResponse:
        model = ready_model()
        return JSONResponse({"char_limit": settings.char_limit, "max_segments": settings.max_segments,
                             "max_beam": model.max_beam, "max_alternatives": settings.max_alternatives,
                             "keys_required": settings.keys_required, "sampling": model.samples,
                             "languages": [{"source": s, "target": t} for s, t in model.pairs]})

    # ------------------------------------------------------------------ operations

    @app.get("/health", summary="Liveness")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/ready", summary="Readiness: the model is loaded and warmed up")
    async def ready() -> JSONResponse:
        if state["model"] is None:
            return _error(503, f"model failed to load: {state['error']}" if state["error"] else "model is loading")
        return JSONResponse({"status": "ready", "model": {"id": state["model"].model_id,
                                                          "update": state["model"].update}})

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ------------------------------------------------------------------ the web page and its model card

    page = (STATIC / "index.html").read_bytes()  # read once: a missing file fails at start-up, not per request

    @app.get("/", summary="The translation web page", include_in_schema=False)
    async def index() -> Response:
        return Response(page, media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    @app.get("/v1/model-card", summary="The model card (what `mt export` writes as MODEL_CARD.md), as JSON")
    async def v1_model_card() -> JSONResponse:
        model = ready_model()
        if state.get("card") is None:  # built once, off the event loop (reads the checkpoint and eval/)
            card = await asyncio.to_thread(model.engine.loaded.provenance.card_source.card)  # no checkpoint read here
            card["ensemble"] = [str(path) for path in checkpoints] if len(checkpoints) > 1 else []
            card["model_id"] = model.model_id
            state["card"] = card
        return JSONResponse(state["card"])

    return app


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (the body is already read, so the next ASGI message is
    http.disconnect; uvicorn sends it when the connection closes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
