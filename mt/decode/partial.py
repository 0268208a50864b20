"""A typed partial word in a constrained search (`Wanted.partial`, mt.decode.typed): which pieces
each row may write next, as a mask over the vocabulary (`PartialWords.mask`, applied by
`mt.decode.rules.apply_rules` rule 10).

No state is carried from step to step: how far a row is into the typed word is the sum of the
lengths of the pieces it wrote since its forced prefix ended, read from its history. A row that
has spelled the whole word is free; so is every row of a sentence without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mt.decode.wanted import Wanted


@dataclass
class PartialWords:
    """The typed words of the N live sentences (K rows each)."""

    start: Tensor  # (N,) long: the step at which the word begins (its forced prefix's length)
    length: Tensor  # (N,) long: its characters (0: none)
    steps: list[tuple[tuple[tuple[int, int], ...], ...]]  # each sentence's `Wanted.partial`
    k: int
    tables: tuple[Tensor, Tensor] | None = None  # (allowed (N, L, V) bool, piece lengths (N, V) long)

    @classmethod
    def of(cls, found: Sequence[Wanted], k: int, device: torch.device) -> PartialWords | None:
        """The sentences' typed words, or None when none has one."""
        if not any(w.partial for w in found):
            return None
        start = torch.tensor([len(w.prefix) for w in found], dtype=torch.long, device=device)
        length = torch.tensor([len(w.partial) for w in found], dtype=torch.long, device=device)
        return cls(start, length, [w.partial for w in found], k)

    def _tables(self, vocab: int) -> tuple[Tensor, Tensor]:
        if self.tables is None:
            n, width = len(self.steps), max(1, int(self.length.max()))
            allowed = torch.zeros((n, width, vocab), dtype=torch.bool)
            lengths = torch.full((n, vocab), width, dtype=torch.long)
            for i, steps in enumerate(self.steps):
                for o, pieces in enumerate(steps):
                    ids = torch.tensor([t for t, _ in pieces], dtype=torch.long)
                    allowed[i, o, ids] = True
                    lengths[i, ids] = torch.tensor([n for _, n in pieces], dtype=torch.long)
            self.tables = allowed.to(self.start.device), lengths.to(self.start.device)
        return self.tables

    def mask(self, step: int, history: Tensor, vocab: int) -> tuple[Tensor, Tensor] | None:
        """(rows (N*K,) bool: those still spelling their typed word at `step`, given each row's
        `history` (N*K, step); (N*K, V) bool: the pieces each of them may write), or None when no row
        is spelling one."""
        starts = self.start.repeat_interleave(self.k)
        length = self.length.repeat_interleave(self.k)
        if not bool(((starts <= step) & (length > 0)).any()):
            return None
        allowed, lengths = self._tables(vocab)
        sent = torch.arange(len(self.steps), device=history.device).repeat_interleave(self.k)
        written = lengths[sent.unsqueeze(1), history]  # (N*K, step)
        after = torch.arange(history.size(1), device=history.device).unsqueeze(0) >= starts.unsqueeze(1)
        at = (written * after).sum(dim=1)
        active = (starts <= step) & (at < length)
        return active, allowed[sent, at.clamp(max=allowed.size(1) - 1)]

    def select(self, keep: Tensor) -> None:
        """Keep only sentences `keep` (N',) long, in order (as `BeamState.select`)."""
        picked = keep.tolist()
        self.start, self.length = self.start[keep], self.length[keep]
        self.steps = [self.steps[i] for i in picked]
        if self.tables is not None:
            self.tables = self.tables[0][keep], self.tables[1][keep]
