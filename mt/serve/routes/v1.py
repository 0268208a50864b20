"""mt's own API under /v1: POST /v1/translate (segments with decoding options: beam, n_best,
sampling, a target for a multi-pair model; an unknown field is a 400), GET /v1/settings (the
server's limits and language pairs) and GET /v1/model-card (the web page's model panel)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mt.serve.deps import Fields, ReadyModel, RequireKey, SettingsDep, StateDep
from mt.serve.jobs import translate_texts
from mt.serve.model import model_card
from mt.serve.requests import V1_SCHEMA, body_doc, check_known, get_segments, get_str, v1_decode

router = APIRouter(prefix="/v1")


@router.post("/translate", summary="Translate segments with decoding options (mt's API)",
             openapi_extra=body_doc(V1_SCHEMA, form=False), dependencies=[RequireKey])
async def v1_translate(request: Request, fields: Fields, model: ReadyModel, settings: SettingsDep) -> JSONResponse:
    check_known(fields, V1_SCHEMA, "/v1/translate")
    segments = get_segments(fields)
    decode, n_best = v1_decode(fields, model.decode, settings, model.max_beam, samples=model.samples)
    target = get_str(fields, "target", required=False) or None  # required when the model has several
    found, notes = await translate_texts(request, model, settings, segments, decode, n_best,
                                         model.tokenizer_for(target, "target"))
    rows = []
    for hyps in found:
        score = hyps[0][1] if n_best is not None else None
        row: dict[str, Any] = {"text": hyps[0][0], "score": _finite(score)}
        if n_best is not None:
            row["n_best"] = [{"text": text, "score": _finite(s)} for text, s in hyps]
        rows.append(row)
    return JSONResponse({"translations": rows, "model": model.identity.summary(), "warnings": notes})


@router.get("/settings", summary="The server's limits and language pairs")
async def v1_settings(model: ReadyModel, settings: SettingsDep) -> JSONResponse:
    return JSONResponse({"char_limit": settings.char_limit, "max_segments": settings.max_segments,
                         "max_beam": model.max_beam, "max_alternatives": settings.max_alternatives,
                         "keys_required": settings.keys_required, "sampling": model.samples,
                         "languages": [{"source": s, "target": t} for s, t in model.pairs]})


@router.get("/model-card", summary="The model card (what `mt export` writes as MODEL_CARD.md), as JSON")
async def v1_model_card(model: ReadyModel, state: StateDep) -> JSONResponse:
    if state.card is None:  # built once, off the event loop (reads the run's eval/ reports)
        state.card = await asyncio.to_thread(model_card, model.identity)
    return JSONResponse(state.card)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
