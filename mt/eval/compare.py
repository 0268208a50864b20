"""Two or more systems compared on one test set with sacreBLEU's paired bootstrap resampling
(`mt evaluate --hyp A --hyp B --ref R`, or `mt evaluate -c A.pt --compare B.pt --split test`).

sacreBLEU's own implementation does the work (`sacrebleu.significance.PairedTest` with
`test_type="bs"`, what `sacrebleu -t ... --paired-bs` runs): the same `n` resampled test sets (seed
`SACREBLEU_SEED`, 12345 by default, so the result is reproducible) are scored for the baseline
(the first system) and for each other system from their sentence statistics; the p-value is the
share of resamples whose |difference|, centred on the mean resampled difference, reaches the
observed one ((c + 1) / (n + 1), Koehn 2004 as in Moses' script); the 95% interval is half the
width between the 2.5th and 97.5th percentile of a system's resampled scores around their mean.
p < 0.05 reads as "the difference is unlikely to be resampling noise of this test set"; it says
nothing of another test set, another seed of training, or another budget.

One change to sacreBLEU's answer: a system whose translations equal the baseline's line for line
gets p = 1 (sacreBLEU's count of resampled differences strictly above an observed 0 is 0, which
would read as p = 1/(n + 1), "significant", for two identical systems).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mt.errors import MTError

SAMPLES = 1000  # bootstrap resamples (sacreBLEU's default for --paired-bs)


@dataclass(frozen=True)
class SystemResult:
    """One system's scores: the score, the resampled mean ± 95% half-interval, p against the baseline."""

    name: str
    bleu: float
    bleu_mean: float
    bleu_ci: float
    bleu_p: float | None  # None for the baseline
    chrf: float
    chrf_mean: float
    chrf_ci: float
    chrf_p: float | None


@dataclass(frozen=True)
class Comparison:
    """The paired bootstrap comparison of `systems` (the first is the baseline)."""

    systems: list[SystemResult]
    sentences: int
    samples: int
    bleu_signature: str
    chrf_signature: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for s in d["systems"]:  # the keys scripts read: bleu's p-value, mean, interval
            s.update(p_value=s["bleu_p"], mean=s["bleu_mean"], ci=s["bleu_ci"])
        return d

    def table(self) -> list[str]:
        """The comparison as text lines (what `mt evaluate` prints)."""
        width = max(len("system"), *(len(s.name) for s in self.systems))
        lines = [f"{'system':<{width}} | {'BLEU':>6} | {'mean ± 95% CI':>15} | {'p':>6} | "
                 f"{'chrF':>6} | {'p':>6}",
                 f"{'-' * width}-+--------+-----------------+--------+--------+-------"]
        for s in self.systems:
            bp = "base" if s.bleu_p is None else f"{s.bleu_p:.4f}"
            cp = "base" if s.chrf_p is None else f"{s.chrf_p:.4f}"
            lines.append(f"{s.name:<{width}} | {s.bleu:6.2f} | {s.bleu_mean:6.2f} ± {s.bleu_ci:5.2f} | "
                         f"{bp:>6} | {s.chrf:6.2f} | {cp:>6}")
        return lines


def paired_bootstrap(systems: list[tuple[str, list[str]]], refs: list[str], *, tokenize: str,
                     samples: int = SAMPLES) -> Comparison:
    """Compare `systems` ((name, hypotheses), the first the baseline) against `refs` with sacreBLEU's
    paired bootstrap resampling of BLEU and chrF. MTError for fewer than two systems or a
    hypothesis count that differs from the references'."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise MTError("a comparison needs at least two systems (the first is the baseline)")
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise MTError(f"{name}: {len(hyps)} hypotheses for {len(refs)} references; "
                          f"systems must translate the same test set")
    if not refs:
        raise MTError("the test set is empty: nothing to compare")
    metrics = {"BLEU": BLEU(tokenize=tokenize, references=[refs]), "chrF": CHRF(references=[refs])}
    signatures, scores = PairedTest(systems, metrics, references=None, test_type="bs", n_samples=samples)()
    bleu_key, chrf_key = [k for k in scores if k != "System"]  # sacreBLEU names them BLEU and chrF2
    results = []
    for i, (name, hyps) in enumerate(systems):
        b, c = scores[bleu_key][i], scores[chrf_key][i]
        same = i > 0 and hyps == systems[0][1]  # identical output: no difference to test
        results.append(SystemResult(name, b.score, float(b.mean), float(b.ci), 1.0 if same else b.p_value,
                                    c.score, float(c.mean), float(c.ci), 1.0 if same else c.p_value))
    return Comparison(results, len(refs), samples, str(signatures[bleu_key]), str(signatures[chrf_key]))
