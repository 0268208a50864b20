"""Operations: GET /health (liveness: the server answers, and every loaded model's batcher thread
and worker process are running: 503 naming the one that is not), GET /ready (readiness: every
model is loaded and warmed up; 503 while loading, while a reload's new models load, and once a
stop signal came) and GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from mt.serve.deps import StateDep

router = APIRouter()


@router.get("/health", summary="Liveness: the server, its batcher threads and its model worker processes run")
async def health(state: StateDep) -> JSONResponse:
    problem = state.fleet.problem() if state.fleet is not None else None  # loading is not a failure
    if problem is not None:
        return JSONResponse({"status": "unhealthy", "error": problem}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/ready", summary="Readiness: the models are loaded and warmed up, no reload or stop under way")
async def ready(state: StateDep) -> JSONResponse:
    why = state.not_ready()
    if why is not None or state.fleet is None:  # a plain 503, without the translate routes' Retry-After
        return JSONResponse({"error": why or "model is loading"}, status_code=503)
    body: dict[str, object] = {"status": "ready", "models": state.fleet.summaries()}
    if len(state.fleet.models) == 1:
        body["model"] = state.fleet.models[0].identity.summary()
    return JSONResponse(body)


@router.get("/metrics", summary="Prometheus metrics")
async def prometheus(state: StateDep) -> Response:
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
