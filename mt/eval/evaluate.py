"""Scoring translations, and the files `mt evaluate` writes.

Scoring uses sacreBLEU's metric objects with their defaults, the field's standard: BLEU (mixed
case, exponential smoothing), chrF (character 6-grams, beta 2) and TER, each reported with its
signature. BLEU's tokenizer is the caller's choice, made for the target language by
`mt.eval.bleu.bleu_tokenizer_for` (13a unless the language needs another, e.g. `zh`). The trainer's
validation BLEU calls the same `translate_lines` and `score` as `mt evaluate`, so the two always
agree.

`mt evaluate` either translates test sets (`evaluate_set`: writes `<set>.<ckpt>.beam<K>.hyp`
and a JSON report beside it, with how well the sentence confidences rank the outputs: Spearman
with sentence chrF, `confidence_report`) or scores an existing hypothesis file (`score_files`: writes
`<hyp name>.json`). Both reports come from `build_report`. Nothing here prints except a
progress bar on request: the functions return what the command line shows.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from sacrebleu.metrics import BLEU, CHRF, TER

from mt.config import Config, DecodeConfig, PairConfig
from mt.data.corpus import read_split, split_available
from mt.data.tokenizer import Tokenizer
from mt.decode.align import align_words
from mt.decode.confidence import LOW
from mt.decode.engine import Engine, NativeEngine, as_engine
from mt.decode.terms import TermConstraints
from mt.decode.translate import search_lines
from mt.errors import MTError
from mt.eval.bleu import DEFAULT as DEFAULT_TOKENIZER
from mt.eval.bleu import bleu_tokenizer_for
from mt.eval.confidence import sentence_chrf, spearman
from mt.eval.terms import TermSuccess, placement, term_success
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer
from mt.textio import check_same_length, read_lines, write_lines_atomic

# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Scores:
    """Corpus-level scores (0-100) with the sacreBLEU signatures that make them reproducible."""

    bleu: float
    chrf: float
    ter: float
    bleu_signature: str
    chrf_signature: str
    ter_signature: str
    bleu_detail: str  # sacreBLEU's summary: n-gram precisions, brevity penalty, lengths
    bleu_tokenize: str  # the sacreBLEU tokenizer BLEU used (also in the signature as tok:...)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def score(hyps: Sequence[str], refs: Sequence[str], *, tokenize: str = DEFAULT_TOKENIZER) -> Scores:
    """BLEU (tokenised with sacreBLEU's `tokenize`), chrF and TER of detokenised hypotheses
    against one reference each (same order)."""
    if len(hyps) != len(refs):
        raise MTError(f"scoring: {len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise MTError("scoring: no sentences to score")
    hyps, refs = list(hyps), [list(refs)]
    try:
        bleu = BLEU(tokenize=tokenize)
    except (RuntimeError, ImportError, AssertionError) as e:  # e.g. mecab missing or not the IPA dictionary
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MTError(f"BLEU tokenizer '{tokenize}': cannot be used ({first})") from None
    chrf, ter = CHRF(), TER()
    b = bleu.corpus_score(hyps, refs)
    return Scores(
        bleu=float(b.score),
        chrf=float(chrf.corpus_score(hyps, refs).score),
        ter=float(ter.corpus_score(hyps, refs).score),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        ter_signature=str(ter.get_signature()),
        bleu_detail=str(b),
        bleu_tokenize=tokenize,
    )


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class Provenance:
    """How a set's hypotheses were made (the translate path's report fields)."""

    set: str  # the test set's label
    source: str  # where its source lines came from
    checkpoints: Sequence[Path]  # one, or the members of an ensemble (config and decode from the first)
    checkpoint_sha256s: Sequence[str]
    decode: DecodeConfig
    device: str
    threads: int
    load_s: float
    translate_s: float
    # per checkpoint: where its run started ({"path", "sha256", "update"}; None: trained from scratch)
    init_from: Sequence[dict[str, Any] | None] = ()


def build_report(hypotheses: Path, reference: str, scores: Scores, *, sentences: int, score_s: float,
                 made: Provenance | None) -> dict[str, Any]:
    """The JSON report of one scored hypothesis file; `made` is None when the hypotheses were
    only scored (`mt evaluate --hyp`), not translated here."""
    if made is None:
        report: dict[str, Any] = {"hypotheses": str(hypotheses.resolve()), "reference": reference}
    else:
        report = {"set": made.set, "source": made.source, "reference": reference,
                  "hypotheses": str(hypotheses.resolve())}
    report.update(sentences=sentences, **scores.to_dict())
    if made is None:
        report["timings"] = {"score_s": round(score_s, 3)}
        return report
    report.update(
        checkpoint=str(made.checkpoints[0].resolve()), checkpoint_sha256=made.checkpoint_sha256s[0],
        checkpoints=[{"path": str(path.resolve()), "sha256": sha, "init_from": init}
                     for path, sha, init in itertools.zip_longest(made.checkpoints, made.checkpoint_sha256s,
                                                                  made.init_from[:len(made.checkpoints)])],
        init_from=made.init_from[0] if made.init_from else None,
        decode=dataclasses.asdict(made.decode), device=made.device, threads=made.threads,
        timings={"load_s": round(made.load_s, 3), "translate_s": round(made.translate_s, 3),
                 "score_s": round(score_s, 3)},
        sentences_per_s=round(sentences / max(made.translate_s, 1e-9), 2),
    )
    return report


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write a report as indented UTF-8 JSON, atomically."""
    write_lines_atomic(path, [json.dumps(report, indent=2, ensure_ascii=False)])


# --------------------------------------------------------------------------- mt evaluate --hyp


@dataclass(frozen=True)
class FileScores:
    """`score_files`' result: the scores of `sentences` hypotheses and where the report went."""

    scores: Scores
    sentences: int
    report_path: Path


def score_files(hyp: Path, ref: Path, out_dir: Path | None, *, bleu_tokenize: str) -> FileScores:
    """Score a hypothesis file against a reference file (lines stripped at the end; BLEU tokenised
    with `bleu_tokenize`) and write `<out_dir or ./eval>/<hyp name>.json`."""
    hyps, refs = read_lines(hyp), read_lines(ref)
    check_same_length(hyp, ref, len(hyps), len(refs))
    started = time.perf_counter()
    scores = score([h.rstrip() for h in hyps], [r.rstrip() for r in refs], tokenize=bleu_tokenize)
    report_path = (out_dir or Path("eval")) / f"{hyp.name}.json"
    write_report(report_path, build_report(hyp, str(ref.resolve()), scores, sentences=len(hyps),
                                           score_s=time.perf_counter() - started, made=None))
    return FileScores(scores, len(hyps), report_path)


# --------------------------------------------------------------------------- mt evaluate -c


@dataclass(frozen=True)
class EvalSet:
    """Source lines to translate and their references."""

    label: str  # split name, or the source file's name
    source: str  # where the source came from (for the report)
    reference: str
    src: list[str]
    ref: list[str]


def read_file_set(src: Path, ref: Path) -> EvalSet:
    """A test set from a source file and its reference file (same line count)."""
    src_lines, ref_lines = read_lines(src), read_lines(ref)
    check_same_length(src, ref, len(src_lines), len(ref_lines))
    return EvalSet(src.name, str(src), str(ref), src_lines, ref_lines)


def read_split_set(pair: PairConfig, split: str, label: str = "") -> EvalSet:
    """A split of one language pair of the checkpoint's corpus (its path relative to the working
    directory), labelled `label` (default: the split's name)."""
    if not split_available(pair, split):
        raise _not_found(split, [pair])
    src_lines, ref_lines = read_split(pair, split)
    where = f"{pair.path} ({split}.{pair.src_lang}/{pair.tgt_lang})"
    return EvalSet(label or split, where, where, src_lines, ref_lines)


def _not_found(split: str, pairs: Sequence[PairConfig]) -> MTError:
    def named(p: PairConfig) -> str:
        splits = dict.fromkeys([p.train_split, p.valid_split, *p.test_splits])
        return f"{p.path} (the config names: {', '.join(splits)})"

    known = "; ".join(named(p) for p in pairs)
    return MTError(f"split '{split}': not found in {known}")


def default_out_dir(checkpoint: Path) -> Path:
    """<run_dir>/eval for runs/<name>/checkpoints/<file>.pt, else ./eval."""
    parent = checkpoint.resolve().parent
    return parent.parent / "eval" if parent.name == "checkpoints" else Path("eval")


@dataclass(frozen=True)
class SetResult:
    """`evaluate_set`'s result: the hypotheses, their scores, timing and the files written."""

    hyps: list[str]
    scores: Scores
    translate_s: float
    hyp_path: Path
    report_path: Path
    terms: TermSuccess | None = None  # with a glossary: the share of its terms kept
    # how the sentence confidences rank the outputs (`confidence_report`)
    confidence: dict[str, Any] | None = None
    placement: dict[str, Any] | None = None  # with a glossary and mt's own model: `term_placement`


def confidence_report(confidences: Sequence[float], hyps: Sequence[str], refs: Sequence[str],
                      decode: DecodeConfig) -> dict[str, Any]:
    """How well the outputs' confidences (`mt.decode.confidence`) rank them: Spearman with sentence chrF,
    their mean, the share below `LOW`, and whether the calibration is the checkpoint's own."""
    chrf = sentence_chrf(hyps, refs)
    finite = [c for c in confidences if not math.isnan(c)]
    return {"spearman_chrf": round(spearman(confidences, chrf), 4),
            "mean": round(sum(finite) / len(finite), 4) if finite else None,
            "low_share": round(sum(c < LOW for c in finite) / len(finite), 4) if finite else None,
            "low": LOW, "calibrated": bool(decode.calibration.weights)}


def evaluate_set(
    model: Transformer | Ensemble | Engine,
    tokenizer: Tokenizer,
    test: EvalSet,
    decode: DecodeConfig,
    *,
    device: torch.device,
    checkpoints: Sequence[Path],
    checkpoint_sha256s: Sequence[str],
    load_s: float,
    out_dir: Path,
    progress: bool,
    bleu_tokenize: str,
    init_from: Sequence[dict[str, Any] | None] = (),
    glossary: TermConstraints | None = None,
) -> SetResult:
    """Translate a test set, score it against its references (stripped at the end; BLEU tokenised
    with `bleu_tokenize`) and write `<out_dir>/<label>.<checkpoint stem>.beam<K>.hyp` and the
    `.json` report beside it (stems joined by '+' for an ensemble; `sample<seed>` instead of
    `beam<K>` when decode.search.sampling). With `glossary`, sentences holding its terms are translated
    keeping them, and the report adds `term_success` (mt.eval.terms)."""
    if not test.src:
        raise MTError(f"{test.label}: no sentences to translate")
    t0 = time.perf_counter()
    found = search_lines(model, tokenizer, test.src, decode, device=device, progress=progress,
                             glossary=glossary).scored()
    hyps = [s.output for s in found]
    translate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores = score(hyps, [r.rstrip() for r in test.ref], tokenize=bleu_tokenize)
    score_s = time.perf_counter() - t0
    how = f"sample{decode.search.seed}" if decode.search.sampling else f"beam{decode.search.beam}"
    # A multi-pair label `en-fr/test_2016_flickr` names the files `en-fr.test_2016_flickr...`.
    stem = f"{test.label.replace('/', '.')}.{'+'.join(path.stem for path in checkpoints)}.{how}"
    hyp_path, report_path = out_dir / f"{stem}.hyp", out_dir / f"{stem}.json"
    write_lines_atomic(hyp_path, hyps)
    made = Provenance(test.label, test.source, checkpoints, checkpoint_sha256s, decode, str(device),
                      torch.get_num_threads(), load_s, translate_s, init_from)
    report = build_report(hyp_path, test.reference, scores, sentences=len(hyps), score_s=score_s, made=made)
    terms = None if glossary is None else term_success(test.src, hyps, glossary.glossary)
    placed = None
    if terms is not None and glossary is not None:
        report.update(glossary=glossary.glossary.name, term_success=terms.to_dict())
        placed = term_placement(as_engine(model, device), tokenizer, test, hyps, glossary, bleu_tokenize,
                                device)
    if placed is not None:
        report.update(term_placement=placed)
    report["confidence"] = confidence_report([s.confidence(decode) for s in found], hyps,
                                             [r.rstrip() for r in test.ref], decode)
    write_report(report_path, report)
    return SetResult(hyps, scores, translate_s, hyp_path, report_path, terms, confidence=report["confidence"],
                     placement=placed)


def term_placement(engine: Engine, tokenizer: Tokenizer, test: EvalSet, hyps: Sequence[str],
                   glossary: TermConstraints, bleu_tokenize: str,
                   device: torch.device) -> dict[str, Any] | None:
    """Where the terms went (mt.eval.terms.placement), on the sentences holding a term: exclusivity,
    and BLEU against the original and the term-rewritten references; None for an engine without
    cross-attention to align with (an export) or a set without a term."""
    rows = [i for i, line in enumerate(test.src) if glossary.glossary.match(line)]
    if not rows or not isinstance(engine, NativeEngine):
        return None
    src = [test.src[i] for i in rows]
    refs = [test.ref[i].rstrip() for i in rows]
    held = [hyps[i] for i in rows]
    alignments = align_words(engine.model, tokenizer, src, refs, device=device)
    found = placement(src, refs, held, glossary.glossary, alignments)
    return {**found.to_dict(), "sentences": len(rows),
            "bleu_original": round(score(held, refs, tokenize=bleu_tokenize).bleu, 2),
            "bleu_rewritten": round(score(held, found.rewritten, tokenize=bleu_tokenize).bleu, 2)}


def eval_sets(cfg: Config, tokenizer: Tokenizer, splits: Sequence[str], files: list[EvalSet],
              target_lang: str | None, tokenize: str | None) -> list[tuple[EvalSet, Tokenizer, str]]:
    """(test set, the tokenizer that translates it, its BLEU tokenizer) for each split and file set;
    `tokenize` overrides the config's BLEU tokenizer (None = the config's or the language's).

    Each split of every language pair of the model (into `target_lang` when given) that has it,
    labelled by `cfg.data.split_label` (`test_2016_flickr` for a model of one pair,
    `en-fr/test_2016_flickr` among several); a split no pair has is an error naming the pairs'
    splits. The file sets are translated into `target_lang` (which the model must know; it may be
    left out when the model has one target language)."""
    def bleu_for(lang: str) -> str:
        return bleu_tokenizer_for(lang, cfg.decode.bleu_tokenize if tokenize is None else tokenize)

    pairs = cfg.data.pairs_into(target_lang)
    if not pairs:
        # the error naming the languages the model knows
        tokenizer.for_target(target_lang, flag="--target-lang")
    out = []
    for split in splits:
        found = [p for p in pairs if split_available(p, split)]
        if not found:
            raise _not_found(split, pairs)
        out += [(read_split_set(p, split, cfg.data.split_label(p, split, "/")),
                 tokenizer.for_target(p.tgt_lang), bleu_for(p.tgt_lang)) for p in found]
    lang = target_lang or cfg.data.target_langs[0]
    return out + [(f, tokenizer.for_target(target_lang, flag="--target-lang"), bleu_for(lang)) for f in files]
