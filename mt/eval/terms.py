"""Term success: how many of a glossary's terms a translation kept (`mt evaluate --glossary`).

For every sentence, each term whose source side is found in the source (`Glossary.match`: word
boundaries, case, inflection) is one occurrence; it is kept when its target side stands in the
hypothesis by the same rules without suffixes (`mt.text.glossary.occurs`): the exact target form,
as in the term-success figures of Dinu et al. 2019 and the WMT21 terminology task's exact match.
A term found twice in one sentence counts once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mt.errors import MTError
from mt.text.glossary import Glossary, occurs


@dataclass(frozen=True)
class TermSuccess:
    """Term occurrences in the sources, how many the hypotheses kept, and in how many sentences."""

    terms: int
    kept: int
    sentences: int

    @property
    def rate(self) -> float:
        """Kept occurrences in percent (NaN when no term was found)."""
        return 100.0 * self.kept / self.terms if self.terms else math.nan

    def to_dict(self) -> dict[str, float | int | None]:
        return {"terms": self.terms, "kept": self.kept, "sentences": self.sentences,
                "rate": None if not self.terms else round(self.rate, 4)}

    def line(self) -> str:
        """What `mt evaluate` prints beside BLEU."""
        if not self.terms:
            return "no glossary term found in the source"
        return f"{self.rate:6.2f}  ({self.kept} of {self.terms} term occurrences kept, in {self.sentences} sentences)"


def term_success(sources: Sequence[str], hyps: Sequence[str], glossary: Glossary) -> TermSuccess:
    """`TermSuccess` of `hyps` translating `sources` (same order) with `glossary`'s terms."""
    if len(sources) != len(hyps):
        raise MTError(f"term success: {len(sources)} sources but {len(hyps)} hypotheses")
    terms = kept = sentences = 0
    for source, hyp in zip(sources, hyps):
        found = glossary.match(source)
        terms += len(found)
        kept += sum(occurs(term.target, hyp) for term in found)
        sentences += bool(found)
    return TermSuccess(terms, kept, sentences)
