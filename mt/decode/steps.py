"""The model work the one translation path (`mt.decode.pipeline`) asks its driver for, and the
answers: a `Search`, a `Choose` (a forced-decoding pass that ranks given outputs), an `Expand`
(the next pieces after a typed prefix) or an `Offload` (blocking work that aligns with the model),
answered with `Found` per line (Search, Choose), next pieces (Expand) or the work's value (Offload).
The path is a generator of these (`Steps`); `mt.decode.translate` and `mt.serve.jobs` drive it."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mt.config import DecodeConfig
from mt.decode.wanted import Choices, Wanted
from mt.text.protect import Aligner

T = TypeVar("T")
Hyps = list[tuple[str, float]]  # one segment's outputs: (text, length-normalised score), best first


@dataclass(frozen=True)
class Search:
    """A search the path asks its driver for: `lines` (what the model reads) with `decode`;
    `n_best` as `Engine.search_ids` reads it (None: each line's one best output); `keys` key each
    line's random draws when sampling (a driver that keys by position may ignore them); `wanted`:
    each line's constraints (None: no glossary; a falsy `Wanted`: the line has no term and is
    searched exactly as without one), `glue` the pieces barred after a term."""

    lines: list[str]
    decode: DecodeConfig
    n_best: int | None
    keys: list[int]
    wanted: list[Wanted] | None = None
    glue: tuple[int, ...] = ()


@dataclass(frozen=True)
class Choose:
    """The choice the path asks its driver for: each of `lines` (what the model reads) with its
    whole outputs to choose from (`choices`: token ids, no BOS/EOS, each line at least one), ranked
    by the model's log-prob under `decode` (`mt.decode.forced.choose_outputs`); `n_best` as in
    `Search`. Answered like a `Search` (list[Found], each output with beam search's score)."""

    lines: list[str]
    choices: list[Choices]
    decode: DecodeConfig
    n_best: int | None


@dataclass(frozen=True)
class Expand:
    """The alternatives the path asks its driver for: each of `lines` (what the model reads) with
    its forced prefix and typed word (`wanted`), the `k` most probable pieces after the prefix
    (`mt.decode.alternatives.next_pieces`), answered with each line's (piece id, log-prob) best first."""

    lines: list[str]
    wanted: list[Wanted]
    decode: DecodeConfig
    k: int


@dataclass(frozen=True)
class Found:
    """One line's answer to a `Search`: its outputs best first, its 1-best's confidence
    (`mt.decode.confidence`; NaN from a driver that does not rate), whether its source was cut at
    the model's limit."""

    hyps: Hyps
    confidence: float = math.nan
    cut: bool = False


@dataclass(frozen=True)
class Offload(Generic[T]):
    """Blocking work the path needs the model for: `run(aligner)` with the driver's word aligner
    (`mt.decode.align`; None where the engine cannot align). A server runs it off its event loop."""

    run: Callable[[Aligner | None], T]


# what the path yields; sent back list[Found] (Search, Choose), T (Offload), next pieces (Expand)
Step = Search | Choose | Offload | Expand
Steps = Generator[Step, Any, T]
