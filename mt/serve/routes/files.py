"""LibreTranslate's file translation: POST /translate_file and GET /download_file/<name>.

As LibreTranslate answers them (its app.py and tests): multipart form data with `file`, `source`
(a code or "auto"), `target` and `api_key`; 200 `{"translatedFileUrl": "<server>/download_file/<name>"}`;
400 for a missing file, source or target, an empty file name, a format not supported, a language
not served, or a file that cannot be read (`mt.text.documents`: damaged, over its limits); 413
for a body over --max-file-bytes; 403 (translate) / 400 (download) with --no-files. The
character limit (--char-limit) does not apply to files, as in LibreTranslate; the file's own
limits (`DocumentLimits`: size, paragraphs, zip contents) do. GET /download_file/<name> answers the
file as an attachment under its own name (`mt.serve.filestore`), 400 "Invalid filename" for a
name that is not one of the store's, 404 once it has expired.

The document's texts go to the model's batcher as any request's do, in jobs of at most
--max-segments lines (`file_translators`: the one place the server builds the two translate
callables a document needs).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from mt.decode.terms import TermConstraints
from mt.serve.deps import ReadyFleet, StateDep, admit, read_body
from mt.serve.filestore import NAME
from mt.serve.jobs import translate_texts_scored
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError, check_text
from mt.serve.settings import ServeSettings
from mt.text.documents import EXTENSIONS, MEDIA_TYPES, document_texts, format_of, translate_document
from mt.text.html import HtmlFragment, render_fragments
from mt.text.limits import DocumentError, DocumentLimits
from mt.text.protect import span_links

Translate = Callable[[list[str]], list[str]]
Scored = Callable[[list[str]], list[tuple[str, float]]]  # texts -> (translation, confidence) each
DISABLED = "Files translation are disabled on this server."  # LibreTranslate's words
FORM_SLACK = 64 << 10  # multipart boundaries and the text fields around the file

router = APIRouter()
UPLOAD_DOC = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "source", "target"],
    "properties": {"file": {"type": "string", "format": "binary", "description": "the document or subtitles"},
                   "source": {"type": "string", "example": "en", "description": "a language code, or auto"},
                   "target": {"type": "string", "example": "de"}, "api_key": {"type": "string"}}}}}}}


def supported_formats() -> list[str]:
    """The file extensions /frontend/settings lists (`supportedFilesFormat`, with their dots as
    LibreTranslate's)."""
    return list(EXTENSIONS)


async def _read_form(request: Request, settings: ServeSettings) -> tuple[dict[str, str], UploadFile | None]:
    """The form's text fields and its `file` (400 for a body that is not multipart form data)."""
    raw = await read_body(request, settings.max_file_bytes + FORM_SLACK, settings.timeout_s)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ApiError(400, "Invalid request: send the file as multipart/form-data "
                            "(fields file, source, target)")
    request._body = raw
    try:
        form = await request.form(max_part_size=settings.max_file_bytes + FORM_SLACK)
    except Exception as e:  # a malformed multipart body: Starlette's parser's own error types vary by version
        raise ApiError(400, f"body: not readable multipart form data ({e})") from None
    fields = {key: check_text(value, key) for key, value in form.multi_items() if isinstance(value, str)}
    upload = form.get("file")
    return fields, upload if isinstance(upload, UploadFile) else None


def file_translators(request: Request, model: ServedModel, settings: ServeSettings, source: str, target: str,
                     loop: asyncio.AbstractEventLoop, terms: TermConstraints | None = None,
                     ) -> tuple[Translate, Translate, Scored]:
    """The callables `translate_document` calls (from a worker thread) for one file: plain texts
    through the model's batcher (jobs of at most --max-segments lines; the request's character and
    segment limits do not apply to files), HTML fragments, their blocks through the same, and plain
    texts with their confidences (a .po's or XLIFF's low-confidence notes). `terms`: the pair's
    default glossary (`mt serve --glossary`), kept in every sentence."""
    tokenizer = model.tokenizer_for(target, "target")
    unlimited = dataclasses.replace(settings, char_limit=1 << 62, max_segments=1 << 62)

    def translate_job(texts: list[str]) -> list[tuple[str, float]]:
        coroutine = translate_texts_scored(request, model, unlimited, texts, model.decode, None, tokenizer,
                                           source, terms=terms)
        hyps, _, sure = asyncio.run_coroutine_threadsafe(coroutine, loop).result()
        return [(found[0][0], confidence) for found, confidence in zip(hyps, sure)]

    def translate_scored_sync(texts: list[str]) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        chunk: list[str] = []
        lines = 0
        for text in [*texts, None]:
            count = text.count("\n") + 1 if text is not None else 0
            if chunk and (text is None or lines + count > settings.max_segments):
                out.extend(translate_job(chunk))
                chunk, lines = [], 0
            if text is not None:
                chunk.append(text)
                lines += count
        return out

    def translate_texts_sync(texts: list[str]) -> list[str]:
        return [text for text, _ in translate_scored_sync(texts)]

    def translate_html(fragments: list[str]) -> list[str]:  # inline markup placed by alignment, in the worker
        parsed = [HtmlFragment(markup) for markup in fragments]
        translations = translate_texts_sync([block for fragment in parsed for block in fragment.blocks])
        return render_fragments(parsed, translations, span_links(
            lambda sources, targets: model.engine.align(list(tokenizer.src_prefix), sources, targets),
            model.decode.text.protect))

    return translate_texts_sync, translate_html, translate_scored_sync


async def files_on(state: StateDep) -> None:
    """403 with --no-files, before the body is read or the models are asked for (as LibreTranslate)."""
    if not state.settings.files:
        raise ApiError(403, DISABLED)


@router.post("/translate_file", summary="Translate a file (LibreTranslate-compatible; multipart form data)",
             dependencies=[Depends(files_on)], openapi_extra=UPLOAD_DOC)
async def translate_file(request: Request, state: StateDep, fleet: ReadyFleet) -> JSONResponse:
    settings = state.settings
    fields, upload = await _read_form(request, settings)
    if upload is None:
        raise ApiError(400, "Invalid request: missing file parameter")
    for name in ("source", "target"):
        if not fields.get(name, "").strip():
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    if not upload.filename:
        raise ApiError(400, "Invalid request: empty file")
    fmt = format_of(upload.filename)
    if fmt is None:
        raise ApiError(400, "Invalid request: file format not supported "
                            f"(one of {', '.join(supported_formats())})")
    data = await upload.read()
    admit(request, state, fields.get("api_key"), len(data))  # a file costs its size in characters
    limits = DocumentLimits(max_bytes=settings.max_file_bytes)
    source, target = fields["source"], fields["target"]
    try:
        if source.strip().lower() == "auto":
            texts = await asyncio.to_thread(document_texts, data, fmt, limits)
            source = fleet.detector.detect("\n".join(texts)[:4096])["language"]
        model, served_target = fleet.for_pair(source, target)
        served_source = fleet.languages.match(source, "source", fleet.languages.sources)
        texts, html, scored = file_translators(request, model, settings, served_source, served_target,
                                       asyncio.get_running_loop(),
                                       fleet.terms.get((served_source, served_target)))
        translated = await asyncio.to_thread(translate_document, data, fmt, texts, html, limits,
                                             target=served_target, scored=scored)
    except DocumentError as e:
        raise ApiError(400, f"{upload.filename}: {e}") from None
    stem, dot, ext = upload.filename.rpartition(".")
    ext = "po" if ext.lower() == "pot" else ext  # a template comes back as the target's catalogue
    name = state.files.put(translated, MEDIA_TYPES[fmt],
                           f"{stem}.{served_target}.{ext}" if dot else upload.filename)
    return JSONResponse({"translatedFileUrl": f"{str(request.base_url).rstrip('/')}/download_file/{name}"})


@router.get("/download_file/{name}", summary="Download a translated file (LibreTranslate-compatible)")
async def download_file(name: str, state: StateDep) -> Response:
    if not state.settings.files:
        raise ApiError(400, DISABLED)
    if not NAME.match(name):
        raise ApiError(400, "Invalid filename")
    stored = state.files.get(name)
    if stored is None:
        raise ApiError(404, "file not found: translated files are kept 30 minutes")
    return Response(stored.data, media_type=stored.media_type,
                    headers={"Content-Disposition": f'attachment; filename="{stored.download_name}"'})


def frontend_files(settings: ServeSettings) -> dict[str, Any]:
    """/frontend/settings' file fields: `filesTranslation` and `supportedFilesFormat`."""
    return {"filesTranslation": settings.files,
            "supportedFilesFormat": supported_formats() if settings.files else []}

