"""A translate request's job on the batcher: what `/translate` and `/v1/translate` share.

The texts are split into lines and checked against the limits (413); the lines the model's
translation cache holds are answered from it (`mt.serve.cache`), the others queued on the model's
`Batcher` (429 when the queue is full) and awaited without blocking the event loop; a client that
goes away (499) or waits past --timeout (503) has its segments dropped from the queue.
`translate_html` does the same for HTML fragments: their blocks' text as segments, markup kept.
"""

from __future__ import annotations

import asyncio
from typing import cast

from fastapi import Request

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.errors import MTError
from mt.serve.batcher import Hyps, Job, QueueFull
from mt.serve.cache import Cached, Key
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError, check_size
from mt.serve.settings import ServeSettings
from mt.text.html import HtmlFragment, render_fragments


async def translate_texts(request: Request, model: ServedModel, settings: ServeSettings, texts: list[str],
                          decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                          ) -> tuple[list[Hyps], list[str]]:
    """(each text's outputs, the job's warnings): its lines translated and joined back with '\\n'
    (k-th outputs line by line, scored by the mean of the lines' scores). Lines in the model's
    cache (`mt.serve.cache`) are answered from it; only the others go to the batcher."""
    lines = check_size(texts, settings)
    flat = [line for text_lines in lines for line in text_lines]
    keys = [segment_key(model, decode, n_best, tokenizer, line) for line in flat]
    answers = model.cache.lookup(keys)
    todo = [i for i, answer in enumerate(answers) if answer is None]
    if todo:
        job = await _run_job(request, model, settings, [flat[i] for i in todo], decode, n_best, tokenizer)
        for i, hyps, cut in zip(todo, job.future.result(), job.cut):
            answers[i] = Cached(hyps, cut)
            model.cache.store(keys[i], answers[i])
    done = cast(list[Cached], answers)  # every line answered now
    found = [answer.hyps for answer in done]
    notes = model.batcher.cut_warning(sum(answer.cut for answer in done), len(flat))
    out, at = [], 0
    for text_lines in lines:
        per_line = found[at:at + len(text_lines)]
        at += len(text_lines)
        k = max(len(h) for h in per_line)
        out.append([("\n".join(h[min(i, len(h) - 1)][0] for h in per_line),
                     _mean([h[min(i, len(h) - 1)][1] for h in per_line])) for i in range(k)])
    return out, notes


def segment_key(model: ServedModel, decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                line: str) -> Key | None:
    """The cache key of one line: everything its output depends on. None (not cached) for an empty
    line (answered without the model anyway) and with sampling (seeded by the line's index in its request)."""
    if decode.sampling or not line.strip():
        return None
    return (model.identity.id, decode, n_best, tuple(tokenizer.src_prefix), line)


async def _run_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                   decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer) -> Job:
    """`lines` through the batcher: the job once answered (429 when the queue is full; 499 when the
    client goes away, 503 after --timeout: its segments dropped from the queue)."""
    with model.open.held(request.scope):  # this model's batcher counts it until it is answered
        return await _wait_job(request, model, settings, lines, decode, n_best, tokenizer)


async def _wait_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                    decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer) -> Job:
    try:
        job = model.batcher.submit(lines, decode, n_best=n_best, tokenizer=tokenizer)
    except QueueFull as e:
        raise ApiError(429, f"queue full ({e}); retry later", {"Retry-After": str(e.retry_after)}) from None
    waiter = asyncio.ensure_future(asyncio.wrap_future(job.future))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({waiter, gone}, timeout=settings.timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if waiter not in done:
        model.batcher.cancel(job)
        waiter.cancel()
        if gone in done:
            raise ApiError(499, "client closed the request")
        raise ApiError(503, f"request waited more than --timeout {settings.timeout_s:g} s; retry later",
                       {"Retry-After": "5"})
    try:
        waiter.result()  # a failed batch's exception
    except MTError as e:  # a known cause, logged by the batcher in one line: the model is unavailable
        raise ApiError(503, f"the model could not translate: {e}", {"Retry-After": "5"}) from None
    return job


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (the body is already read, so the next ASGI message is
    http.disconnect; uvicorn sends it when the connection closes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


async def translate_html(request: Request, model: ServedModel, settings: ServeSettings, fragments: list[HtmlFragment],
                         decode: DecodeConfig, tokenizer: Tokenizer) -> list[str]:
    """Each HTML fragment with its blocks' text translated (one segment per block, all fragments in
    one job) and its markup kept (`mt.text.html`): a block's inline markup placed on the words the
    model's cross-attention aligns with the words it marked (one forced pass in the worker for the
    blocks that have inline markup; by position with an engine that cannot align)."""
    chars = sum(len(fragment.source) for fragment in fragments)  # the limit counts the markup too, as LibreTranslate's
    if chars > settings.char_limit:
        raise ApiError(413, f"request: {chars} characters, the limit is {settings.char_limit}")
    blocks = [block for fragment in fragments for block in fragment.blocks]
    found, _ = await translate_texts(request, model, settings, blocks, decode, None, tokenizer) if blocks else ([], [])
    translations = [hyps[0][0] for hyps in found]

    def align(sources: list[str], targets: list[str]) -> list[list[int]] | None:
        return model.engine.align(list(tokenizer.src_prefix), sources, targets)

    try:  # off the event loop: the alignment is a forced pass in the worker, rendering is linear work
        return await asyncio.to_thread(render_fragments, fragments, translations, align)
    except MTError as e:
        raise ApiError(503, f"the model could not align the markup: {e}", {"Retry-After": "5"}) from None
