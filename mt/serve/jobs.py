"""A translate request's job on the batcher: what `/translate` and `/v1/translate` share.

The texts are checked against the limits (400 over --char-limit, 413 over --max-segments lines)
and split into sentences (`mt.text.segment`, the source language's rules; long ones broken to fit
the model); the sentences the model's translation cache holds are answered from it
(`mt.serve.cache`), the others queued on the model's `Batcher` as one job (429 when the queue is
full) and awaited without blocking the event loop; a client that goes away (499) or waits past
--timeout (503) has its segments dropped from the queue. `translate_html` does the same for HTML
fragments: the sentences of their blocks' text as segments, markup kept. With a glossary
(`mt.serve.glossary`), each sentence goes with the target pieces of the terms found in it, and
(its `first_pass`) the words the model's greedy translation gave them, to be avoided.
Placeholders, URLs, numbers and the like are taken out of each sentence and put back after it is
translated, ALL CAPS / Title Case sentences translated in sentence case and a sentence without
final punctuation given none (`decode.protect`, `decode.case`, `decode.ending`;
`mt.decode.protected`): the cache holds the model's translation of what it read. A sentence whose
output still loops is searched again by a second job with no target piece twice, as
`mt translate` does it (`decode.loop_retry`, `mt.decode.repeats`); the cache holds the one kept.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import cast

from fastapi import Request

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.confidence import text_confidence
from mt.decode.protected import prepare_segments, render_nbest, truecaser
from mt.decode.repeats import retry_wins, to_retry
from mt.decode.terms import TermConstraints, first_pass_searches, first_pass_wanted
from mt.decode.translate import broken_warning, join_nbest, segment_for_model
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.serve.batcher import Hyps, Job, QueueFull
from mt.serve.cache import Cached, Key
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError, check_size
from mt.serve.settings import ServeSettings
from mt.text.html import HtmlFragment, render_fragments
from mt.text.protect import Aligner, Prepared, span_links
from mt.text.segment import segmenter_for, whole_lines

log = logging.getLogger(__name__)

Terms = tuple[list[list[list[int]]], tuple[int, ...]]  # a job's lines' constraints, and the glue


async def translate_texts(request: Request, model: ServedModel, settings: ServeSettings, texts: list[str],
                          decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer, source: str,
                          *, segment: bool = True, terms: TermConstraints | None = None) -> tuple[list[Hyps], list[str]]:
    """(each text's outputs, the job's warnings): `translate_texts_scored` without the confidences."""
    found, notes, _ = await translate_texts_scored(request, model, settings, texts, decode, n_best, tokenizer, source,
                                                   segment=segment, terms=terms)
    return found, notes


async def translate_texts_scored(request: Request, model: ServedModel, settings: ServeSettings, texts: list[str],
                                 decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer, source: str, *,
                                 segment: bool = True, terms: TermConstraints | None = None,
                                 ) -> tuple[list[Hyps], list[str], list[float]]:
    """(each text's outputs, the job's warnings, each text's confidence: its least confident
    sentence's, `mt.decode.confidence.text_confidence`). Each text is split into sentences by the source
    language's segmenter (`mt.text.segment`; with `segment` False, into lines), sentences over the
    model's limit broken (one warning for the request); the sentences the model's cache holds are
    answered from it, all others of all texts go to the batcher as ONE job, and each text is put
    back together with its whitespace. The k-th output of a text joins its sentences' k-th best,
    scored by their mean (`join_nbest`). With `terms` (a glossary, `mt.serve.glossary`), each sentence
    keeps the terms found in it (its own constraints travel with it to the worker); a sentence
    without one is translated, and cached, exactly as without a glossary."""
    check_size(texts, settings)  # the limits before any work
    max_positions = model.batcher.engine.max_positions
    if segment:
        split = segment_for_model(texts, tokenizer, max_positions, segmenter_for(source, tokenizer.target))
    else:
        split = [whole_lines(text) for text in texts]
    prepared = prepare_segments([sentence for text in split for sentence in text.segments], tokenizer, decode)
    flat = [p.text for p in prepared]  # spans out, case styles in sentence case (mt.text.protect)
    cons = terms.for_lines(flat) if terms is not None else [[] for _ in flat]
    keys = [segment_key(model, decode, n_best, tokenizer, sentence, kept) for sentence, kept in zip(flat, cons)]
    # A sentence repeated in the request is looked up and decoded once (uncached ones, sampled, each time).
    first = {key: i for i, key in reversed(list(enumerate(keys))) if key is not None}
    unique = [i for i, key in enumerate(keys) if key is None or first[key] == i]
    answers: list[Cached | None] = [None] * len(flat)
    for i, answer in zip(unique, model.cache.lookup([keys[i] for i in unique])):
        answers[i] = answer
    todo = [i for i in unique if answers[i] is None]
    if todo:
        glue = terms.glue if terms is not None else ()
        if terms is not None:  # the model's own word for each term, as `mt translate --glossary` finds it
            found = await _first_pass(request, model, settings, [flat[i] for i in todo], [cons[i] for i in todo],
                                      decode, tokenizer, terms)
            cons = list(cons)
            for i, wanted in zip(todo, found):
                cons[i] = wanted
        job = await _run_job(request, model, settings, [flat[i] for i in todo], decode, n_best, tokenizer,
                             ([cons[i] for i in todo], glue) if terms is not None else None)
        fresh = _answers(job)
        strict, again = to_retry(decode, [flat[i] for i in todo], [a.hyps[0][0] for a in fresh],
                                 lambda j: bool(cons[todo[j]]))  # a line keeping a term keeps its search's output
        if strict is not None and again:
            retried = _answers(await _run_job(request, model, settings, [flat[todo[j]] for j in again], strict, n_best,
                                              tokenizer, None))
            for j, answer in zip(again, retried):
                if retry_wins(flat[todo[j]], fresh[j].hyps[0][0], answer.hyps[0][0]):
                    fresh[j] = answer
        for i, answer in zip(todo, fresh):
            answers[i] = answer
            model.cache.store(keys[i], answer)
    for i, key in enumerate(keys):
        if answers[i] is None:
            answers[i] = answers[first[cast(tuple, key)]]
    done = cast(list[Cached], answers)  # every sentence answered now
    notes = model.batcher.cut_warning(sum(answer.cut for answer in done), len(flat))
    broken = broken_warning(split, max_positions)
    if broken:
        log.info("%s", broken)  # once per request, not per sentence
        notes.append(broken)
    found = iter(await _rendered(model, tokenizer, prepared, [answer.hyps for answer in done]))
    joined = [join_nbest(text, [next(found) for _ in text.segments]) for text in split]
    sure = iter(answer.confidence for answer in done)
    return joined, notes, [text_confidence([next(sure) for _ in text.segments]) for text in split]


def _answers(job: Job) -> list[Cached]:
    """An answered job's lines as the cache holds them: outputs, whether cut, confidence (NaN from a
    batcher that does not rate its outputs)."""
    sure = job.confidence or [math.nan] * len(job.cut)
    return [Cached(hyps, cut, confidence) for hyps, cut, confidence in zip(job.future.result(), job.cut, sure)]


async def _rendered(model: ServedModel, tokenizer: Tokenizer, prepared: list[Prepared], hyps: list[Hyps]) -> list[Hyps]:
    """Each sentence's outputs with its protected spans, case style and ending back (`render_nbest`),
    aligned in the worker off the event loop; a request where nothing applies is returned as it is."""
    if all(p.identity for p in prepared):
        return hyps
    try:
        return await asyncio.to_thread(render_nbest, prepared, hyps, _aligner(model, tokenizer),
                                       truecase=truecaser(tokenizer))
    except MTError as e:
        raise ApiError(503, f"the model could not align the protected spans: {e}", {"Retry-After": "5"}) from None


def _aligner(model: ServedModel, tokenizer: Tokenizer) -> Aligner:
    """Word alignments by the model in its worker (`mt.decode.align`; None from an engine that cannot align)."""
    return lambda sources, targets: model.engine.align(list(tokenizer.src_prefix), sources, targets)


async def _first_pass(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                      cons: list[Wanted], decode: DecodeConfig, tokenizer: Tokenizer,
                      terms: TermConstraints) -> list[Wanted]:
    """`cons` of `lines` after the glossary's first pass, as `mt.decode.translate.term_lines` does it:
    the lines holding a term translated by the batcher (`mt.decode.terms.first_pass_searches`), their
    constraints made from the outputs off the event loop (`first_pass_wanted`), aligned by the
    worker; `cons` as they are without one."""
    rows = [i for i, wanted in enumerate(cons) if wanted]
    if terms.first_pass == "off" or not rows or not model.constrains:
        return cons
    held = [lines[i] for i in rows]

    def align(src: list[str], tgt: list[str]) -> list[list[int]] | None:  # in the worker, off the event loop
        return model.engine.align(list(tokenizer.src_prefix), src, tgt)

    outputs = []
    for search in first_pass_searches(terms, held, decode):
        job = await _run_job(request, model, settings, search.lines, search.decode, search.n_best, tokenizer, None)
        outputs.append([[text for text, _ in hyps] for hyps in job.future.result()])
    found = await asyncio.to_thread(first_pass_wanted, terms, held, outputs, tokenizer, align)
    out = list(cons)
    for i, wanted in zip(rows, found):
        out[i] = wanted
    return out


def segment_key(model: ServedModel, decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                line: str, terms: Wanted | None = None) -> Key | None:
    """The cache key of one sentence: everything its output depends on (with the target pieces of the
    glossary terms it keeps, if any). None (not cached) for an empty one (answered without the model
    anyway) and with sampling (seeded by its index in its request)."""
    if decode.sampling or not line.strip():
        return None
    key = (model.identity.id, decode, n_best, tuple(tokenizer.src_prefix), line)
    return key + (terms,) if terms else key  # a Wanted: tuples all the way down


async def _run_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                   decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer, terms: Terms | None) -> Job:
    """`lines` through the batcher (with `terms`: each line's constraints and the glue): the job once
    answered (429 when the queue is full; 499 when the client goes away, 503 after --timeout: its
    segments dropped from the queue)."""
    with model.open.held(request.scope):  # this model's batcher counts it until it is answered
        return await _wait_job(request, model, settings, lines, decode, n_best, tokenizer, terms)


async def _wait_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                    decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer, terms: Terms | None) -> Job:
    constraints, glue = terms if terms is not None else (None, ())
    try:
        job = model.batcher.submit(lines, decode, n_best=n_best, tokenizer=tokenizer, constraints=constraints,
                                   glue=glue)
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


async def translate_html(request: Request, model: ServedModel, settings: ServeSettings, fragments: list[HtmlFragment],
                         decode: DecodeConfig, tokenizer: Tokenizer, source: str,
                         terms: TermConstraints | None = None) -> list[str]:
    """Each HTML fragment with its blocks' text translated (each block split into sentences, all
    fragments' sentences in one job) and its markup kept (`mt.text.html`): a block's inline markup
    placed on the words the model's cross-attention aligns with the words it marked (one forced
    pass in the worker for the blocks that have inline markup; by position with an engine that
    cannot align). The caller has checked --char-limit on the markup (`check_chars`), as
    LibreTranslate counts it. `terms`: a glossary, as in `translate_texts`."""
    blocks = [block for fragment in fragments for block in fragment.blocks]
    found, _ = (await translate_texts(request, model, settings, blocks, decode, None, tokenizer, source, terms=terms)
                if blocks else ([], []))
    translations = [hyps[0][0] for hyps in found]

    try:  # off the event loop: the alignment is a forced pass in the worker, rendering is linear work
        return await asyncio.to_thread(render_fragments, fragments, translations,
                                       span_links(_aligner(model, tokenizer), decode.protect))
    except MTError as e:
        raise ApiError(503, f"the model could not align the markup: {e}", {"Retry-After": "5"}) from None
