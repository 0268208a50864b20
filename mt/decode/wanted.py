"""What one sentence's constrained search must do (`Wanted`): mt.decode.constrained's input.

Kept apart from the search so that the glossary side (mt.decode.terms) and the server build it
without the search's tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

Choices = tuple[tuple[int, ...], ...]  # a sentence's whole outputs (token ids) to choose from; (): search it


class Wanted(NamedTuple):
    """One sentence's constraints: `require` holds each constraint's alternatives (token-id
    sequences: the output must contain one of them, e.g. any form of a glossary term), `avoid` the
    sequences the output may not contain (the words a term replaces), `prefix` the tokens it must
    begin with, `place` whether a required constraint must start right after them, `partial` a
    typed word the pieces after the prefix must spell (a translator's prefix: mt.decode.typed).
    False without any of them (the sentence then takes the plain search). Outputs to choose from
    instead of searching are not a constraint: they are the choice stage's (`Choices`). A
    sentence's constraints may also be
    given as a plain list of sequences: each a constraint of one alternative, nothing avoided."""

    require: tuple[tuple[tuple[int, ...], ...], ...]
    avoid: tuple[tuple[int, ...], ...] = ()
    # tokens the output must start with (a first translation up to a term's place)
    prefix: tuple[int, ...] = ()
    place: bool = False  # a required constraint starts right after the prefix (the term takes that place)
    # a typed word after the prefix (mt.decode.typed): at each of its characters, the (piece, length)
    # pieces that may come there
    partial: tuple[tuple[tuple[int, int], ...], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.require or self.prefix or self.partial)


def wanted(constraints: Wanted | Sequence[Sequence[int]]) -> Wanted:
    """A sentence's constraints as `Wanted`, avoided sequences that some alternative holds dropped
    (avoiding them would make the term impossible)."""
    if not isinstance(constraints, Wanted):
        return Wanted(tuple((tuple(seq),) for seq in constraints))
    alts = [alt for group in constraints.require for alt in group]
    avoid = tuple(seq for seq in constraints.avoid
                  if seq and not any(_contains(alt, seq) for alt in alts))
    return constraints._replace(avoid=avoid)


def _contains(seq: Sequence[int], part: Sequence[int]) -> bool:
    return any(tuple(seq[i:i + len(part)]) == tuple(part) for i in range(len(seq) - len(part) + 1))
