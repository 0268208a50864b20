"""The model behind translation: an `Engine` takes source token ids and returns output token ids.

`search_batch` is the ONE place a `DecodeConfig` becomes a search call (sampling when
decode.search.sampling, else greedy for beam 1 and beam search above): it makes the search's settings
once (`mt.decode.rules.search_settings`) and hands them whole to the search, whose every step obeys
`mt.decode.rules.apply_rules`. `NativeEngine` runs it on mt's own Transformer or Ensemble;
`mt.deploy.ct2.CT2Translator` is the other engine (a model exported to CTranslate2). A `Chooser`
(`NativeEngine`, the server's worker) also answers the path's choice stage: given outputs ranked
by one forced pass (`choose_ids`, mt.decode.forced.choose_outputs), no search.
`mt.deploy.loading.load_model` picks one from what `-c` names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, overload

import torch

from mt.config import DecodeConfig
from mt.data.batching import collate_source
from mt.decode.alternatives import next_pieces
from mt.decode.beam import beam_search
from mt.decode.constrained import constrained_beam_search
from mt.decode.forced import choose_outputs
from mt.decode.rules import search_settings
from mt.decode.sampling import sample_search
from mt.decode.search import Hypothesis, greedy_hypotheses
from mt.decode.wanted import Choices, Wanted
from mt.device import bf16_feature
from mt.errors import MTError
from mt.model.ensemble import Ensemble, max_positions
from mt.model.transformer import Transformer

# A CPU search over at most this many decoder rows (sentences x beam, or samples) runs on one
# intra-op thread. At a few rows each of a decoder step's ~100 ops is a few microseconds of work,
# less than handing half of it to a second thread and waiting for it: on the shared 2-core
# development machine one thread ran a step 3.4x (1 row) and 6x (5 rows) faster than two, and
# batch-1 sentences 6-7x faster (docs/performance.md). Larger batches keep torch's count: there
# a second thread has real work to share on a machine that is not oversubscribed.
SINGLE_THREAD_ROWS = 8


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to `threads` inside the block (None: left as it is),
    restored afterwards."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def rows_per_sentence(decode: DecodeConfig, *, constrained: bool = False) -> int:
    """Decoder rows one sentence takes: its samples when sampling, else the beam of the search
    `search_settings` makes (at least `CONSTRAINED_BEAM` for a sentence with constraints)."""
    if decode.search.sampling:
        return decode.search.n_best
    return search_settings(decode.search, constrained=constrained).beam


NativeModel = Transformer | Ensemble  # mt's own model (a NativeEngine runs it)


@overload
def search_batch(model: NativeModel, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: None = None, sentence_ids: list[int] | None = None,
                 on_done: Callable[[int, list[int]], None] | None = None,
                 constraints: list[list[list[int]]] | None = None,
                 glue: Sequence[int] = ()) -> list[list[int]]: ...
@overload
def search_batch(model: NativeModel, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                 n_best: int, sentence_ids: list[int] | None = None,
                 on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                 constraints: list[list[list[int]]] | None = None,
                 glue: Sequence[int] = ()) -> list[list[Hypothesis]]: ...
def search_batch(
    model: NativeModel, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
    n_best: int | None = None, sentence_ids: list[int] | None = None,
    on_done: Callable[[int, list[int]], None] | Callable[[int, list[Hypothesis]], None] | None = None,
    constraints: list[list[list[int]]] | None = None, glue: Sequence[int] = (),
) -> list[list[int]] | list[list[Hypothesis]]:
    """The search `decode` asks for over one batch. src, src_mask: (B, S) on the model's device.

    Without `n_best`: the best output's tokens per sentence (no BOS/EOS), by greedy search when
    decode.search.beam == 1, else by beam search. With `n_best`: each sentence's `n_best` hypotheses
    with their scores, best first, by beam search (also for beam 1). With `decode.search.sampling`,
    one sample per sentence, or with `n_best` that many, highest score first; `sentence_ids`
    (B ints, default 0..B-1) key each sentence's random draws (see mt.decode.sampling). Outputs stay
    below the model's max_positions. The caller chooses train/eval mode and gradient tracking.
    `on_done(b, result)`, where given, gets sentence b's result (what the returned list will hold
    for it) as soon as the search has it (greedy: its EOS; beam: it stops; sampling: its last sample ends).
    `constraints` (B lists of target token-id sequences, e.g. glossary terms): a constrained beam
    search (mt.decode.constrained) of beam `rows_per_sentence(decode, constrained=True)`; `glue`:
    tokens barred right after a constraint (they would continue its last word). Every search
    obeys the same rules at each step (mt.decode.rules: limits, banned tokens, decode's loop guard).
    """
    if n_best is None:
        report = _best_tokens(on_done) if on_done is not None else None  # type: ignore[arg-type]
        found = search_best(model, src, src_mask, decode, sentence_ids=sentence_ids, on_done=report,
                            constraints=constraints, glue=glue)
        return [hyps[0].tokens for hyps in found]
    return _search(model, src, src_mask, decode, n_best, greedy=False, sentence_ids=sentence_ids,
                   on_done=on_done, constraints=constraints, glue=glue)  # type: ignore[arg-type]


def search_best(model: NativeModel, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
                sentence_ids: list[int] | None = None,
                on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                constraints: list[list[list[int]]] | None = None, glue: Sequence[int] = (),
                ) -> list[list[Hypothesis]]:
    """The one output `search_batch` gives without `n_best`, as a one-element list of `Hypothesis`
    per sentence: its tokens with its log-prob and score (greedy search's too, for beam 1)."""
    greedy = decode.search.beam == 1 and not decode.search.sampling and constraints is None
    return _search(model, src, src_mask, decode, 1, greedy=greedy, sentence_ids=sentence_ids, on_done=on_done,
                   constraints=constraints, glue=glue)


def _search(model: NativeModel, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig,
            n_best: int, *, greedy: bool, sentence_ids: list[int] | None,
            on_done: Callable[[int, list[Hypothesis]], None] | None,
            constraints: list[list[list[int]]] | None, glue: Sequence[int]) -> list[list[Hypothesis]]:
    """`n_best` hypotheses per sentence from the search `decode` names (`greedy`: greedy search for
    beam 1; else beam search, also for beam 1), with the settings `search_settings` makes of it."""
    if constraints is not None and decode.search.sampling:
        raise MTError("--sampling draws translations freely and cannot keep a glossary's terms; "
                      "search instead")
    settings = search_settings(decode.search, n_best=n_best, max_len_limit=max_positions(model) - 1,
                               constrained=requires_terms(constraints))
    if constraints is not None:
        return constrained_beam_search(model, src, src_mask, constraints, settings, on_done=on_done,
                                       glue=glue)
    if settings.sampling is not None:
        return sample_search(model, src, src_mask, settings, sentence_ids=sentence_ids, on_done=on_done)
    if greedy:
        return greedy_hypotheses(model, src, src_mask, settings, on_done=on_done)
    return beam_search(model, src, src_mask, settings, on_done=on_done)


def requires_terms(constraints: Sequence[Wanted | Sequence[Sequence[int]]] | None) -> bool:
    """Whether a search's constraints hold terms to write (a constrained search's wider beam); a
    translator's typed prefix alone is searched with the beam asked for (greedy too)."""
    return constraints is not None and any(not isinstance(w, Wanted) or w.require for w in constraints)


def _best_tokens(on_done: Callable[[int, list[int]], None]) -> Callable[[int, list[Hypothesis]], None]:
    """A beam search's or sampling's `on_done` handing on each sentence's best tokens (what
    search_batch returns without n_best)."""
    def report(b: int, hyps: list[Hypothesis]) -> None:
        on_done(b, hyps[0].tokens)
    return report


Results = list[tuple[list[int], float]]  # one sentence's outputs: (tokens, score), best first


class Engine(Protocol):
    """What translation needs from a model: its position limit and a search over token ids."""

    max_positions: int

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int], on_result: Callable[[int, Results], None] | None = None,
                   constraints: list[list[list[int]]] | None = None, glue: Sequence[int] = (),
                   ) -> list[Results]:
        """For each source (ids without EOS): with `n_best` None, the one output `decode` asks for
        (with its score where the engine has it, else NaN); else its `n_best` hypotheses (or samples)
        with their length-normalised scores, best first. `sentence_ids` key sampling's random draws.
        `on_result(i, results)`: called with source i's results as soon as the engine has them,
        before the batch's longer sentences are done, where it can tell (an engine may not call
        it at all); the returned list holds every result either way. `constraints`: token-id
        sequences each output must contain (glossary terms), one list per source; an engine that
        can keep them says `constrains = True`, one that cannot raises MTError (never drops them);
        `glue`: token ids that may not directly follow a constraint (mt.decode.constrained)."""
        ...


class Chooser(Protocol):
    """An engine that can rank given outputs by its model's score: the choice stage's
    (`mt.decode.pipeline.Choose`). mt's own model (`NativeEngine`) and the server's worker are
    ones; an engine that cannot align (a CTranslate2 export) never gets a choice to make."""

    def choose_ids(self, src_ids: list[list[int]], choices: Sequence[Choices], decode: DecodeConfig, *,
                   n_best: int | None) -> list[Results]:
        """For each source (ids without EOS) its candidate outputs (`choices`: token-id lists, no
        BOS/EOS, at least one) ranked by their log-prob, with `n_best` None its best, else the
        `n_best` best, each with beam search's length-normalised score (`choose_outputs`)."""
        ...


class NativeEngine:
    """mt's own Transformer or Ensemble as an `Engine`: `search_batch` in eval mode, no autograd.

    decode.resources.precision bf16 runs a bf16 copy of the model (weights cast once; log-probs and search
    stay float32), opt-in and only where bf16 is native: check its BLEU against fp32 first.

    On a CPU, a search of at most `small_rows` decoder rows (batch 1 greedy or beam 5: a server
    at low load) runs on one thread (`SINGLE_THREAD_ROWS`); `small_rows=0` leaves torch's count
    alone. The thread count can change the last bits of the scores, as the batch's composition
    already can (an exact tie could then break the other way); the benchmarks' texts never changed.
    """

    constrains = True  # keeps glossary terms (mt.decode.constrained)

    def __init__(self, model: NativeModel, device: torch.device | str, *,
                 small_rows: int = SINGLE_THREAD_ROWS) -> None:
        self.model, self.device = model, device
        self.max_positions = max_positions(model)
        self.small_rows = small_rows
        self._bf16: NativeModel | None = None

    def _model_for(self, decode: DecodeConfig) -> NativeModel:
        if decode.resources.precision == "fp32":
            return self.model
        if bf16_feature(self.device) is None:
            raise MTError(f"--precision bf16: {self.device} has no native bf16 "
                          "(needs AVX512-BF16/AMX or a bf16 GPU); use fp32")
        if self._bf16 is None:
            self._bf16 = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return self._bf16

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int], on_result: Callable[[int, Results], None] | None = None,
                   constraints: list[list[list[int]]] | None = None, glue: Sequence[int] = (),
                   ) -> list[Results]:
        """`Engine.search_ids`; `on_result` follows the search's sentences as they end."""
        model = self._model_for(decode)
        src, src_mask = collate_source(src_ids)
        rows = len(src_ids) * rows_per_sentence(decode, constrained=constraints is not None)
        small = torch.device(self.device).type == "cpu" and rows <= self.small_rows
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), intra_op_threads(1 if small else None):
                src, src_mask, report = (
                    src.to(self.device), src_mask.to(self.device), self._reporter(on_result)
                )
                if n_best is None:  # the one output, with its score (greedy search's too)
                    found = search_best(model, src, src_mask, decode, sentence_ids=sentence_ids,
                                        on_done=report, constraints=constraints, glue=glue)
                else:
                    found = search_batch(model, src, src_mask, decode, n_best=n_best,
                                         sentence_ids=sentence_ids, on_done=report,
                                         constraints=constraints, glue=glue)
        finally:
            model.train(was_training)
        return [_scored(hyps) for hyps in found]

    def choose_ids(self, src_ids: list[list[int]], choices: Sequence[Choices], decode: DecodeConfig, *,
                   n_best: int | None) -> list[Results]:
        """`Chooser.choose_ids`: one teacher-forced pass over every candidate (`choose_outputs`), each
        source encoded once; one intra-op thread where a constrained search of the sources would
        take one (`small_rows`)."""
        model = self._model_for(decode)
        settings = search_settings(decode.search, n_best=n_best or 1, max_len_limit=self.max_positions - 1,
                                   constrained=True)
        rows = len(src_ids) * rows_per_sentence(decode, constrained=True)
        small = torch.device(self.device).type == "cpu" and rows <= self.small_rows
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), intra_op_threads(1 if small else None):
                src, src_mask = collate_source(src_ids)
                src, src_mask = src.to(self.device), src_mask.to(self.device)
                found = choose_outputs(model, src, src_mask, choices, settings)
        finally:
            model.train(was_training)
        return [_scored(hyps) for hyps in found]

    def next_ids(self, src_ids: list[list[int]], wanted: Sequence[Wanted], decode: DecodeConfig,
                 k: int) -> list[list[tuple[int, float]]]:
        """The `k` most probable pieces after each source's forced prefix, with their log-probs
        (`mt.decode.alternatives.next_pieces`: the alternatives stage's one pass)."""
        model = self._model_for(decode)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                src, src_mask = collate_source(src_ids)
                return next_pieces(model, src.to(self.device), src_mask.to(self.device), wanted, k)
        finally:
            model.train(was_training)

    @staticmethod
    def _reporter(
        on_result: Callable[[int, Results], None] | None,
    ) -> Callable[[int, list[Hypothesis]], None] | None:
        """search_batch's `on_done` for `on_result`: each sentence's result in `Results` form."""
        if on_result is None:
            return None
        return lambda i, hyps: on_result(i, _scored(hyps))


def _scored(hyps: list[Hypothesis]) -> Results:
    return [(h.tokens, h.score) for h in hyps]


def as_engine(model: NativeModel | Engine, device: torch.device | str) -> Engine:
    """A Transformer or Ensemble wrapped in a `NativeEngine`; an engine as it is."""
    return NativeEngine(model, device) if isinstance(model, (Transformer, Ensemble)) else model
