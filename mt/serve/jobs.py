"""A translate request's run of the one translation path on the server: what `/translate`,
`/v1/translate` and the file routes share.

The texts are checked against the limits (400 over --char-limit, 413 over --max-segments lines),
then go through `mt.decode.pipeline` exactly as `mt translate` sends them (segment, prepare,
constrain, search, retry, render: the order of the rules is written there once). What is the
server's own is how the path's model work runs (`_drive`): each search's sentences the model's
translation cache holds are answered from it (`mt.serve.cache`), the others queued on the
model's `Batcher` as one job (429 when the queue is full) and awaited without blocking the event
loop; a client that goes away (499) or waits past --timeout (503) has its segments dropped from
the queue. Alignment (rendering spans, a glossary's first pass) runs in the worker, off the event
loop, and so does a glossary's choice stage (`Choose`: one forced pass in the worker, its answers
cached with the outputs chosen from). The cache holds each search's answers for what the model read
(a loop's retry is a search of its own, cached under its own settings). `translate_html` does the
same for HTML fragments: the sentences of their blocks' text as segments, markup kept.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from fastapi import Request

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.pipeline import translate_steps
from mt.decode.steps import Choose, Expand, Found, Search, Steps
from mt.decode.terms import TermConstraints
from mt.decode.translate import choice_found, expand_found
from mt.decode.typed import foreign_letters, foreign_message
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.serve.batcher import QueueFull
from mt.serve.batchjob import Hyps, Job
from mt.serve.cache import Cached, Key
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError, check_chars, check_size
from mt.serve.settings import ServeSettings
from mt.text.html import HtmlFragment, render_fragments
from mt.text.protect import Aligner, span_links
from mt.text.segment import segmenter_for

log = logging.getLogger(__name__)
T = TypeVar("T")

Terms = tuple[list[Wanted], tuple[int, ...]]  # a job's lines' constraints, and the glue


async def translate_texts(request: Request, model: ServedModel, settings: ServeSettings, texts: list[str],
                          decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer, source: str,
                          *, segment: bool = True,
                          terms: TermConstraints | None = None) -> tuple[list[Hyps], list[str]]:
    """(each text's outputs, the job's warnings): `translate_texts_scored` without the confidences."""
    found, notes, _ = await translate_texts_scored(request, model, settings, texts, decode, n_best, tokenizer,
                                                   source, segment=segment, terms=terms)
    return found, notes


async def translate_texts_scored(request: Request, model: ServedModel, settings: ServeSettings,
                                 texts: list[str], decode: DecodeConfig, n_best: int | None,
                                 tokenizer: Tokenizer, source: str, *,
                                 segment: bool = True, terms: TermConstraints | None = None,
                                 ) -> tuple[list[Hyps], list[str], list[float]]:
    """(each text's outputs, the job's warnings, each text's confidence: its least confident
    sentence's). The texts go through the one translation path (`mt.decode.pipeline`), exactly as in
    `mt translate`: split by the source language's segmenter (with `segment` False, into lines),
    sentences over the model's limit broken (one warning for the request), spans, case and ending
    prepared, a glossary's terms (`terms`, `mt.serve.glossary`) kept, loops retried, rendered back
    with their whitespace. Only how its searches run is the server's (`_search`): the cache first,
    then all other sentences of a search as ONE batcher job; alignment in the worker, off the event
    loop. The k-th output of a text joins its sentences' k-th best, scored by their mean."""
    check_size(texts, settings)  # the limits before any work
    max_positions = model.batcher.engine.max_positions
    segmenter = segmenter_for(source, tokenizer.target) if segment else None
    steps = translate_steps(texts, tokenizer, decode, max_positions=max_positions, segmenter=segmenter,
                            n_best=n_best, terms=terms, first_pass=terms is not None and model.constrains)
    done = await _drive(steps, request, model, settings, tokenizer)
    notes = model.batcher.cut_warning(done.cut(), len(done.segments))
    if done.broken:
        log.info("%s", done.broken)  # once per request, not per sentence
        notes.append(done.broken)
    return done.nbest(), notes, done.confidences()


@dataclass(frozen=True)
class Completion:
    """/v1/complete's answer: the translation continuing the typed prefix (as typed), the
    alternatives for the word after it ((text, probability), most probable first), the confidence."""

    translation: str
    alternatives: list[tuple[str, float]]
    confidence: float


async def complete_text(request: Request, model: ServedModel, settings: ServeSettings, text: str, prefix: str,
                        k: int, decode: DecodeConfig, tokenizer: Tokenizer, pair: tuple[str, str], *,
                        terms: TermConstraints | None = None) -> Completion:
    """`text` translated continuing the translator's typed `prefix` ('' or blank: the plain
    translation, as /v1/translate gives it) with `k` alternatives for the next word: the one path's
    continue and alternatives stages (`translate_steps(prefixes=..., alternatives=...)`), its
    searches run the server's way (`_drive`: cache, batcher) and its next-piece ranking (`Expand`)
    in the worker. The whole answer is cached by (model, decode settings, k, pair, prefix, text): a
    page asking again (a cursor moved back) is answered without the model. An `MTError` of the path
    (a prefix the model cannot write, or over its limit) is a 400 naming `prefix`."""
    check_size([text], settings)
    check_chars([text, prefix], settings)  # the prefix counts towards --char-limit too
    check_script(tokenizer, prefix)
    # (prefix, text) last: the cache counts its characters towards its bound (`mt.serve.cache._chars`)
    key: Key = (model.identity.id, "complete", decode, k, tuple(tokenizer.src_prefix), pair, (prefix, text))
    cached = model.cache.lookup([key])[0]
    if cached is not None:
        return Completion(cached.hyps[0][0], list(cached.hyps[1:]), cached.confidence)
    steps = translate_steps([text], tokenizer, decode, max_positions=model.batcher.engine.max_positions,
                            segmenter=segmenter_for(pair[0], tokenizer.target), terms=terms,
                            first_pass=terms is not None and model.constrains, prefixes=[prefix],
                            alternatives=k)
    try:
        done = await _drive(steps, request, model, settings, tokenizer)
    except MTError as e:  # raised by the path itself: the request's own problem
        raise ApiError(400, str(e).replace("prefix on line 1:", "prefix:")) from None  # the CLI's words
    if done.broken:
        log.info("%s", done.broken)
    found = Completion(done.best()[0], done.alternatives()[0], done.confidences()[0])
    model.cache.store(key, Cached([(found.translation, 0.0), *found.alternatives], bool(done.cut()),
                                  found.confidence))
    return found


def check_script(tokenizer: Tokenizer, prefix: str) -> None:
    """A 400 naming the letters of `prefix` of another script than the model writes
    (`mt.decode.typed.foreign_letters`), before the cache and the model."""
    foreign = foreign_letters(tokenizer, prefix)
    if foreign:
        raise ApiError(400, f"prefix: {foreign_message(foreign)}")


async def _drive(steps: Steps[T], request: Request, model: ServedModel, settings: ServeSettings,
                 tokenizer: Tokenizer) -> T:
    """`mt.decode.pipeline.drive` for the server: each `Search` answered by `_search`, each
    `Choose` by the worker's `choose_ids`, each `Expand` (a typed prefix's next pieces) by its
    `next_ids` and each `Offload` with the worker's aligner, in a thread off the event loop (an
    `MTError` there is a 503). An `MTError` the path raises itself (a prefix it cannot continue)
    goes up to the caller."""
    answer: Any = None
    try:
        while True:
            step = steps.send(answer)
            if isinstance(step, Search):
                answer = await _search(request, model, settings, tokenizer, step)
                continue
            try:
                if isinstance(step, Choose):
                    answer = await _choose(model, tokenizer, step)
                elif isinstance(step, Expand):
                    answer = await asyncio.to_thread(expand_found, model.engine, tokenizer, step)
                else:
                    answer = await asyncio.to_thread(step.run, _aligner(model, tokenizer))
            except MTError as e:
                raise ApiError(503, f"the model could not align, choose or rank: {e}",
                               {"Retry-After": "5"}) from None
    except StopIteration as done:
        return done.value


async def _search(request: Request, model: ServedModel, settings: ServeSettings, tokenizer: Tokenizer,
                  search: Search) -> list[Found]:
    """One `Search` of the path, the server's way: the sentences the model's translation cache holds
    answered from it (`segment_key`: a sentence repeated in the search looked up and decoded once;
    sampled ones each time), all others queued on the batcher as one job and awaited (429, 499, 503:
    `_run_job`), then cached."""
    lines, wanted = search.lines, search.wanted
    keys = [segment_key(model, search.decode, search.n_best, tokenizer, line, wanted[i] if wanted else None)
            for i, line in enumerate(lines)]
    first = {key: i for i, key in reversed(list(enumerate(keys))) if key is not None}
    unique = [i for i, key in enumerate(keys) if key is None or first[key] == i]
    answers: list[Cached | None] = [None] * len(lines)
    for i, answer in zip(unique, model.cache.lookup([keys[i] for i in unique])):
        answers[i] = answer
    todo = [i for i in unique if answers[i] is None]
    if todo:
        terms = ([wanted[i] for i in todo], search.glue) if wanted is not None else None
        job = await _run_job(request, model, settings, [lines[i] for i in todo], search.decode, search.n_best,
                             tokenizer, terms)
        for i, answer in zip(todo, _answers(job)):
            answers[i] = answer
            model.cache.store(keys[i], answer)
    done = [answer if answer is not None else answers[first[cast(tuple, keys[i])]]
            for i, answer in enumerate(answers)]
    return [Found(answer.hyps, answer.confidence, answer.cut) for answer in cast(list[Cached], done)]


async def _choose(model: ServedModel, tokenizer: Tokenizer, choose: Choose) -> list[Found]:
    """The path's choice stage, the server's way: the lines the model's translation cache holds
    (keyed with their outputs to choose from) answered from it, the others chosen in the worker
    (`choice_found`: one forced pass, as alignment runs, off the event loop), then cached."""
    keys = [segment_key(model, choose.decode, choose.n_best, tokenizer, line) for line in choose.lines]
    keys = [key + (("choose", offered),) if key is not None else None
            for key, offered in zip(keys, choose.choices)]
    answers = model.cache.lookup(keys)
    todo = [i for i, answer in enumerate(answers) if answer is None]
    if todo:
        lines = [choose.lines[i] for i in todo]
        asked = Choose(lines, [choose.choices[i] for i in todo], choose.decode, choose.n_best)
        limit = model.batcher.engine.max_positions - 1  # a source cut at the model's limit, as by the batcher
        cut = [len(ids) > limit for ids in tokenizer.encode_src([line.strip() for line in lines])]
        chosen = await asyncio.to_thread(choice_found, model.engine, tokenizer, asked)
        for i, found, was_cut in zip(todo, chosen, cut):
            answers[i] = Cached(found.hyps, was_cut, found.confidence)
            model.cache.store(keys[i], answers[i])
    return [Found(answer.hyps, answer.confidence, answer.cut) for answer in cast(list[Cached], answers)]


def _answers(job: Job) -> list[Cached]:
    """An answered job's lines as the cache holds them: outputs, whether cut, confidence (NaN from a
    batcher that does not rate its outputs)."""
    sure = job.confidence or [math.nan] * len(job.cut)
    return [Cached(hyps, cut, confidence)
            for hyps, cut, confidence in zip(job.future.result(), job.cut, sure)]


def _aligner(model: ServedModel, tokenizer: Tokenizer) -> Aligner:
    """Word alignments by the model in its worker (`mt.decode.align`; None from an engine that cannot
    align)."""
    return lambda sources, targets: model.engine.align(list(tokenizer.src_prefix), sources, targets)


def segment_key(model: ServedModel, decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                line: str, terms: Wanted | None = None) -> Key | None:
    """The cache key of one sentence: everything its output depends on (with the target pieces of the
    glossary terms it keeps, if any). None (not cached) for an empty one (answered without the model
    anyway) and with sampling (seeded by its index in its request)."""
    if decode.search.sampling or not line.strip():
        return None
    key = (model.identity.id, decode, n_best, tuple(tokenizer.src_prefix), line)
    return key + (terms,) if terms else key  # a Wanted: tuples all the way down


async def _run_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                   decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                   terms: Terms | None) -> Job:
    """`lines` through the batcher (with `terms`: each line's constraints and the glue): the job once
    answered (429 when the queue is full; 499 when the client goes away, 503 after --timeout: its
    segments dropped from the queue)."""
    with model.open.held(request.scope):  # this model's batcher counts it until it is answered
        return await _wait_job(request, model, settings, lines, decode, n_best, tokenizer, terms)


async def _wait_job(request: Request, model: ServedModel, settings: ServeSettings, lines: list[str],
                    decode: DecodeConfig, n_best: int | None, tokenizer: Tokenizer,
                    terms: Terms | None) -> Job:
    constraints, glue = terms if terms is not None else (None, ())
    try:
        job = model.batcher.submit(lines, decode, n_best=n_best, tokenizer=tokenizer, constraints=constraints,
                                   glue=glue)
    except QueueFull as e:
        raise ApiError(429, f"queue full ({e}); retry later", {"Retry-After": str(e.retry_after)}) from None
    waiter = asyncio.ensure_future(asyncio.wrap_future(job.future))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({waiter, gone}, timeout=settings.timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
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


async def translate_html(request: Request, model: ServedModel, settings: ServeSettings,
                         fragments: list[HtmlFragment], decode: DecodeConfig, tokenizer: Tokenizer,
                         source: str, terms: TermConstraints | None = None) -> list[str]:
    """Each HTML fragment with its blocks' text translated (each block split into sentences, all
    fragments' sentences in one job) and its markup kept (`mt.text.html`): a block's inline markup
    placed on the words the model's cross-attention aligns with the words it marked (one forced
    pass in the worker for the blocks that have inline markup; by position with an engine that
    cannot align). The caller has checked --char-limit on the markup (`check_chars`), as
    LibreTranslate counts it. `terms`: a glossary, as in `translate_texts`."""
    blocks = [block for fragment in fragments for block in fragment.blocks]
    found, _ = (await translate_texts(request, model, settings, blocks, decode, None, tokenizer, source,
                                      terms=terms)
                if blocks else ([], []))
    translations = [hyps[0][0] for hyps in found]

    try:  # off the event loop: the alignment is a forced pass in the worker, rendering is linear work
        return await asyncio.to_thread(render_fragments, fragments, translations,
                                       span_links(_aligner(model, tokenizer), decode.text.protect))
    except MTError as e:
        raise ApiError(503, f"the model could not align the markup: {e}", {"Retry-After": "5"}) from None
