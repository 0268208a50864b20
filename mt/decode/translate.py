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

`search_lines` takes each line as one segment (what `mt evaluate` and validation translate:
sentence-aligned sets): the search stage alone, after the constrain stage when a glossary is
given. `translate_path` is what a person's text goes through: the one translation path
(`mt.decode.pipeline`: segment, prepare, constrain, search, retry, render), driven here with
`search_found` on the engine; `translate_texts`, `translate_texts_nbest` and
`translate_texts_scored` are its output kinds. The server drives the same path with its batcher.

Its `LineResults` are formatted at the edge: `best()` (what `translate_lines` returns), `scored()`
(each output with what its confidence is made from: `mt.decode.confidence`) and `nbest()`.

With a glossary (`mt.decode.terms.TermConstraints`), a sentence in which a term is found is
translated by the constrained beam search, batched only with other such sentences; every other
sentence goes through the same batches and search as without a glossary (byte-identical output).
With the glossary's `first_pass` ("swap", mt's own model), those sentences are first searched
and the term put in the place of the model's own word (`mt.decode.pipeline.constrain`): a sentence
offered such outputs is not searched again but chosen (`choice_found`, `Chooser.choose_ids`: the
outputs ranked by one forced pass; line by line, in the batches the constrained ones take).
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import numpy as np
import torch
from tqdm import tqdm

from mt.config import DecodeConfig
from mt.data.batching import decode_batches
from mt.data.tokenizer import Tokenizer
from mt.decode.align import aligner_for
from mt.decode.confidence import Scored, scored
from mt.decode.engine import Chooser, Engine, NativeModel, Results, as_engine, rows_per_sentence
from mt.decode.pipeline import Translated, constrain, drive, translate_steps
from mt.decode.steps import Choose, Expand, Found, Search
from mt.decode.swap import agreeing
from mt.decode.terms import TermConstraints
from mt.decode.wanted import Choices, Wanted
from mt.errors import MTError, MTWarning
from mt.text.segment import Segmenter

T = TypeVar("T")


def _map_sentences(
    engine: Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    progress: bool,
    search: Callable[[list[list[int]], list[int], bool], list[T]],
    empty: T,
    held: Sequence[bool] | None = None,
) -> list[T]:
    """Run `search(B source id lists, their line indices, whether they are `held`) -> B results`
    over length-sorted batches of the encoded lines; results come back in input order, `empty`
    for lines without any token. Lines `held` (keeping a glossary's terms: constrained or chosen)
    are batched apart from the others, with the budget of a constrained search."""
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
    if held is not None:  # sentences without a term keep the batches they have without a glossary
        has = np.fromiter(held, dtype=bool, count=len(ids))[todo]
        groups = [(todo[~has], False), (todo[has], True)]
    with tqdm(total=len(ids), disable=not progress, file=sys.stderr, unit="sent", desc="translate") as bar:
        bar.update(len(ids) - len(todo))
        for group, constrained in groups:
            # decode.resources.max_tokens bounds source tokens times the beam (or samples): search runs
            # B * beam rows.
            budget = max(1, decode.resources.max_tokens // rows_per_sentence(decode, constrained=constrained))
            for batch in decode_batches(all_lengths[group], max_tokens=budget, max_sentences=budget):
                rows = group[batch].tolist()
                found = search([ids[i] for i in rows], rows, constrained)
                for row, result in zip(rows, found):
                    results[row] = result
                bar.update(len(rows))
    return results


def search_found(engine: Engine, tokenizer: Tokenizer, search: Search, *, progress: bool = False,
                 rate: bool = True) -> list[Found]:
    """The search stage run here, on `engine`: each line of `search` (constraints and glue with it;
    `keys` key sampling) -> its outputs as texts with their scores, best first, and (`rate`) its
    1-best's confidence (`mt.decode.confidence`). What `drive` answers every `Search` of the one
    translation path with in `mt translate`; the server answers it with its batcher."""
    found, src_ids = _search_results(engine, tokenizer, search.lines, search.decode,
                                     n_best=search.n_best, keys=search.keys, progress=progress,
                                     wanted=search.wanted, glue=search.glue)
    return _as_found(tokenizer, search.lines, src_ids, found, search.decode, rate)


def choice_found(engine: Chooser, tokenizer: Tokenizer, choose: Choose, *, rate: bool = True) -> list[Found]:
    """The choice stage run on `engine` (`Chooser.choose_ids`: one forced-decoding pass per batch):
    each line of `choose` -> its outputs to choose from, best first by the model's log-prob, as
    texts with beam search's scores, and (`rate`) its 1-best's confidence, as `search_found` gives
    them. What `drive` answers every `Choose` of the path with in `mt translate`; the server runs
    it in its model worker (`mt.serve.jobs`)."""
    found, src_ids = _search_results(engine, tokenizer, choose.lines, choose.decode, n_best=choose.n_best,
                                     keys=range(len(choose.lines)), progress=False, wanted=None, glue=(),
                                     choices=choose.choices)
    return _as_found(tokenizer, choose.lines, src_ids, found, choose.decode, rate)


def expand_found(engine: Engine, tokenizer: Tokenizer, expand: Expand) -> list[list[tuple[int, float]]]:
    """The alternatives stage's `Expand` run on `engine` (mt's own model: `NativeEngine.next_ids`):
    each line's most probable next pieces after its prefix, with their log-probs."""
    if not hasattr(engine, "next_ids"):
        raise MTError("--alternatives: this engine cannot rank the next pieces; use mt's own checkpoint")
    ids = tokenizer.encode_src([line.strip() for line in expand.lines])
    ids = [seq[:engine.max_positions - 1] for seq in ids]
    return engine.next_ids(ids, expand.wanted, expand.decode, expand.k)


def _as_found(tokenizer: Tokenizer, lines: Sequence[str], src_ids: Sequence[list[int]],
              found: Sequence[Results], decode: DecodeConfig, rate: bool) -> list[Found]:
    """Each line's results (token ids, scores) as a `Found`: texts, and with `rate` the 1-best's
    confidence."""
    texts = iter(tokenizer.decode_tgt([tokens for hyps in found for tokens, _ in hyps]))
    out = []
    for line, ids, hyps in zip(lines, src_ids, found):
        outputs = [(next(texts), score) for _, score in hyps]
        sure = (scored(line, outputs[0][0], ids, len(hyps[0][0]), hyps[0][1], decode).confidence(decode)
                if rate else math.nan)
        out.append(Found(outputs, sure))
    return out


def _search_results(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig, *,
                    n_best: int | None, keys: Sequence[int], progress: bool, wanted: Sequence[Wanted] | None,
                    glue: Sequence[int], choices: Sequence[Choices] | None = None,
                    ) -> tuple[list[Results], list[list[int]]]:
    """(each line's results, its source ids as the model read them): the one run every translate
    function here makes; an empty line gives [([], 0.0)] and no ids. A line with outputs to choose
    from (`choices`) gets `Chooser.choose_ids`' (the choice stage), every other `engine.search_ids`'
    (with its constraints `wanted`, batched apart where it has one)."""
    src_ids: list[list[int]] = [[] for _ in lines]
    offered = choices if choices is not None else [() for _ in lines]

    def search(ids: list[list[int]], rows: list[int], held: bool) -> list[Results]:
        for row, seq in zip(rows, ids):
            src_ids[row] = seq
        chosen = [i for i, r in enumerate(rows) if offered[r]]
        found: list[Results] = [[] for _ in rows]
        if chosen:
            picked = cast(Chooser, engine).choose_ids(
                [ids[i] for i in chosen], [offered[rows[i]] for i in chosen], decode, n_best=n_best)
            for i, results in zip(chosen, picked):
                found[i] = results
        rest = [i for i, r in enumerate(rows) if not offered[r]]
        if rest:
            cons = [wanted[rows[i]] for i in rest] if held and wanted is not None else None
            searched = engine.search_ids([ids[i] for i in rest], decode, n_best=n_best,
                                         sentence_ids=[keys[rows[i]] for i in rest],
                                         constraints=cons, glue=glue)  # type: ignore[arg-type]
            for i, results in zip(rest, searched):
                found[i] = results
        return found if n_best is not None else [hyps[:1] for hyps in found]

    held = None
    if wanted is not None or choices is not None:
        held = [bool(offered[i]) or (wanted is not None and bool(wanted[i])) for i in range(len(lines))]
    found = _map_sentences(engine, tokenizer, lines, decode, progress=progress, search=search,
                           empty=[([], 0.0)], held=held)
    return found, src_ids


def lines_wanted(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig,
                 glossary: TermConstraints) -> tuple[list[Wanted], list[Choices]]:
    """(each line's constraints, its outputs to choose from) by the constrain stage
    (`mt.decode.pipeline.constrain`: terms matched once; with the glossary's first pass and mt's
    own model, the outputs to choose from or the words to avoid), run here on `engine`: what a
    line-level translation with a glossary searches, or chooses from."""
    align = aligner_for(engine, tokenizer)
    steps = constrain(lines, tokenizer, decode, glossary, first_pass=align is not None)
    _, wanted, choices = drive(steps, lambda search: search_found(engine, tokenizer, search, rate=False),
                               align)
    return wanted, choices


def _constraints(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig,
                 glossary: TermConstraints | None) -> tuple[list[Wanted] | None, list[Choices] | None]:
    """`lines_wanted`, or (None, None) without a glossary."""
    return (None, None) if glossary is None else lines_wanted(engine, tokenizer, lines, decode, glossary)


def _glue(glossary: TermConstraints | None) -> tuple[int, ...]:
    """The pieces barred after a finished term (`Engine.search_ids`' `glue`); none without a glossary."""
    return () if glossary is None else glossary.glue


def _keyed(lines: Sequence[str], first_id: int, sentence_ids: Sequence[int] | None) -> Sequence[int]:
    """Line i's sampling key: `sentence_ids[i]`, else `first_id + i`."""
    return sentence_ids if sentence_ids is not None else range(first_id, first_id + len(lines))


@dataclass(frozen=True)
class LineResults:
    """What one search of raw lines found (`search_lines`), formatted at the edge: each line's
    hypotheses as token ids with their length-normalised scores, best first ([([], 0.0)] for an
    empty line), and its source ids as the model read them."""

    lines: Sequence[str]
    found: list[Results]
    src_ids: list[list[int]]
    tokenizer: Tokenizer
    decode: DecodeConfig

    def best(self) -> list[str]:
        """Each line's best output, detokenised."""
        return self.tokenizer.decode_tgt([hyps[0][0] for hyps in self.found])

    def scored(self) -> list[Scored]:
        """Each best output with what its confidence is made from (`Scored`: source, text, source
        pieces, token count, log-prob); `Scored.confidence(decode)` is the number."""
        return [scored(line, text, ids, len(hyps[0][0]), hyps[0][1], self.decode)
                for line, text, ids, hyps in zip(self.lines, self.best(), self.src_ids, self.found)]

    def nbest(self) -> list[list[tuple[str, float]]]:
        """Each line's outputs as (text, score), best first."""
        empty: list[list[int]] = [[] for _ in self.lines]
        return [f.hyps for f in _as_found(self.tokenizer, self.lines, empty, self.found, self.decode, False)]


def search_lines(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    n_best: int | None = None,
    progress: bool = False,
    first_id: int = 0,
    sentence_ids: Sequence[int] | None = None,
    glossary: TermConstraints | None = None,
) -> LineResults:
    """Raw lines searched as they are, one segment each (what `mt evaluate`, validation BLEU and
    `--no-segment` read): sampling when decode.search.sampling, else greedy when decode.search.beam == 1, else
    beam search; `n_best` hypotheses a line (None: the best alone). The model is put in eval mode
    and restored afterwards, so the trainer may pass its (unwrapped, not DDP) model. Sampling keys
    line i's draws by `first_id + i` (or `sentence_ids[i]`): the same lines and seed give the same
    output however they are batched. With `glossary`, a line holding its terms is chosen among its
    swapped outputs or translated by the constrained beam search (module docstring); n-best
    hypotheses meeting more of the terms come first."""
    engine = as_engine(model, device)
    wanted, choices = _constraints(engine, tokenizer, lines, decode, glossary)
    found, src_ids = _search_results(engine, tokenizer, lines, decode, n_best=n_best, progress=progress,
                                     keys=_keyed(lines, first_id, sentence_ids), wanted=wanted,
                                     glue=_glue(glossary), choices=choices)
    if glossary is not None and wanted is not None:
        found = _agreed(engine, tokenizer, lines, decode, glossary, wanted, choices, found, src_ids, n_best)
    return LineResults(lines, found, src_ids, tokenizer, decode)


def _agreed(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig,
            glossary: TermConstraints, wanted: Sequence[Wanted], choices: Sequence[Choices] | None,
            found: list[Results], src_ids: list[list[int]], n_best: int | None) -> list[Results]:
    """The path's agree stage (`mt.decode.pipeline.agree`) for raw lines: a searched line holding a
    term with a grammar chooses among its output with the words around the term in agreement."""
    rows = [i for i, w in enumerate(wanted) if w and not (choices and choices[i])
            and any(t.grammar for t in glossary.terms_of([lines[i]])[0])]
    held = [lines[i] for i in rows]
    offered = agreeing(glossary, held, tokenizer.decode_tgt([found[i][0][0] for i in rows]), tokenizer,
                       glossary.occurrences(held)) if rows else []
    rows, offered = [i for i, o in zip(rows, offered) if o], [o for o in offered if o]
    if not rows:
        return found
    picked = cast(Chooser, engine).choose_ids([src_ids[i] for i in rows], offered, decode, n_best=n_best)
    out = list(found)
    for i, results in zip(rows, picked):
        out[i] = results if n_best is not None else results[:1]
    return out


def translate_lines(model: NativeModel | Engine, tokenizer: Tokenizer, lines: Sequence[str],
                    decode: DecodeConfig, *, device: torch.device | str, progress: bool = False,
                    first_id: int = 0, sentence_ids: Sequence[int] | None = None,
                    glossary: TermConstraints | None = None) -> list[str]:
    """Each line's best translation, in input order (`search_lines`' `best`)."""
    return search_lines(model, tokenizer, lines, decode, device=device, progress=progress, first_id=first_id,
                        sentence_ids=sentence_ids, glossary=glossary).best()


def translate_path(
    model: NativeModel | Engine,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    segmenter: Segmenter | None,
    n_best: int | None = None,
    progress: bool = False,
    first_id: int = 0,
    glossary: TermConstraints | None = None,
    rate: bool = False,
    prefixes: Sequence[str] | None = None,
    alternatives: int = 0,
) -> Translated:
    """Texts as people write them through the one translation path (`mt.decode.pipeline`), its
    searches run here on the model: every text split into sentences by `segmenter`, long ones
    broken to fit the model (one `MTWarning` per call when any was), spans, case and ending
    prepared, a glossary's terms kept, all segments of all texts searched together
    (`n_best`: None for each one's best, else that many alternatives), loops retried, and each text
    rendered back between its own gaps. The output kinds are `Translated`'s. Sampling keys segment
    j of text i by `sampling_keys`: a one-sentence text draws what `translate_lines` draws for it as
    line `first_id + i`, and any chunking or line-by-line feeding gives the same. `rate`: each
    segment's confidence computed (`Translated.confidences`; NaN without it: 87 ms per 500
    sentences on a Zen 3, 2-4% of a search, spent only where it is read). `prefixes`: each text's
    typed target prefix for its output to continue ('' for none: the pipeline's continue stage);
    `alternatives` K: the K next words after each (`Translated.alternatives`)."""
    engine = as_engine(model, device)
    align = aligner_for(engine, tokenizer)
    steps = translate_steps(texts, tokenizer, decode, max_positions=engine.max_positions, segmenter=segmenter,
                            n_best=n_best, first_id=first_id, terms=glossary, first_pass=align is not None,
                            prefixes=prefixes, alternatives=alternatives)
    done = drive(steps, lambda search: search_found(engine, tokenizer, search, progress=progress, rate=rate),
                 align, lambda choose: choice_found(cast(Chooser, engine), tokenizer, choose, rate=rate),
                 lambda expand: expand_found(engine, tokenizer, expand))
    if done.broken:
        warnings.warn(done.broken, MTWarning, stacklevel=2)
    return done


def translate_texts(model: NativeModel | Engine, tokenizer: Tokenizer, texts: Sequence[str],
                    decode: DecodeConfig, *, device: torch.device | str, segmenter: Segmenter,
                    progress: bool = False, first_id: int = 0,
                    glossary: TermConstraints | None = None) -> list[str]:
    """Each text translated (`translate_path`'s `best`); a text without words comes back as it was."""
    return translate_path(model, tokenizer, texts, decode, device=device, segmenter=segmenter,
                          progress=progress, first_id=first_id, glossary=glossary).best()


def translate_texts_nbest(model: NativeModel | Engine, tokenizer: Tokenizer, texts: Sequence[str],
                          decode: DecodeConfig, *, device: torch.device | str, segmenter: Segmenter,
                          progress: bool = False, first_id: int = 0, glossary: TermConstraints | None = None,
                          ) -> list[list[tuple[str, float]]]:
    """Each text's `decode.search.n_best` alternatives (`Translated.nbest`: the k-th joins every segment's
    k-th best, scored by their mean)."""
    return translate_path(model, tokenizer, texts, decode, device=device, segmenter=segmenter,
                          n_best=decode.search.n_best, progress=progress, first_id=first_id,
                          glossary=glossary).nbest()


def translate_texts_scored(model: NativeModel | Engine, tokenizer: Tokenizer, texts: Sequence[str],
                           decode: DecodeConfig, *, device: torch.device | str, segmenter: Segmenter,
                           progress: bool = False, first_id: int = 0, glossary: TermConstraints | None = None,
                           ) -> list[tuple[str, float]]:
    """Each text translated with its confidence: its least confident sentence's
    (`mt.decode.confidence.text_confidence`; 1.0 for a text without words)."""
    done = translate_path(model, tokenizer, texts, decode, device=device, segmenter=segmenter,
                          progress=progress, first_id=first_id, glossary=glossary, rate=True)
    return list(zip(done.best(), done.confidences()))
