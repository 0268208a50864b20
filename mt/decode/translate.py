"""Translating raw text with a trained model: the library behind `mt translate`, `mt evaluate`,
validation BLEU and the server.

Encode with the source sentencepiece model, batch sentences of similar length
(`mt.data.batching.decode_batches`), run the engine's search over each batch, put the results
back in input order and detokenise with the target model. The engine is mt's own Transformer
or Ensemble (`mt.decode.engine.NativeEngine`; a bare model is wrapped in one) or a model
exported to CTranslate2 (`mt.deploy.ct2.CT2Translator`). An empty input line gives an empty
output line without running the model, so outputs always line up with inputs. Nothing here
prints except a progress bar on request; a source line too long for the model is cut and
reported as an `MTWarning`.

`translate_lines` takes each line as one segment (what `mt evaluate` and validation translate:
sentence-aligned sets). `translate_texts` is what a person's text goes through: every text
split into sentences (`mt.text.segment`), sentences over the model's limit broken (never cut),
all texts' segments translated together in the same length-sorted batches, and each text
rendered back with its whitespace where it was. Placeholders, URLs, numbers and the like are kept
verbatim, ALL CAPS / Title Case lines translated in sentence case and a sentence without final
punctuation given none (`decode.protect`, `decode.case`, `decode.ending`: `mt.decode.protected`);
a sentence where none applies is translated as before.

`translate_scored` and `translate_texts_scored` give each output with its confidence
(`mt.decode.confidence`): the same search and the same outputs as `translate_lines` and
`translate_texts`.

With a glossary (`mt.decode.terms.TermConstraints`), a sentence in which a term is found is
translated by the constrained beam search, batched only with other such sentences; every other
sentence goes through the same batches and search as without a glossary (byte-identical output).
With the glossary's `first_pass` (mt's own model), those sentences are first translated greedily,
the words the model gave their terms are avoided by the constrained search, and (`place`) the
output starts as the first translation does up to the first such word (`term_lines`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import torch
from tqdm import tqdm

from mt.config import DecodeConfig
from mt.data.batching import decode_batches
from mt.data.tokenizer import Tokenizer
from mt.decode.align import align_words, aligner_for
from mt.decode.confidence import Scored, scored, text_confidence
from mt.decode.engine import Engine, NativeEngine, NativeModel, Results, as_engine, rows_per_sentence
from mt.decode.protected import prepare_segments, render_nbest, truecaser
from mt.decode.repeats import retry_wins, to_retry
from mt.decode.terms import PassSearch, TermConstraints, first_pass_searches, first_pass_wanted
from mt.decode.wanted import Wanted
from mt.errors import MTWarning
from mt.text.protect import render_all
from mt.text.segment import Segmented, Segmenter, fit

T = TypeVar("T")


def _map_sentences(
    engine: Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    progress: bool,
    search: Callable[[list[list[int]], list[int], list[list[list[int]]] | None], list[T]],
    empty: T,
    constraints: Sequence[list[list[int]]] | None = None,
) -> list[T]:
    """Run `search(B source id lists, their line indices, their constraints or None) -> B results`
    over length-sorted batches of the encoded lines; results come back in input order, `empty`
    for lines without any token. Lines with `constraints` are batched apart from the others."""
    # Stripped as prepare strips the corpus: a whitespace-only line is empty, not a run of spaces.
    # One sentencepiece call for all lines (its C++ threads), lengths and filters in numpy: no
    # Python loop per sentence beyond building the lists themselves.
    ids = tokenizer.encode_src([line.strip() for line in lines])
    all_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))  # (N,)
    limit = engine.max_positions - 1  # the source gets an EOS; longer input cannot be encoded
    too_long = int((all_lengths > limit).sum())
    if too_long:
        warnings.warn(f"{too_long} of {len(ids)} source lines longer than {limit} pieces are truncated "
                      f"(model.max_positions={limit + 1}, EOS included)", MTWarning, stacklevel=3)
        ids = [seq[:limit] for seq in ids]
        all_lengths = np.minimum(all_lengths, limit)
    # A line with no piece but a multi-pair model's target tag (an empty line) stays empty, untranslated.
    tagged = len(getattr(tokenizer, "src_prefix", ()))  # a stand-in tokenizer without tags has none
    todo = np.flatnonzero(all_lengths > tagged)
    results: list[T] = [empty] * len(ids)
    groups: list[tuple[np.ndarray, bool]] = [(todo, False)]
    if constraints is not None:  # sentences without a term keep the batches they have without a glossary
        has = np.fromiter(map(bool, constraints), dtype=bool, count=len(ids))[todo]
        groups = [(todo[~has], False), (todo[has], True)]
    with tqdm(total=len(ids), disable=not progress, file=sys.stderr, unit="sent", desc="translate") as bar:
        bar.update(len(ids) - len(todo))
        for group, constrained in groups:
            # decode.max_tokens bounds source tokens times the beam (or samples): search runs B * beam rows.
            budget = max(1, decode.max_tokens // rows_per_sentence(decode, constrained=constrained))
            for batch in decode_batches(all_lengths[group], max_tokens=budget, max_sentences=budget):
                rows = group[batch].tolist()
                found = search([ids[i] for i in rows], rows, [constraints[i] for i in rows] if constrained else None)
                for row, result in zip(rows, found):
                    results[row] = result
                bar.update(len(rows))
    return results


def term_lines(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig, *,
               device: torch.device | str, glossary: TermConstraints) -> list[Wanted]:
    """Each line's constraints (`TermConstraints.for_lines`); with `glossary.first_pass` and mt's
    own model, the lines holding a term are first translated (`mt.decode.terms.first_pass_searches`)
    and given the outputs to choose from or the words to avoid (`first_pass_wanted`)."""
    wanted = glossary.for_lines(lines)
    rows = [i for i, w in enumerate(wanted) if w]
    if glossary.first_pass == "off" or not rows or not isinstance(engine, NativeEngine):
        return wanted
    held = [lines[i] for i in rows]

    def align(src: list[str], tgt: list[str]) -> list[list[int]]:
        return align_words(engine.model, tokenizer, src, tgt, device=device)

    def run(search: PassSearch) -> list[list[str]]:  # each line's outputs, best first
        if search.n_best is None:
            return [[text] for text in translate_lines(engine, tokenizer, search.lines, search.decode, device=device)]
        nbest = translate_nbest(engine, tokenizer, search.lines, search.decode, device=device)
        return [[text for text, _ in hyps] for hyps in nbest]

    outputs = [run(search) for search in first_pass_searches(glossary, held, decode)]
    found = first_pass_wanted(glossary, held, outputs, tokenizer, align)
    for i, w in zip(rows, found):
        wanted[i] = w
    return wanted


def _glue(glossary: TermConstraints | None) -> Sequence[int]:
    """The pieces barred after a finished term (`search_ids`' `glue`); none without a glossary."""
    return () if glossary is None else glossary.glue


def translate_lines(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
    first_id: int = 0,
    sentence_ids: Sequence[int] | None = None,
    glossary: TermConstraints | None = None,
) -> list[str]:
    """Translate raw lines (sampling when decode.sampling, else greedy when decode.beam == 1,
    else beam search) -> one detokenised line each, in input order. The model is put in eval
    mode and restored afterwards, so the trainer may pass its (unwrapped, not DDP) model for
    validation BLEU. Sampling keys line i's draws by `first_id + i`: the same lines and seed
    give the same output however they are batched (or fed one by one with matching first_id);
    `sentence_ids` (one per line) replaces `first_id + i` as line i's key. With `glossary`, a
    line holding its terms is translated by the constrained beam search (module docstring)."""
    engine = as_engine(model, device)
    keys = sentence_ids if sentence_ids is not None else range(first_id, first_id + len(lines))

    def search(src_ids: list[list[int]], rows: list[int], cons: list[list[list[int]]] | None) -> list[list[int]]:
        found = engine.search_ids(src_ids, decode, n_best=None, sentence_ids=[keys[r] for r in rows],
                                  constraints=cons, glue=_glue(glossary))
        return [hyps[0][0] for hyps in found]

    tokens = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[],
                            constraints=None if glossary is None else term_lines(
                                engine, tokenizer, lines, decode, device=device, glossary=glossary))
    return tokenizer.decode_tgt(tokens)


def translate_scored(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
    first_id: int = 0,
    sentence_ids: Sequence[int] | None = None,
    glossary: TermConstraints | None = None,
) -> list[Scored]:
    """`translate_lines` with what each output's confidence is made from (`Scored`: its source,
    text, source pieces, token count and log-prob); `Scored.confidence(decode)` is the number. The
    outputs are `translate_lines`' (the same search, which returns each output's score with it)."""
    engine = as_engine(model, device)
    keys = sentence_ids if sentence_ids is not None else range(first_id, first_id + len(lines))
    src_ids: list[list[int]] = [[] for _ in lines]

    def search(ids: list[list[int]], rows: list[int], cons: list[list[list[int]]] | None) -> list[Results]:
        for row, seq in zip(rows, ids):
            src_ids[row] = seq
        return [hyps[:1] for hyps in engine.search_ids(ids, decode, n_best=None, sentence_ids=[keys[r] for r in rows],
                                                       constraints=cons, glue=_glue(glossary))]

    found = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[([], 0.0)],
                           constraints=None if glossary is None else term_lines(
                               engine, tokenizer, lines, decode, device=device, glossary=glossary))
    texts = tokenizer.decode_tgt([hyps[0][0] for hyps in found])
    return [scored(line, text, ids, len(hyps[0][0]), hyps[0][1], decode)
            for line, text, ids, hyps in zip(lines, texts, src_ids, found)]


def translate_nbest(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
    first_id: int = 0,
    sentence_ids: Sequence[int] | None = None,
    glossary: TermConstraints | None = None,
) -> list[list[tuple[str, float]]]:
    """The `decode.n_best` best translations of each line with their length-normalised scores,
    best first (beam search, also for beam 1), or `decode.n_best` samples when decode.sampling
    (highest score first; keyed as in `translate_lines`). An empty line gives [("", 0.0)].
    `glossary` as in `translate_lines` (hypotheses meeting more of the terms first)."""
    engine = as_engine(model, device)
    keys = sentence_ids if sentence_ids is not None else range(first_id, first_id + len(lines))

    def search(src_ids: list[list[int]], rows: list[int], cons: list[list[list[int]]] | None) -> list[Results]:
        return engine.search_ids(src_ids, decode, n_best=decode.n_best, sentence_ids=[keys[r] for r in rows],
                                 constraints=cons, glue=_glue(glossary))

    found = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search, empty=[([], 0.0)],
                           constraints=None if glossary is None else term_lines(
                               engine, tokenizer, lines, decode, device=device, glossary=glossary))
    texts = iter(tokenizer.decode_tgt([tokens for nbest in found for tokens, _ in nbest]))
    return [[(next(texts), s) for _, s in nbest] for nbest in found]


def segment_for_model(texts: Sequence[str], tokenizer: Tokenizer, max_positions: int,
                      segmenter: Segmenter) -> list[Segmented]:
    """Each text split by `segmenter` and fitted to the model: no segment over `max_positions - 1`
    source pieces (EOS; a multi-pair model's tag counted), longer sentences broken (`fit`).
    `broken_warning` words the one warning for what was broken."""
    def count(segments: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer.encode_src(segments)]

    return fit([segmenter.split(text) for text in texts], count, max_positions - 1)


def broken_warning(texts: Sequence[Segmented], max_positions: int) -> str | None:
    """The one line saying how many sentences were too long and translated in pieces, or None."""
    broken = sum(text.broken for text in texts)
    if not broken:
        return None
    return (f"{broken} sentence{'s' * (broken != 1)} longer than {max_positions - 1} pieces (model.max_positions="
            f"{max_positions}, EOS included) translated in pieces, broken at clause punctuation or between words")


def translate_texts(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    segmenter: Segmenter,
    progress: bool = False,
    first_id: int = 0,
    glossary: TermConstraints | None = None,
) -> list[str]:
    """Translate texts as people write them -> one translated text each, same shape: every text
    split into sentences by `segmenter`, long ones broken to fit the model (one `MTWarning` per
    call when any was), all segments of all texts translated together by `translate_lines` and
    put back between the text's own gaps. A text without words comes back as it was. Sampling
    keys segment j of text i by `sampling_keys`: a one-sentence text draws what `translate_lines`
    draws for it as line `first_id + i`, and any chunking or line-by-line feeding gives the same.
    `glossary`: terms are found in each sentence and kept there (`translate_lines`)."""
    engine = as_engine(model, device)
    split = segment_for_model(texts, tokenizer, engine.max_positions, segmenter)
    note = broken_warning(split, engine.max_positions)
    if note:
        warnings.warn(note, MTWarning, stacklevel=2)
    prepared = prepare_segments([segment for text in split for segment in text.segments], tokenizer, decode)
    sources, keys = [p.text for p in prepared], sampling_keys(split, first_id)
    done = retry_loops(translate_lines, str, engine, tokenizer, sources, keys, decode, device=device, progress=progress,
                       glossary=glossary)
    found = iter(render_all(prepared, done, aligner_for(engine, tokenizer), truecase=truecaser(tokenizer)))
    return [text.render([next(found) for _ in text.segments]) for text in split]


def translate_texts_nbest(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    segmenter: Segmenter,
    progress: bool = False,
    first_id: int = 0,
    glossary: TermConstraints | None = None,
) -> list[list[tuple[str, float]]]:
    """`translate_texts` with `decode.n_best` alternatives per text: the k-th alternative puts
    every segment's k-th best (its last when it has fewer) between the gaps, scored by the mean of
    those segments' scores (0.0 for a text without words, which comes back as it was)."""
    engine = as_engine(model, device)
    split = segment_for_model(texts, tokenizer, engine.max_positions, segmenter)
    note = broken_warning(split, engine.max_positions)
    if note:
        warnings.warn(note, MTWarning, stacklevel=2)
    prepared = prepare_segments([segment for text in split for segment in text.segments], tokenizer, decode)
    sources, keys = [p.text for p in prepared], sampling_keys(split, first_id)
    done = retry_loops(translate_nbest, lambda hyps: hyps[0][0], engine, tokenizer, sources, keys, decode,
                       device=device, progress=progress, glossary=glossary)
    found = iter(render_nbest(prepared, done, aligner_for(engine, tokenizer), truecase=truecaser(tokenizer)))
    return [join_nbest(text, [next(found) for _ in text.segments]) for text in split]


def translate_texts_scored(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    segmenter: Segmenter,
    progress: bool = False,
    first_id: int = 0,
    glossary: TermConstraints | None = None,
) -> list[tuple[str, float]]:
    """`translate_texts` with each text's confidence: its least confident sentence's
    (`mt.decode.confidence.text_confidence`; 1.0 for a text without words)."""
    engine = as_engine(model, device)
    split = segment_for_model(texts, tokenizer, engine.max_positions, segmenter)
    note = broken_warning(split, engine.max_positions)
    if note:
        warnings.warn(note, MTWarning, stacklevel=2)
    prepared = prepare_segments([segment for text in split for segment in text.segments], tokenizer, decode)
    sources, keys = [p.text for p in prepared], sampling_keys(split, first_id)
    done = retry_loops(translate_scored, lambda s: s.output, engine, tokenizer, sources, keys, decode, device=device,
                       progress=progress, glossary=glossary)
    rendered = render_all(prepared, [s.output for s in done], aligner_for(engine, tokenizer), truecase=truecaser(tokenizer))
    found = iter(zip(rendered, done))
    out = []
    for text in split:
        mine = [next(found) for _ in text.segments]
        out.append((text.render([output for output, _ in mine]), text_confidence([s.confidence(decode) for _, s in mine])))
    return out


def retry_loops(search: Callable[..., list[T]], text_of: Callable[[T], str], engine: Engine, tokenizer: Tokenizer,
                sources: list[str], keys: list[int], decode: DecodeConfig, *, device: torch.device | str,
                progress: bool, glossary: TermConstraints | None) -> list[T]:
    """`search` (`translate_lines`, `translate_nbest` or `translate_scored`) of the sentences
    `sources` keyed by `keys`, then every output (`text_of` a result) that still loops searched
    again with the strict settings and replaced where that repeats less (`decode.loop_retry`:
    `mt.decode.repeats`). A sentence holding a glossary term keeps its constrained search's output:
    no piece twice could make a term impossible to write."""
    found = search(engine, tokenizer, sources, decode, device=device, progress=progress, sentence_ids=keys,
                   glossary=glossary)

    def holds_term(i: int) -> bool:
        return glossary is not None and bool(glossary.for_lines([sources[i]])[0])

    strict, rows = to_retry(decode, sources, [text_of(result) for result in found], holds_term)
    if strict is None or not rows:
        return found
    again = search(engine, tokenizer, [sources[i] for i in rows], strict, device=device,
                   sentence_ids=[keys[i] for i in rows])
    for i, result in zip(rows, again):
        if retry_wins(sources[i], text_of(found[i]), text_of(result)):
            found[i] = result
    return found


SENTENCE_STRIDE = 1 << 32  # sampling keys: sentence j of line i is line i's id + j x this


def sampling_keys(texts: Sequence[Segmented], first_id: int) -> list[int]:
    """The sampling key of every segment of `texts`, in order: `first_id + i + j * SENTENCE_STRIDE`
    for segment j of text i (its first sentence keyed as the line itself)."""
    return [first_id + i + j * SENTENCE_STRIDE for i, text in enumerate(texts) for j in range(len(text.segments))]


def join_nbest(text: Segmented, per_segment: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """A segmented text's alternatives from its segments' n-best lists (see `translate_texts_nbest`)."""
    if not per_segment:
        return [(text.render([]), 0.0)]
    k = max(len(hyps) for hyps in per_segment)
    picks = [[hyps[min(i, len(hyps) - 1)] for hyps in per_segment] for i in range(k)]
    return [(text.render([t for t, _ in pick]), sum(s for _, s in pick) / len(pick)) for pick in picks]
