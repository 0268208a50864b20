"""LibreTranslate's API, as its clients (Mastodon, Weblate, libretranslatepy, browser add-ons,
LibreTranslate's own front end) call it: POST /translate (JSON or form data; `q` a string or a
list, `source` a code or "auto", `alternatives`, `format` "text" or "html": `mt.text.html`; every
text split into sentences by the source language's rules, `mt.text.segment`; more than
--char-limit characters a 400 in LibreTranslate's words), POST /detect, GET /languages, GET
/frontend/settings, and POST /suggest answering 403 as a LibreTranslate server with suggestions
off does (files: `mt.serve.routes.files`).

Codes are read by `ServedLanguages` (any case, aliases); a request goes to the model that serves
its pair (`mt.serve.fleet`). `source: "auto"` identifies each text's language (`mt.serve.detect`,
over the served languages; an HTML text by its text, not its markup), sends each text to the model
for its detected pair (texts for one model in one job), and answers `detectedLanguage`
({language, confidence} or, for a list `q`, one per text); a text detected in a language this
server does not translate into the target is a 400 naming it. The pair's `mt serve --glossary`,
if any, is kept (`mt.serve.glossary`); the request and response shapes stay LibreTranslate's, with one
extra key for `format` "text": `confidence`, each text's confidence in [0, 1] (`mt.decode.confidence`;
null where the model has no score), which LibreTranslate's clients ignore (libretranslatepy reads
`translatedText` alone; Mastodon and Weblate read the keys they know).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mt.serve.deps import Fields, ReadyFleet, RequireKey, SettingsDep
from mt.serve.detect import LanguageDetector
from mt.serve.fleet import Fleet
from mt.serve.jobs import translate_html, translate_texts_scored
from mt.serve.languages import language_name
from mt.serve.model import ServedModel
from mt.serve.requests import LT_SCHEMA, ApiError, body_doc, check_request, get_int, get_str, get_texts
from mt.serve.routes.files import frontend_files
from mt.text.html import HtmlFragment, HtmlTooDeep

FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default --frontend-timeout: the front end's typing delay

router = APIRouter()


@router.post("/translate", summary="Translate (LibreTranslate-compatible; JSON or form data)",
             openapi_extra=body_doc(LT_SCHEMA, form=True), dependencies=[RequireKey])
async def lt_translate(request: Request, fields: Fields, fleet: ReadyFleet,
                       settings: SettingsDep) -> JSONResponse:
    texts, as_list = get_texts(fields, "q")
    check_request(texts, settings)  # the limits hold before any parsing, detection or translation
    source, target = get_str(fields, "source"), get_str(fields, "target")
    fmt = get_str(fields, "format", required=False, default="text").strip().lower() or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"format {fmt!r}: not supported; \"text\" or \"html\"")
    fragments = await asyncio.to_thread(_parse_html, texts) if fmt == "html" else None
    detected = None
    if source.strip().lower() == "auto":
        plain = [fragment.text() for fragment in fragments] if fragments is not None else texts
        detected = await asyncio.to_thread(lambda: [fleet.detector.detect(text) for text in plain])
        routes = _auto_routes(fleet, detected, target)
        sources = [found["language"] for found in detected]
    else:
        routes = [fleet.for_pair(source, target)] * len(texts)
        sources = [fleet.languages.match(source, "source", fleet.languages.sources)] * len(texts)
    alternatives = get_int(fields, "alternatives", low=0) or 0
    if alternatives > settings.max_alternatives:
        raise ApiError(400, f"alternatives: at most {settings.max_alternatives} on this server, "
                            f"got {alternatives}")
    groups: dict[tuple[int, str, str], list[int]] = {}  # texts for one model, target and source: one job
    for i, (model, tgt) in enumerate(routes):
        groups.setdefault((id(model), tgt, sources[i]), []).append(i)
    best: list[str] = [""] * len(texts)
    alts: list[list[str]] = [[] for _ in texts]
    sure: list[float | None] = [None] * len(texts)  # text format only: an HTML fragment's blocks have several

    async def translate_group(indices: list[int]) -> None:
        (model, tgt), src = routes[indices[0]], sources[indices[0]]
        tokenizer = model.tokenizer_for(tgt, "target")
        terms = fleet.terms.get((src, tgt))  # the pair's --glossary, if any
        if fragments is not None:  # as LibreTranslate: no alternatives for HTML
            found = await translate_html(request, model, settings, [fragments[i] for i in indices],
                                         model.decode, tokenizer, src, terms)
            for i, text in zip(indices, found):
                best[i] = text
            return
        decode, n_best = model.decode, None
        if alternatives:
            n_best = alternatives + 1
            search = dataclasses.replace(decode.search, n_best=n_best, beam=max(decode.search.beam, n_best),
                                         sampling=False)
            decode = dataclasses.replace(decode, search=search)
        hyps, _, confidences = await translate_texts_scored(request, model, settings,
                                                            [texts[i] for i in indices], decode, n_best,
                                                            tokenizer, src, terms=terms)
        for i, text_hyps, confidence in zip(indices, hyps, confidences):
            best[i], alts[i] = text_hyps[0][0], [text for text, _ in text_hyps[1:]]
            sure[i] = confidence if math.isfinite(confidence) else None

    outcomes = await asyncio.gather(*(translate_group(indices) for indices in groups.values()),
                                    return_exceptions=True)
    for outcome in outcomes:  # every group has finished: the first failure is the answer
        if isinstance(outcome, BaseException):
            raise outcome
    body: dict[str, Any] = {"translatedText": best if as_list else best[0]}
    if alternatives:
        body["alternatives"] = alts if as_list else alts[0]
    if detected is not None:
        body["detectedLanguage"] = detected if as_list else detected[0]
    if fragments is None:  # an extra key: libretranslatepy, Mastodon and Weblate read only the ones they know
        body["confidence"] = sure if as_list else sure[0]
    return JSONResponse(body)


def _parse_html(texts: list[str]) -> list[HtmlFragment]:
    """Each text as an HTML fragment (in a thread: parsing a fragment at the character limit takes
    milliseconds); a 400 naming the text nested too deeply."""
    fragments = []
    for i, text in enumerate(texts):
        try:
            fragments.append(HtmlFragment(text))
        except HtmlTooDeep as e:
            raise ApiError(400, f"{f'q[{i}]' if len(texts) > 1 else 'q'}: {e}") from None
    return fragments


def _auto_routes(fleet: Fleet, detected: list[dict[str, Any]], target: str) -> list[tuple[ServedModel, str]]:
    """(the model, the served target) for each text of a `source: "auto"` request, once its
    language is known: a 400 naming a detected language no model translates into `target`."""
    tgt = fleet.languages.match(target, "target", fleet.languages.targets)
    sources = fleet.sources_into(tgt)
    routes = []
    for i, found in enumerate(detected):
        if found["language"] not in sources:
            where = f"q[{i}]" if len(detected) > 1 else "q"
            raise ApiError(400, f"source auto: {where} is {language_name(found['language'])} "
                                f"({found['language']}, confidence {found['confidence']:g}); "
                                f"this server translates into {tgt} from {', '.join(sources)}")
        routes.append(fleet.for_pair(found["language"], tgt))
    return routes


@router.post("/detect", summary="Detect the language of a text (LibreTranslate-compatible)",
             openapi_extra=body_doc({"type": "object", "required": ["q"], "properties": {
                 "q": LT_SCHEMA["properties"]["q"], "api_key": {"type": "string"}}}, form=True),
             dependencies=[RequireKey])
async def lt_detect(fields: Fields, fleet: ReadyFleet, settings: SettingsDep) -> JSONResponse:
    texts, _ = get_texts(fields, "q")  # a list is read as one text, as LibreTranslate averages over it
    # LibreTranslate has no limit here; mt keeps detection within the limits too
    check_request(texts, settings)
    return JSONResponse(await asyncio.to_thread(LanguageDetector.rank, fleet.detector, "\n".join(texts)))


@router.get("/languages", summary="Languages (LibreTranslate shape)")
async def languages(fleet: ReadyFleet) -> JSONResponse:
    return JSONResponse(fleet.languages.listing())  # every model's pairs


@router.get("/frontend/settings", summary="LibreTranslate's front-end settings")
async def frontend_settings(fleet: ReadyFleet, settings: SettingsDep) -> JSONResponse:
    """What LibreTranslate's web front end and add-ons read first: the limits, whether a key is
    needed, the languages it starts with (auto-detect into the first target) and the file formats
    (`mt.serve.routes.files`); suggestions are off (mt has none)."""
    target = fleet.languages.targets[0]
    return JSONResponse({
        "charLimit": settings.char_limit, "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": settings.keys_required, "keyRequired": settings.keys_required,
        "suggestions": False, **frontend_files(settings),
        "language": {"source": {"code": "auto", "name": "Auto Detect"},
                     "target": {"code": target, "name": language_name(target)}}})


@router.post("/suggest", summary="Suggestions are off (as a LibreTranslate server without --suggestions)")
async def suggest() -> JSONResponse:
    return JSONResponse({"error": "Suggestions are disabled on this server."}, status_code=403)

