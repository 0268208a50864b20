"""mt's own API under /v1: POST /v1/translate (segments with decoding options: beam, n_best,
each answered with its text, score (with n_best) and confidence in [0, 1] (`mt.decode.confidence`),
sampling, the pair's source and target when the server has several models or a multi-pair model;
each segment split into sentences by the source language's rules unless `segment: false`; a
`glossary` of terms to keep, replacing the server's `--glossary` for the pair (`mt.serve.glossary`);
an unknown field is a 400), POST /v1/complete (a translator's typed prefix continued and the
alternatives for the next word: issue 73), GET /v1/settings (the server's limits and language pairs),
GET /v1/models (each model's id, update, pairs and files), GET /v1/model-card (the web page's model
panel; `?model=ID` picks one of several) and POST /v1/admin/reload (an admin key: load the
checkpoints again without dropping a request, `mt.serve.state`)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mt.decode.confidence import LOW
from mt.errors import MTError
from mt.serve.deps import Fields, ReadyFleet, RequireAdmin, RequireKey, SettingsDep, StateDep
from mt.serve.glossary import request_glossary, request_terms
from mt.serve.jobs import complete_text, translate_texts_scored
from mt.serve.model import ServedModel, model_card
from mt.serve.requests import (
    COMPLETE_ANSWER,
    COMPLETE_SCHEMA,
    V1_SCHEMA,
    ApiError,
    body_doc,
    check_known,
    check_request,
    get_bool,
    get_int,
    get_prefix,
    get_segments,
    get_str,
    v1_decode,
)
from mt.serve.state import ReloadBusy

router = APIRouter(prefix="/v1")


@router.post("/translate", summary="Translate segments with decoding options (mt's API)",
             openapi_extra=body_doc(V1_SCHEMA, form=False), dependencies=[RequireKey])
async def v1_translate(request: Request, fields: Fields, fleet: ReadyFleet,
                       settings: SettingsDep) -> JSONResponse:
    check_known(fields, V1_SCHEMA, "/v1/translate")
    segments = get_segments(fields)
    check_request(segments, settings)  # before any work
    glossary = request_glossary(fields, settings.max_glossary_terms)  # its size too
    source = get_str(fields, "source", required=False) or None
    target = get_str(fields, "target", required=False) or None  # required when the model has several
    model = fleet.for_request(source, target)
    decode, n_best = v1_decode(fields, model.decode, settings, model.max_beam, samples=model.samples)
    tokenizer, pair = model.tokenizer_for(target, "target"), _pair(model, source, target)
    terms = request_terms(model, glossary, fleet.terms.get(pair), pair, decode.search.sampling)
    found, notes, sure = await translate_texts_scored(request, model, settings, segments, decode, n_best,
                                                      tokenizer, pair[0],
                                                      segment=get_bool(fields, "segment", True), terms=terms)
    rows = []
    for hyps, confidence in zip(found, sure):
        score = hyps[0][1] if n_best is not None else None
        row: dict[str, Any] = {"text": hyps[0][0], "score": _finite(score), "confidence": _finite(confidence)}
        if n_best is not None:
            row["n_best"] = [{"text": text, "score": _finite(s)} for text, s in hyps]
        rows.append(row)
    return JSONResponse({"translations": rows, "model": model.identity.summary(), "warnings": notes})


@router.post("/complete", summary="Complete what a translator has typed, with alternatives for the next word",
             openapi_extra=body_doc(COMPLETE_SCHEMA, form=False, answer=COMPLETE_ANSWER),
             dependencies=[RequireKey])
async def v1_complete(request: Request, fields: Fields, fleet: ReadyFleet,
                      settings: SettingsDep) -> JSONResponse:
    """`q` translated continuing `prefix` (the target text typed so far) exactly as typed, and
    `alternatives` K words for the position after it, each continued to a whole translation with its
    probability (CTranslate2's alternatives at a position); source, target and beam as /v1/translate's.
    Batched and cached as every route (`mt.serve.jobs.complete_text`)."""
    check_known(fields, COMPLETE_SCHEMA, "/v1/complete")
    text = get_str(fields, "q")
    if "\n" in text or "\r" in text:
        raise ApiError(400, "q: holds a line break; /v1/complete continues one line (one request a line)")
    prefix = get_prefix(fields)
    k = get_int(fields, "alternatives", low=0, high=settings.max_alternatives) or 0
    source = get_str(fields, "source", required=False) or None
    target = get_str(fields, "target", required=False) or None
    model = fleet.for_request(source, target)
    decode, _ = v1_decode(fields, model.decode, settings, model.max_beam, samples=model.samples)  # beam only
    if (prefix.strip() or k) and decode.search.sampling:
        raise ApiError(400, "prefix: a typed prefix is continued by a search; this server samples")
    if prefix.strip() and not model.constrains:
        raise ApiError(400, "prefix: this server runs an `mt export` (CTranslate2) model, which cannot "
                            "continue a typed prefix yet; serve the .pt checkpoint")
    if k and not model.samples:
        raise ApiError(400, "alternatives: this server runs an `mt export` (CTranslate2) model, which cannot "
                            "rank next words; serve the .pt checkpoint")
    tokenizer, pair = model.tokenizer_for(target, "target"), _pair(model, source, target)
    terms = request_terms(model, None, fleet.terms.get(pair), pair, decode.search.sampling)
    done = await complete_text(request, model, settings, text, prefix, k, decode, tokenizer, pair,
                               terms=terms)
    return JSONResponse({"translation": done.translation,
                         "alternatives": [{"text": t, "probability": p} for t, p in done.alternatives],
                         "confidence": _finite(done.confidence)})


@router.get("/settings", summary="The server's limits and language pairs")
async def v1_settings(fleet: ReadyFleet, settings: SettingsDep) -> JSONResponse:
    return JSONResponse({"char_limit": settings.char_limit, "max_segments": settings.max_segments,
                         "max_beam": min(model.max_beam for model in fleet.models),
                         "max_alternatives": settings.max_alternatives,
                         "keys_required": settings.keys_required,
                         "sampling": all(model.samples for model in fleet.models),
                         "glossary": all(model.constrains for model in fleet.models),
                         "max_glossary_terms": settings.max_glossary_terms, "low_confidence": LOW,
                         "languages": [{"source": s, "target": t} for s, t in fleet.languages.pairs]})


@router.get("/models", summary="The models served: id (sha256), update, language pairs, files")
async def v1_models(fleet: ReadyFleet) -> JSONResponse:
    return JSONResponse({"models": fleet.describe()})


@router.get("/model-card", summary="A model's card (what `mt export` writes as MODEL_CARD.md), as JSON")
async def v1_model_card(fleet: ReadyFleet, state: StateDep, model: str = "") -> JSONResponse:
    """The card of the model whose id starts with `model` (default: the first -c model)."""
    served = fleet.find(model) if model else fleet.models[0]
    card = state.cards.get(served.identity.id)
    if card is None:  # built once per model, off the event loop (reads the run's eval/ reports)
        card = state.cards[served.identity.id] = await asyncio.to_thread(model_card, served.identity)
    return JSONResponse(card)


@router.post("/admin/reload", summary="Load the -c checkpoints again (admin key): no request is dropped",
             dependencies=[RequireAdmin])
async def v1_reload(state: StateDep) -> JSONResponse:
    """Re-read the keys file and the checkpoints, swap when the new models are warm; 409 while
    another reload runs, 500 (the old models keep serving) when one fails to load."""
    try:
        fleet = await asyncio.to_thread(state.reload, "POST /v1/admin/reload")
    except ReloadBusy as e:
        raise ApiError(409, str(e)) from None
    except MTError as e:
        raise ApiError(500, str(e)) from None
    return JSONResponse({"status": "reloaded", "models": fleet.summaries()})


def _pair(model: ServedModel, source: str | None, target: str | None) -> tuple[str, str]:
    """The (source, target) pair a request is translated as: its source language (whose sentence
    rules split the request and whose glossary applies) is `source` as the model serves it, else the
    source of the model's first pair (into `target`, when given); its target likewise."""
    languages = model.languages
    tgt = languages.find(target, languages.targets) if target else None
    src = languages.match(source, "source", languages.sources) if source else None
    return next(((s, t) for s, t in model.pairs if src in (None, s) and tgt in (None, t)),
                (src or model.pairs[0][0], tgt or model.pairs[0][1]))


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
