"""The one translation path: a person's texts through named stages, in one order, for every caller.

    segment ─► prepare ─► constrain ─► search | choose ─► agree ─► retry ─► render ─► continue

Each segment of each text is one record (`Segment`) that the stages fill in turn:

- **segment**: every text split into sentences by the source language's segmenter, sentences over
  the model's limit broken (never cut); without a segmenter, one segment per line (`whole_lines`).
  Reads the texts; writes `Translated.texts` and the one warning for broken sentences.
- **prepare**: spans out, ALL CAPS / Title Case in sentence case, the ending noted
  (`mt.decode.protected.prepare_segments`). Writes `Segment.prepared`; `prepared.text` is what the
  model reads from here on.
- **constrain**: a glossary's terms matched once per sentence, and with its first pass ("swap")
  the model's own translation of the sentences holding one searched and turned into the outputs to
  choose from (`mt.decode.terms`, `mt.decode.swap`). Writes `Segment.terms`, `Segment.wanted`
  and `Segment.choices`.
- **search**: all segments without outputs to choose from in one search (`Search`), sentences
  holding a term batched apart. Reads `Segment.prepared` and `Segment.wanted`; writes
  `Segment.found` (outputs best first, the 1-best's confidence, whether the source was cut).
- **choose**: the segments with outputs to choose from (`Segment.choices`) get the best of them
  by the model's score, all in one forced-decoding pass (`Choose`,
  `mt.decode.forced.choose_outputs`): no search. Writes their `Segment.found`.
- **agree** (terms with a gender and number, issue 72): a constrained search's output offered again
  with the words in front of its terms in agreement, ranked in one `Choose`. Rewrites `Segment.found`.
- **retry**: an output that still loops searched again with no piece twice and kept where it
  repeats less (`mt.decode.repeats`); a sentence holding a term keeps its output. Rewrites
  `Segment.found`.
- **render**: spans, case style and ending put back by the model's word alignment
  (`mt.text.protect.render_all`). Writes `Segment.rendered`.
- **continue** (only with a translator's typed target prefixes, one per text: issue 73): each
  text segmented as usual and its prefix shared out over its sentences (`mt.decode.typed.split_prefix`:
  the first sentence's, unless it finishes sentences, which are then those sentences'
  translations as typed, not searched); a segment with a share (`Segment.typed`) gets it as its
  `Wanted` (forced pieces, then the typed partial word; a glossary's terms not already typed
  required after it: `typed_terms`), so it is searched as a held sentence; after render its
  outputs start with its share exactly as typed. The sentences beyond the prefix are translated
  plainly. An empty prefix is the plain translation. Rewrites `Segment.rendered`.
- **alternatives** (with `alternatives` K; at each text's segment its prefix ends in): the most
  probable pieces right after each prefix
  (`Expand`, one teacher-forced pass: `mt.decode.alternatives`), each forced after it and
  continued to a whole translation in one `Search`, rendered and continued as above; the first K
  with distinct next words kept with their piece's probability (CTranslate2's alternatives at
  a position). Writes `Segment.alternatives`.

The output kind (a text, its n-best, its confidence) is formatting at the edge (`Translated`).

The path does no model work itself: `translate_steps` is a generator that yields each piece of
model work it needs — a `Search`, a `Choose` (a forced-decoding pass that ranks given outputs), an
`Expand` or an `Offload` (blocking work that aligns with the model; the steps are
`mt.decode.steps`) — and is sent back the answer. `drive` runs
it in the caller's thread (`mt translate`, documents: a search over an engine, `mt.decode.translate`);
the server runs the same generator with its batcher, cache and worker, awaiting each answer off the
event loop (`mt.serve.jobs`). Callers differ only in how
searches are executed, never in the order of the rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.confidence import text_confidence
from mt.decode.protected import prepare_segments, render_nbest, truecaser
from mt.decode.repeats import retry_wins, to_retry
from mt.decode.steps import Choose, Expand, Found, Hyps, Offload, Search, Steps
from mt.decode.swap import agreeing, first_pass_searches, first_pass_wanted
from mt.decode.terms import TermConstraints, terms_in
from mt.decode.typed import (
    EMPTY,
    Typed,
    extended,
    open_segments,
    spread_prefixes,
    typed_marks,
    typed_terms,
    word_at,
)
from mt.decode.wanted import Choices, Wanted
from mt.errors import MTError
from mt.text.glossary import Term
from mt.text.protect import SYMBOLS, Aligner, Prepared
from mt.text.segment import Segmented, Segmenter, fit, whole_lines

T = TypeVar("T")

SENTENCE_STRIDE = 1 << 32  # sampling keys: sentence j of line i is line i's id + j x this
SYMBOL_RUN = re.compile(SYMBOLS)
ALTERNATIVE_PIECES = 3  # next pieces tried per alternative asked for (several may start one word)


@dataclass
class Segment:
    """One segment's record, filled by the stages in order (module docstring)."""

    prepared: Prepared  # prepare: `.text` is what the model reads
    key: int  # its sampling key (`sampling_keys`)
    terms: list[Term] = field(default_factory=list)  # constrain: the glossary terms found in it
    wanted: Wanted | None = None  # constrain: its constraints (None without a glossary)
    choices: Choices = ()  # constrain: the outputs it chooses from instead of a search (the choice stage)
    found: Found = field(default_factory=lambda: Found([("", 0.0)]))  # search, retry
    rendered: Hyps = field(default_factory=list)  # render: `found.hyps` with spans, case and ending back
    typed: Typed | None = None  # the translator's typed target prefix it continues (continue)
    whole: str | None = None  # a sentence the translator typed whole: its translation, not searched
    alternatives: Hyps = field(default_factory=list)  # alternatives: (text, probability), most probable first


@dataclass(frozen=True)
class Translated:
    """What the path gives back: each text's shape and its segments' records, in order, and the
    one warning for sentences broken to fit the model (None when none was). The output kinds
    are read from it."""

    texts: list[Segmented]
    segments: list[Segment]
    broken: str | None = None

    def per_text(self) -> Iterator[tuple[Segmented, list[Segment]]]:
        """Each text with its own segments' records."""
        records = iter(self.segments)
        for text in self.texts:
            yield text, [next(records) for _ in text.segments]

    def best(self) -> list[str]:
        """Each text translated: its segments' best outputs between its own gaps."""
        return [text.render([s.rendered[0][0] for s in mine]) for text, mine in self.per_text()]

    def nbest(self) -> list[Hyps]:
        """Each text's alternatives (`join_nbest`)."""
        return [join_nbest(text, [s.rendered for s in mine]) for text, mine in self.per_text()]

    def alternatives(self) -> list[Hyps]:
        """Each text's alternatives after its prefix (the alternatives stage, at the segment its
        prefix ends in): (text, probability), most probable first, its other segments' best around."""
        out = []
        for text, mine in self.per_text():
            at = next((j for j, s in enumerate(mine) if s.alternatives), None)
            best = [s.rendered[0][0] for s in mine]
            out.append([] if at is None else [(text.render([*best[:at], t, *best[at + 1:]]), p)
                                              for t, p in mine[at].alternatives])
        return out

    def confidences(self) -> list[float]:
        """Each text's confidence: its least confident sentence's (`text_confidence`)."""
        return [text_confidence([s.found.confidence for s in mine]) for _, mine in self.per_text()]

    def cut(self) -> int:
        """Segments whose source was cut at the model's limit (none after `segment` has fitted them)."""
        return sum(s.found.cut for s in self.segments)


def translate_steps(texts: Sequence[str], tokenizer: Tokenizer, decode: DecodeConfig, *, max_positions: int,
                    segmenter: Segmenter | None, n_best: int | None = None, first_id: int = 0,
                    terms: TermConstraints | None = None, first_pass: bool = True,
                    prefixes: Sequence[str] | None = None, alternatives: int = 0) -> Steps[Translated]:
    """The path for `texts` (module docstring): segment (by `segmenter`; None: a segment per line),
    prepare, constrain (with `terms`; its first pass where `first_pass`, i.e. the driver can align),
    search and choose (`n_best` as in `Search`), retry, render. Sampling keys segment j of text i as
    `sampling_keys` does from `first_id`. `prefixes`: each text's typed target prefix ('' for
    none), continued by its output (the continue stage); `alternatives` K: each one's K next words
    (the alternatives stage; every text one segment)."""
    split = segment(texts, tokenizer, max_positions, segmenter)
    marks: list[tuple[Typed | None, str | None]] = [(None, None) for text in split for _ in text.segments]
    if prefixes is not None:  # each text's prefix over its sentences (`mt.decode.typed.split_prefix`)
        split, parts = spread_prefixes(split, prefixes, segmenter)
    prepared = prepare_segments([s for text in split for s in text.segments], tokenizer, decode)
    if prefixes is not None:
        marks = typed_marks(tokenizer, split, parts, prepared, max_positions)
    records = [Segment(p, key, typed=mark, whole=whole)
               for p, key, (mark, whole) in zip(prepared, sampling_keys(split, first_id), marks)]
    live = [i for i, r in enumerate(records) if r.whole is None]  # the segments searched
    sources, keys = [records[i].prepared.text for i in live], [records[i].key for i in live]
    wanted: list[Wanted] | None = None
    if any(records[i].typed for i in live):
        wanted = [records[i].typed.wanted() if records[i].typed else Wanted(()) for i in live]  # type: ignore[union-attr]
    choices: list[Choices] = [() for _ in live]
    if terms is not None:  # a segment continuing a typed prefix keeps its terms by the constrained search
        plain = [j for j, i in enumerate(live) if records[i].typed is None]
        matched, made, offered = yield from constrain([sources[j] for j in plain], tokenizer, decode, terms,
                                                      first_pass=first_pass)
        wanted = [w if w is not None else Wanted(()) for w in wanted or [None] * len(live)]
        for j, found_terms, line_wanted, line_choices in zip(plain, matched, made, offered):
            records[live[j]].terms, wanted[j], choices[j] = found_terms, line_wanted, line_choices
        for j, i in enumerate(live):
            if records[i].typed is not None:
                records[i].terms = terms_in(terms.occurrences([sources[j]])[0])
                wanted[j] = typed_terms(terms, records[i].terms, cast(Typed, records[i].typed))
    for j, i in enumerate(live):
        records[i].wanted = wanted[j] if wanted is not None else None
        records[i].choices = choices[j]
    found = yield from search(sources, decode, n_best, keys, wanted, choices,
                              terms.glue if terms is not None else ())
    if terms is not None:
        found = yield from agree(sources, found, [records[i] for i in live], tokenizer, decode, n_best, terms)
    held = [bool(records[i].wanted) for i in live]  # a sentence keeping a term keeps its search's output
    found = yield from retry(sources, found, decode, n_best, keys, held)
    for i, answer in zip(live, found):
        records[i].found = answer
    yield from render([records[i] for i in live], tokenizer)
    for record in records:  # continue: the typed prefix as typed
        if record.whole is not None:  # a sentence the translator finished: as typed, their own (1.0)
            record.found, record.rendered = Found([(record.whole, 0.0)], 1.0), [(record.whole, 0.0)]
        elif record.typed is not None:
            spans = [span.text for span in record.prepared.spans]
            record.rendered = [(record.typed.continued(text, spans), score)
                               for text, score in record.rendered]
    if alternatives:  # at each text's first segment that is not typed whole
        at = open_segments(split, [whole for _, whole in marks])
        yield from alternatives_stage([records[i] for i in at], tokenizer, decode, alternatives)
    return Translated(split, records, broken_warning(split, max_positions))


def segment(texts: Sequence[str], tokenizer: Tokenizer, max_positions: int,
            segmenter: Segmenter | None) -> list[Segmented]:
    """The segment stage: each text split by `segmenter` and fitted to the model (no segment over
    `max_positions - 1` source pieces: EOS, a multi-pair model's tag counted; longer sentences
    broken, `fit`), or with None one segment per line (`whole_lines`, nothing broken)."""
    if segmenter is None:
        return [whole_lines(text) for text in texts]

    def count(segments: list[str]) -> list[int]:
        # A run of symbols is a span the model never reads (`mt.text.protect.SYMBOLS`): counted as a
        # space, so a hostile line of symbols is not broken into pieces only to be skipped.
        return [len(ids) for ids in tokenizer.encode_src([SYMBOL_RUN.sub(" ", s) for s in segments])]

    return fit([segmenter.split(text) for text in texts], count, max_positions - 1)


def broken_warning(texts: Sequence[Segmented], max_positions: int) -> str | None:
    """The one line saying how many sentences were too long and translated in pieces, or None."""
    broken = sum(text.broken for text in texts)
    if not broken:
        return None
    return (f"{broken} sentence{'s' * (broken != 1)} longer than {max_positions - 1} pieces "
            f"(model.max_positions={max_positions}, EOS included) translated in pieces, "
            "broken at clause punctuation or between words")


def constrain(lines: Sequence[str], tokenizer: Tokenizer, decode: DecodeConfig, terms: TermConstraints, *,
              first_pass: bool = True) -> Steps[tuple[list[list[Term]], list[Wanted], list[Choices]]]:
    """The constrain stage: (the terms found in each line, matched once; each line's constraints,
    falsy without a term; each line's outputs to choose from, () where it is searched). With the
    glossary's first pass ("swap") and `first_pass`, the lines holding a term are first searched
    (`mt.decode.swap.first_pass_searches`) and made from those outputs (`first_pass_wanted`: the
    outputs to choose from, or the words to avoid), aligning with the model where the lemmas do not
    find a term's word."""
    occurrences = terms.occurrences(lines)
    matched = [terms_in(found) for found in occurrences]
    wanted = [terms.wanted(found) for found in matched]
    choices: list[Choices] = [() for _ in lines]
    rows = [i for i, w in enumerate(wanted) if w]
    if terms.first_pass != "swap" or not rows or not first_pass:
        return matched, wanted, choices
    held, held_found = [lines[i] for i in rows], [occurrences[i] for i in rows]
    outputs = []
    for search in first_pass_searches(terms, held, held_found, decode):
        found = yield Search(search.lines, search.decode, search.n_best, list(range(len(search.lines))))
        outputs.append([[text for text, _ in answer.hyps] for answer in found])
    made, offered = yield Offload(lambda align: first_pass_wanted(terms, held, held_found, outputs, tokenizer,
                                                                  align))
    for i, line_wanted, line_choices in zip(rows, made, offered):
        wanted[i], choices[i] = line_wanted, line_choices
    return matched, wanted, choices


def search(lines: Sequence[str], decode: DecodeConfig, n_best: int | None, keys: Sequence[int],
           wanted: Sequence[Wanted] | None, choices: Sequence[Choices], glue: tuple[int, ...] = (),
           ) -> Steps[list[Found]]:
    """The search stage and the choice stage: the lines without outputs to choose from in one
    `Search` (with their constraints `wanted`, None without a glossary, and `glue`), then the lines
    with some (`choices`) in one `Choose`; each line's answer, in order. No step for a stage
    without lines (none at all for no lines)."""
    searched = [i for i, offered in enumerate(choices) if not offered]
    chosen = [i for i, offered in enumerate(choices) if offered]
    out: list[Found | None] = [None] * len(lines)
    if searched:
        found = yield Search([lines[i] for i in searched], decode, n_best, [keys[i] for i in searched],
                             None if wanted is None else [wanted[i] for i in searched], glue)
        for i, answer in zip(searched, found):
            out[i] = answer
    if chosen:
        found = yield Choose([lines[i] for i in chosen], [choices[i] for i in chosen], decode, n_best)
        for i, answer in zip(chosen, found):
            out[i] = answer
    return cast(list[Found], out)


def agree(lines: Sequence[str], found: list[Found], records: Sequence[Segment], tokenizer: Tokenizer,
          decode: DecodeConfig, n_best: int | None, terms: TermConstraints) -> Steps[list[Found]]:
    """The agree stage: searched lines holding a term with a grammar, their output offered again in
    agreement with it (`mt.decode.swap.agreeing`) and ranked in one `Choose`; the others kept."""
    rows = [i for i, r in enumerate(records)  # not a typed prefix's: its words stay as typed
            if r.wanted and not r.choices and r.typed is None and any(t.grammar for t in r.terms)]
    offered = agreeing(terms, [lines[i] for i in rows], [found[i].hyps[0][0] for i in rows], tokenizer,
                       terms.occurrences([lines[i] for i in rows])) if rows else []
    rows, offered = [i for i, o in zip(rows, offered) if o], [o for o in offered if o]
    again = (yield Choose([lines[i] for i in rows], offered, decode, n_best)) if rows else []
    return [dict(zip(rows, again)).get(i, answer) for i, answer in enumerate(found)]


def retry(lines: Sequence[str], found: list[Found], decode: DecodeConfig, n_best: int | None,
          keys: Sequence[int], held: Sequence[bool]) -> Steps[list[Found]]:
    """The retry stage: every output (its best) that still loops searched again with the strict
    settings and replaced where that repeats less (`decode.text.loop_retry`: `mt.decode.repeats`); a
    line `held` (keeping a glossary term) keeps its output: no piece twice could make a term
    impossible to write."""
    strict, rows = to_retry(decode, lines, [answer.hyps[0][0] for answer in found], lambda i: held[i])
    if strict is None or not rows:
        return found
    again = yield Search([lines[i] for i in rows], strict, n_best, [keys[i] for i in rows])
    out = list(found)
    for i, answer in zip(rows, again):
        if retry_wins(lines[i], found[i].hyps[0][0], answer.hyps[0][0]):
            out[i] = answer
    return out


def render(records: Sequence[Segment], tokenizer: Tokenizer) -> Steps[None]:
    """The render stage: every output of every record with its spans, case style and ending back
    (`render_nbest`: one alignment call for the segments that need one); nothing to do, and no
    model call, where no rule applied."""
    prepared, hyps = [r.prepared for r in records], [r.found.hyps for r in records]
    rendered = hyps
    if not all(p.identity for p in prepared):
        rendered = yield Offload(
            lambda align: render_nbest(prepared, hyps, align, truecase=truecaser(tokenizer))
        )
    for record, outputs in zip(records, rendered):
        record.rendered = outputs


def alternatives_stage(records: Sequence[Segment], tokenizer: Tokenizer, decode: DecodeConfig,
                       k: int) -> Steps[None]:
    """The alternatives stage (module docstring): `k` alternatives a record, from its
    ALTERNATIVE_PIECES x `k` most probable next pieces."""
    marks = [r.typed or EMPTY for r in records]
    tops = yield Expand([r.prepared.text for r in records], [m.wanted() for m in marks], decode,
                        ALTERNATIVE_PIECES * k)
    branch = [(i, extended(tokenizer, marks[i], piece), lp)
              for i, top in enumerate(tops) for piece, lp in top]
    found = yield Search([records[i].prepared.text for i, _, _ in branch], decode, None,
                         [records[i].key for i, _, _ in branch], [t.wanted() for _, t, _ in branch])
    tried = [Segment(records[i].prepared, records[i].key, found=answer)
             for (i, _, _), answer in zip(branch, found)]
    yield from render(tried, tokenizer)
    for (i, mark, log_prob), one in zip(branch, tried):
        spans = [span.text for span in records[i].prepared.spans]
        text, mine = mark.continued(one.rendered[0][0], spans), records[i].alternatives
        if len(mine) < k and all(word_at(mark, text) != word_at(mark, other) for other, _ in mine):
            mine.append((text, math.exp(log_prob)))


def drive(steps: Steps[T], search: Callable[[Search], list[Found]], aligner: Aligner | None,
          choose: Callable[[Choose], list[Found]] | None = None,
          expand: Callable[[Expand], list[list[tuple[int, float]]]] | None = None) -> T:
    """Run a path in this thread: each `Search` answered by `search`, each `Choose` by `choose`
    (a path without a glossary's first pass yields none: ValueError without it), each `Offload`
    run with `aligner`; the path's result."""
    answer: Any = None
    try:
        while True:
            step = steps.send(answer)
            if isinstance(step, Choose):
                if choose is None:
                    raise ValueError("drive: the path asks for a choice and no `choose` answers it")
                answer = choose(step)
            elif isinstance(step, Expand):
                if expand is None:
                    raise MTError("alternatives: this engine cannot rank next pieces (mt's own model can)")
                answer = expand(step)
            else:
                answer = search(step) if isinstance(step, Search) else step.run(aligner)
    except StopIteration as done:
        return done.value


def sampling_keys(texts: Sequence[Segmented], first_id: int) -> list[int]:
    """The sampling key of every segment of `texts`, in order: `first_id + i + j * SENTENCE_STRIDE`
    for segment j of text i (its first sentence keyed as the line itself)."""
    return [first_id + i + j * SENTENCE_STRIDE
            for i, text in enumerate(texts) for j in range(len(text.segments))]


def join_nbest(text: Segmented, per_segment: list[Hyps]) -> Hyps:
    """A segmented text's alternatives from its segments' n-best lists: the k-th puts every
    segment's k-th best (its last when it has fewer) between the gaps, scored by the mean of those
    segments' scores (0.0 for a text without words, which comes back as it was)."""
    if not per_segment:
        return [(text.render([]), 0.0)]
    k = max(len(hyps) for hyps in per_segment)
    picks = [[hyps[min(i, len(hyps) - 1)] for hyps in per_segment] for i in range(k)]
    return [(text.render([t for t, _ in pick]), sum(s for _, s in pick) / len(pick)) for pick in picks]
