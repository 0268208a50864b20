"""Making synthetic pairs by translating a stream of lines, in committed chunks that resume.

`generate_pairs` is the loop behind `mt backtranslate` (monolingual target text in, the model's
translations become the synthetic sources) and `mt distill` (training sources in, the teacher's
translations become the targets): it skips the input lines a `PairWriter` already committed,
then reads `chunk_lines` lines at a time (memory stays flat for any corpus size), translates
them and appends the pairs. `translate(first, lines, references)` must give line i the same
output whatever chunk it comes in: beam search does (batching does not change it), and sampling
keys its draws by the input line number `first + i` (`mt.decode.translate`), so a run resumed
after a kill writes exactly the bytes of an uninterrupted one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mt.data.pairwriter import PairWriter

# (first line number, input lines, their references or None) -> one output line each
Translate = Callable[[int, list[str], list[str] | None], list[str]]


@dataclass(frozen=True)
class Generated:
    """What one run of `generate_pairs` did."""

    resumed_at: int  # input lines done before this run (0: a fresh start)
    lines: int  # input lines done in all, after this run


def generate_pairs(items: Iterable[tuple[str, str | None]], translate: Translate, writer: PairWriter, *,
                   chunk_lines: int, output_is_source: bool,
                   on_chunk: Callable[[int], None] | None = None) -> Generated:
    """Translate the first item of each (line, reference or None) of `items` and append the pairs
    to `writer` (the output as the source with `output_is_source`, back-translation; else as the
    target, distillation), resuming where `writer` stopped. Empty input lines give empty pairs
    (line alignment kept; prepare's cleaning drops them). `on_chunk(lines done)` after every commit."""
    done = writer.start()
    stream = itertools.islice(iter(items), done, None)  # streamed past, never held
    first = done
    while chunk := list(itertools.islice(stream, chunk_lines)):
        lines = [line for line, _ in chunk]
        refs = [ref for _, ref in chunk]
        outputs = translate(first, lines, None if any(r is None for r in refs) else refs)  # type: ignore[arg-type]
        empty = sum(1 for line in lines if not line.strip())
        if output_is_source:
            writer.append(outputs, lines, len(chunk), {"empty": empty})
        else:
            writer.append(lines, outputs, len(chunk), {"empty": empty})
        first += len(chunk)
        if on_chunk is not None:
            on_chunk(first)
    return Generated(resumed_at=done, lines=first)
