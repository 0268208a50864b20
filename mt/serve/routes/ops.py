"""Operations: GET /health (liveness: the server answers, and a loaded model's batcher thread and
worker process are running: 503 naming the one that is not), GET /ready (the model is loaded and
warmed up; 503 until then) and GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from mt.serve.deps import StateDep

router = APIRouter()


@router.get("/health", summary="Liveness: the server, its batcher thread and its model worker process run")
async def health(state: StateDep) -> JSONResponse:
    problem = state.model.problem() if state.model is not None else None  # loading is not a failure
    if problem is not None:
        return JSONResponse({"status": "unhealthy", "error": problem}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/ready", summary="Readiness: the model is loaded and warmed up")
async def ready(state: StateDep) -> JSONResponse:
    model = state.model
    if model is None:  # a plain 503, without the translate routes' Retry-After
        return JSONResponse({"error": state.not_ready() or "model is loading"}, status_code=503)
    return JSONResponse({"status": "ready", "model": model.identity.summary()})


@router.get("/metrics", summary="Prometheus metrics")
async def prometheus(state: StateDep) -> Response:
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
