"""One request's segments as `mt.serve.batcher` holds them: the `Job` that `Batcher.submit` returns
(its `future` resolves to one `Hyps` per line), and what the batcher reads of a job's segment (the
work decoding it costs, whether it keeps glossary terms) and how it fails a job whose client may
have gone."""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from mt.config import DecodeConfig
from mt.decode.engine import Results, rows_per_sentence

Hyps = list[tuple[str, float]]  # one line's outputs: (text, score), best first; score NaN when unknown


@dataclass
class Job:
    """One request's segments. `future` -> list of Hyps, one per line, in order."""

    ids: list[list[int]]
    decode: DecodeConfig
    n_best: int | None
    warnings: list[str]
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    tokens: list[Results | None] = field(default_factory=list)
    left: int = 0
    cancelled: bool = False
    # per line: cut to the model's limit (`warnings` counts them)
    cut: list[bool] = field(default_factory=list)
    constraints: list[list[list[int]]] | None = None  # per line: the target pieces of its glossary terms
    # target pieces barred right after a term (`mt.decode.terms.TermConstraints.glue`)
    glue: tuple[int, ...] = ()
    lines: list[str] = field(default_factory=list)  # the source lines (stripped), for their confidence
    # per line, its 1-best's (`mt.decode.confidence`), once done
    confidence: list[float] = field(default_factory=list)


def segment_work(job: Job, index: int) -> int:
    """What decoding segment `index` of `job` costs, in the unit of the measured rate: its source
    tokens times the decoder rows it takes (beam, or samples)."""
    return len(job.ids[index]) * rows_per_sentence(job.decode, constrained=keeps_terms(job, index))


def keeps_terms(job: Job, index: int) -> bool:
    """Segment `index` of `job` holds glossary terms: the constrained search decodes it."""
    return job.constraints is not None and bool(job.constraints[index])


def fail_job(job: Job, error: BaseException) -> None:
    """Fail `job`'s future unless it is already settled. A client that goes away cancels its future
    outside the batcher's lock (`Batcher.cancel`), so it may be cancelled between any check and the
    set: setting then raises InvalidStateError, which must never end the worker thread."""
    try:
        job.future.set_exception(error)
    except concurrent.futures.InvalidStateError:  # cancelled (or answered) meanwhile
        pass
