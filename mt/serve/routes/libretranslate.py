"""LibreTranslate's API, as its clients (Mastodon, Weblate, libretranslatepy, browser add-ons)
call it: POST /translate (JSON or form data; `q` a string or a list, `source` may be "auto",
`alternatives`, `format` "text" or "html": `mt.serve.html`) and GET /languages."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mt.serve.deps import Fields, ReadyModel, RequireKey, SettingsDep
from mt.serve.html import HtmlFragment
from mt.serve.jobs import translate_html, translate_texts
from mt.serve.requests import LT_SCHEMA, ApiError, body_doc, get_int, get_str, get_texts

router = APIRouter()


@router.post("/translate", summary="Translate (LibreTranslate-compatible; JSON or form data)",
             openapi_extra=body_doc(LT_SCHEMA, form=True), dependencies=[RequireKey])
async def lt_translate(request: Request, fields: Fields, model: ReadyModel, settings: SettingsDep) -> JSONResponse:
    texts, as_list = get_texts(fields, "q")
    source, target = get_str(fields, "source"), get_str(fields, "target")
    fmt = get_str(fields, "format", required=False, default="text").strip().lower() or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"format {fmt!r}: not supported; \"text\" or \"html\"")
    fragments = [HtmlFragment(text) for text in texts] if fmt == "html" else None
    sources = model.languages.sources
    if source == "auto" and len(sources) > 1:
        raise ApiError(400, f"source auto: this model translates from {', '.join(sources)}; name the source language")
    src, tgt = model.languages.pair(sources[0] if source == "auto" else source, target)
    tokenizer = model.tokenizer_for(tgt, "target")
    alternatives = get_int(fields, "alternatives", low=0) or 0
    if alternatives > settings.max_alternatives:
        raise ApiError(400, f"alternatives: at most {settings.max_alternatives} on this server, got {alternatives}")
    decode, n_best = model.decode, None
    if alternatives:
        n_best = alternatives + 1
        decode = dataclasses.replace(decode, n_best=n_best, beam=max(decode.beam, n_best), sampling=False)
    if fragments is not None:  # as LibreTranslate: no alternatives for HTML
        best = await translate_html(request, model, settings, fragments, model.decode, tokenizer)
        alts: list[list[str]] = [[] for _ in texts]
    else:
        found, _ = await translate_texts(request, model, settings, texts, decode, n_best, tokenizer)
        best, alts = [hyps[0][0] for hyps in found], [[text for text, _ in hyps[1:]] for hyps in found]
    body: dict[str, Any] = {"translatedText": best if as_list else best[0]}
    if alternatives:
        body["alternatives"] = alts if as_list else alts[0]
    if source == "auto":
        body["detectedLanguage"] = ([{"confidence": 100.0, "language": src}] * len(texts) if as_list
                                    else {"confidence": 100.0, "language": src})
    return JSONResponse(body)


@router.get("/languages", summary="Languages (LibreTranslate shape)")
async def languages(model: ReadyModel) -> JSONResponse:
    return JSONResponse(model.languages.listing())
