"""The rules of a search, in one place: its settings (`SearchSettings`), the length limits, and
`apply_rules`, which every search (greedy, beam, sampling, constrained) calls on the next-token
log-probs of each step. A rule added to decoding is written here once.

`search_settings(decode.search, ...)` is the one function that turns a `SearchConfig` (the
checkpoint's and the command line's search settings) into a `SearchSettings`, the typed, frozen
object every search takes whole, as CTranslate2's translators take one options object
(mt.deploy.ct2 maps it onto theirs). Greedy search is the search of beam 1 (`beam_search` with
beam 1 finds the same).

The rules of one step, in the order `apply_rules` applies them to log-probs (R, V), one row per
hypothesis (a beam row, a sample):

1. never PAD or BOS; never UNK with `forbid_unk`. A banned token is set to -inf without
   renormalising, so scores stay the model's own log-probabilities;
2. the length limit: a row at its maximum length (`max_output_lengths`) may only end (EOS forced);
3. the loop guard (mt.decode.repeats: `repetition_penalty`, then `no_repeat_ngram_size`), from each
   row's own history;

and with a glossary's terms (`TermStep`, filled by mt.decode.constrained at each step):

4. a term written at its place keeps its pieces' log-probs from before the guard;
5. no EOS before every term is in (except at the maximum length);
6. glue: no word-continuing piece right after a term, unless it carries the term on into a longer
   form of itself;
7. never the words a term replaces (`avoid`);
8. a placed term starts at its place and, once started there, goes on to its end;
9. a forced prefix: only its piece, at the model's own log-prob (no ban applies);
10. a typed word after the prefix (mt.decode.partial): only pieces that go on spelling it, at the
    model's own log-probs (the translator typed it: the loop guard does not bar it).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.config import LengthPenalty, SearchConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode.repeats import guard_repeats

# The smallest beam a constrained search runs with (greedy decoding with a glossary too): its places
# are shared among banks of hypotheses by constraint tokens met, and a beam of 1 has one bank.
CONSTRAINED_BEAM = 4
NEG_INF = float("-inf")


def length_penalty(length: Tensor | float, *, alpha: float, kind: str) -> Tensor | float:
    """The divisor of a hypothesis' log-prob; `length` = |y| including EOS.

    gnmt: ((5 + |y|) / 6) ** alpha (Wu et al. 2016); average: |y| ** alpha; none: 1.
    Works elementwise on a tensor of lengths.
    """
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "average":
        return length ** alpha
    if kind == "none":
        return torch.ones_like(length) if isinstance(length, Tensor) else 1.0
    raise ValueError(f"length_penalty: unknown kind {kind!r}; "
                     f"expected one of {', '.join(typing.get_args(LengthPenalty))}")


@dataclass(frozen=True)
class Sampling:
    """How a sampling search draws (mt.decode.sampling): the log-probs divided by `temperature`
    (> 0), kept to the `top_k` best tokens (0 = all) and to the nucleus of mass `top_p` (in (0, 1]);
    `seed` keys every draw."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature > 0.0:
            raise ValueError(f"sampling: temperature must be > 0, got {self.temperature}")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling: need top_k >= 0 and 0 < top_p <= 1, got {self.top_k}, {self.top_p}")


@dataclass(frozen=True)
class SearchSettings:
    """Everything a search is told, checked once. Defaults: the plain search, greedy without a
    length penalty, loop guard or position limit (`search_settings` gives a SearchConfig's)."""

    beam: int = 1  # hypotheses kept per sentence (1: greedy); a sampling search ignores it
    n_best: int = 1  # hypotheses returned per sentence (samples drawn, when sampling); <= beam for a search
    length_penalty: LengthPenalty = "none"  # a hypothesis' score is log_prob / length_penalty(|y| + 1)
    alpha: float = 0.0
    max_len_a: float = 1.5  # output tokens before EOS at most floor(a * |src| + b) ...
    max_len_b: int = 10
    max_len_limit: int | None = None  # ... and at most this (the model's positions - 1; None: no cap)
    forbid_unk: bool = True  # never emit <unk>
    no_repeat_ngram_size: int = 0  # the loop guard (mt.decode.repeats): 0 and 1.0 = off
    repetition_penalty: float = 1.0
    sampling: Sampling | None = None  # draw instead of searching (mt.decode.sampling)

    def __post_init__(self) -> None:
        if self.beam < 1 or self.n_best < 1 or (self.sampling is None and self.n_best > self.beam):
            raise ValueError(f"search: need 1 <= n_best <= beam, got beam={self.beam}, n_best={self.n_best}")
        length_penalty(1.0, alpha=self.alpha, kind=self.length_penalty)  # the kind checked before any work

    @property
    def guarded(self) -> bool:
        """Whether the loop guard is on."""
        return bool(self.no_repeat_ngram_size) or self.repetition_penalty != 1.0

    def penalty(self, length: Tensor | float) -> Tensor | float:
        """The length penalty of |y| = `length` (EOS included): a hypothesis' score is its log-prob
        over this."""
        return length_penalty(length, alpha=self.alpha, kind=self.length_penalty)

    def score(self, log_prob: float, length: int) -> float:
        """The score of a hypothesis of `length` tokens (EOS not counted) and log-prob `log_prob`."""
        return log_prob / float(length_penalty(float(length + 1), alpha=self.alpha, kind=self.length_penalty))


def search_settings(search: SearchConfig, *, n_best: int = 1, max_len_limit: int | None = None,
                    constrained: bool = False) -> SearchSettings:
    """The one place a `SearchConfig` (decode.search) becomes a search's settings: `n_best`
    hypotheses (or samples) per sentence, outputs capped at `max_len_limit` (the model's positions
    - 1), and a beam of at least `CONSTRAINED_BEAM` for a search with constraints (`constrained`)."""
    s = search
    beam = max(s.beam, CONSTRAINED_BEAM) if constrained and not s.sampling else s.beam
    sampling = Sampling(s.temperature, s.top_k, s.top_p, s.seed) if s.sampling else None
    return SearchSettings(beam=beam, n_best=n_best, length_penalty=s.length_penalty, alpha=s.alpha,
                          max_len_a=s.max_len_a, max_len_b=s.max_len_b, max_len_limit=max_len_limit,
                          forbid_unk=s.forbid_unk, no_repeat_ngram_size=s.no_repeat_ngram_size,
                          repetition_penalty=s.repetition_penalty, sampling=sampling)


def max_output_lengths(src_lengths: Tensor, settings: SearchSettings, *, at_least: Tensor | None = None,
                       room: Tensor | None = None) -> Tensor:
    """Each sentence's maximum number of output tokens before EOS: floor(a * |src| + b), at least 0
    and `at_least` (a forced prefix), plus `room` (a constrained search's terms), at most
    `max_len_limit`. src_lengths: (B,) source tokens, EOS included (`src_mask.sum(1)`) -> (B,) long."""
    src_len = src_lengths.to(torch.float64)
    lengths = torch.floor(settings.max_len_a * src_len + settings.max_len_b).clamp(min=0).to(torch.long)
    if at_least is not None:
        lengths = torch.maximum(lengths, at_least)
    if room is not None:
        lengths = lengths + room
    return lengths if settings.max_len_limit is None else lengths.clamp(max=settings.max_len_limit)


@dataclass
class TermStep:
    """What a glossary's terms ask of one step of a constrained search (rules 4-9 of the module
    docstring), one row per beam row; None where no row needs that rule at this step."""

    all_met: Tensor  # (R,) bool: the row holds every term (it may end)
    place_rows: Tensor | None  # (R,) bool: rows that must write a placed term's next piece ...
    place_tokens: Tensor | None  # (R, V) bool: ... True at the pieces that do
    glue: Tensor | None  # (R, V) bool: pieces barred right after a term
    avoid: Tensor | None  # (R, V) bool: pieces that would complete words a term replaces
    prefix: Tensor | None  # (R,) long: the prefix piece each row must write (-1: none)
    # rows spelling a typed word (R,) bool, and the pieces each may write (R, V) bool
    partial: tuple[Tensor, Tensor] | None = None


def token_mask(tokens: Tensor, valid: Tensor, vocab: int) -> Tensor:
    """(R, V) bool: True at `tokens` (R, X) long where `valid` (R, X). Only the valid entries are
    written (all True), so repeats and invalid entries at the same token do not clash, as a scatter
    of `valid` would; one bool (R, V) tensor, no long one (the search's hot path)."""
    mask = torch.zeros((tokens.size(0), vocab), dtype=torch.bool, device=tokens.device)
    rows, cols = valid.nonzero(as_tuple=True)
    mask[rows, tokens[rows, cols]] = True
    return mask


def apply_rules(log_probs: Tensor, settings: SearchSettings, *, at_max: Tensor, history: Callable[[], Tensor],
                terms: TermStep | None = None) -> Tensor:
    """Every rule of one search step (the module docstring's, in its order) on the next-token
    log-probs (R, V) float32, in place where it can; returns them. `at_max` (R,) bool: rows at their
    maximum length; `history()` -> (R, t) long: the tokens each row has emitted (asked for only when
    a rule reads it); `terms`: a constrained search's term rules for this step."""
    log_probs[:, PAD_ID] = NEG_INF  # 1. tokens never emitted
    log_probs[:, BOS_ID] = NEG_INF
    if settings.forbid_unk:
        log_probs[:, UNK_ID] = NEG_INF
    if bool(at_max.any()):  # 2. the length limit: only EOS
        eos = log_probs[:, EOS_ID].clone()
        log_probs.masked_fill_(at_max.unsqueeze(1), NEG_INF)
        log_probs[:, EOS_ID] = eos
    keep = terms is not None and (
        (settings.guarded and terms.place_rows is not None) or terms.prefix is not None
        or terms.partial is not None
    )
    raw = log_probs.clone() if keep else log_probs  # before the guard (rules 4, 9 and 10)
    if settings.guarded:  # 3. the loop guard
        guard_repeats(log_probs, history(), no_repeat_ngram_size=settings.no_repeat_ngram_size,
                      repetition_penalty=settings.repetition_penalty)
    if terms is None:
        return log_probs
    placed = None  # (R, V) bool: the placed rows, whole (a broadcast (R, 1) & (R, V) costs ~10x as much)
    if terms.place_rows is not None:
        placed = terms.place_rows.unsqueeze(1).expand_as(terms.place_tokens).contiguous()
    if settings.guarded and placed is not None:  # 4. a placed term's pieces are never barred by the guard
        log_probs = torch.where(placed & terms.place_tokens, raw, log_probs)
    log_probs[:, EOS_ID].masked_fill_(~(terms.all_met | at_max), NEG_INF)  # 5. no end before every term
    barred = [banned for banned in (terms.glue, terms.avoid) if banned is not None]  # 6. glue, 7. avoid
    if placed is not None:  # 8. a placed term, from its place to its end
        barred.append(placed & ~terms.place_tokens)
    if barred:  # one fill of their union, in place (a bool mask's fill costs more than the union)
        log_probs.masked_fill_(functools.reduce(torch.logical_or, barred), NEG_INF)
    if terms.prefix is not None:  # 9. a prefix: only its piece, at the model's own log-prob
        forced = terms.prefix.clamp(min=0)
        only = F.one_hot(forced, log_probs.size(1)).bool()
        own = torch.where(only, raw.gather(1, forced.unsqueeze(1)), NEG_INF)
        log_probs = torch.where((terms.prefix >= 0).unsqueeze(1), own, log_probs)
    if terms.partial is not None:  # 10. a typed word: only pieces that spell it on, at their own log-probs
        rows, pieces = terms.partial
        log_probs = torch.where(rows.unsqueeze(1), raw.masked_fill(~pieces, NEG_INF), log_probs)
    return log_probs
