"""Operations: GET /health (liveness: the server answers), GET /ready (the model is loaded and
warmed up; 503 until then) and GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from mt.serve.deps import StateDep

router = APIRouter()


@router.get("/health", summary="Liveness")
async def health() -> JSONResponse:
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
