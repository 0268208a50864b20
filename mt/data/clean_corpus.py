"""`mt data clean`'s job: one split of a corpus, in any format mt reads, cleaned into plain text files.

Pass 1 runs the rules and language identification (mt.data.clean) into a temporary file of the
kept pairs and their input line numbers. With a `scorer` (dual conditional cross-entropy,
mt.eval.dualxent, built by the command), pass 2 scores the kept pairs in chunks of `chunk` (one
float per pair in memory), and pass 3 keeps the best `keep` share of them, or those scoring at
least `min_score`. The output folder gets `{split}.{src_lang}` and `{split}.{tgt_lang}` (one pair
per line: a newline inside a JSON or hub text becomes a space), `clean_report.json` (settings,
counts and examples per rule) and, asked for, `clean_dropped.jsonl` (every dropped pair with its
input line, rule and detail). Files are written under temporary names and renamed at the end, so
a run stopped by `clean.max_drop` leaves no half-written output.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from mt.config import CleanConfig
from mt.data import corpus
from mt.data.clean import CleanStats, check_share, read_cleaned_rows, write_cleaned
from mt.errors import MTError

log = logging.getLogger(__name__)
# (sources, targets) -> (N,) float, higher = better
Scorer = Callable[[Sequence[str], Sequence[str]], np.ndarray]
SCORE_RULE = "dual_xent"


def _one_line(text: str) -> str:
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


def _scores(rows_path: Path, scorer: Scorer, chunk: int) -> np.ndarray:
    found: list[np.ndarray] = []
    src: list[str] = []
    tgt: list[str] = []
    for _, s, t in read_cleaned_rows(rows_path):
        src.append(s)
        tgt.append(t)
        if len(src) == chunk:
            found.append(np.asarray(scorer(src, tgt), dtype=np.float32))
            src, tgt = [], []
    if src:
        found.append(np.asarray(scorer(src, tgt), dtype=np.float32))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.float32)


def _cutoff(scores: np.ndarray, keep: float | None, min_score: float | None) -> float:
    """The lowest score kept: the (1 - keep) quantile of `scores`, or `min_score`."""
    if min_score is not None:
        return min_score
    if keep is None or not len(scores):
        return -np.inf
    n_keep = int(round(keep * len(scores)))
    if n_keep <= 0:
        return np.inf
    return float(np.sort(scores)[len(scores) - n_keep])


def check_keep(keep: float | None, max_drop: float) -> None:
    """MTError unless `keep` is in (0, 1] and keeps at least 1 - `max_drop` of the pairs: a share
    the max-drop check would refuse anyway is refused before any pass reads or scores a pair."""
    if keep is None:
        return
    if not 0 < keep <= 1:
        raise MTError(f"--keep: must be in (0, 1], got {keep:g}")
    if 1 - keep > max_drop + 1e-9:
        raise MTError(f"--keep {keep:g}: drops {100 * (1 - keep):.1f}% of the pairs by score alone, "
                      f"more than clean.max_drop={max_drop:g} allows; keep at least {1 - max_drop:g}, "
                      f"or raise --max-drop")


def clean_corpus(data: corpus.Corpus, split: str, cfg: CleanConfig, out_dir: Path, *, dropped_file: bool,
                 scorer: Scorer | None = None, keep: float | None = None, min_score: float | None = None,
                 chunk: int = 20_000, workers: int = 1) -> CleanStats:
    """Clean `split` of `data` into `out_dir` (module docstring), the rules and language ID in
    `workers` processes; returns the counts, the model scores' drops counted under 'dual_xent'.
    MTError over `cfg.max_drop`, naming the rule."""
    check_keep(keep, cfg.max_drop)
    out_dir.mkdir(parents=True, exist_ok=True)
    where = f"split '{split}' of {data.hub_name or data.path}"
    rows = out_dir / ".clean.rows.tmp"
    dropped_tmp = out_dir / ".clean_dropped.jsonl.tmp" if dropped_file else None
    outputs = {lang: out_dir / f"{split}.{lang}" for lang in (data.src_lang, data.tgt_lang)}
    try:
        t0 = time.perf_counter()
        stats = write_cleaned(corpus.iter_split(data, split), cfg, data.src_lang, data.tgt_lang, rows,
                              dropped_path=dropped_tmp, where=where, workers=workers)
        timing = {"rules_seconds": round(time.perf_counter() - t0, 3)}
        scores, cutoff = None, -np.inf
        if scorer is not None:
            t1 = time.perf_counter()
            scores = _scores(rows, scorer, chunk)
            timing["score_seconds"] = round(time.perf_counter() - t1, 3)
            cutoff = _cutoff(scores, keep, min_score)
        _write_outputs(rows, outputs, scores, cutoff, stats, dropped_tmp)
        check_share(stats, cfg.max_drop, where)
        scored = ({"scores": {"rule": SCORE_RULE, "keep": keep, "min_score": min_score,
                              "cutoff": float(cutoff), "scored": int(len(scores))}}
                  if scores is not None else {})
        report = {"input": {"path": data.path, "format": data.format, "split": split,
                            "src_lang": data.src_lang, "tgt_lang": data.tgt_lang},
                  "settings": asdict(cfg), **timing, **scored, **stats.to_dict()}
        (out_dir / "clean_report.json.tmp").write_text(
            json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        for path in outputs.values():
            path.with_name(path.name + ".tmp").replace(path)
        (out_dir / "clean_report.json.tmp").replace(out_dir / "clean_report.json")
        if dropped_tmp is not None:
            dropped_tmp.replace(out_dir / "clean_dropped.jsonl")
    finally:
        for tmp in [rows, *(p.with_name(p.name + ".tmp") for p in outputs.values()),
                    out_dir / "clean_report.json.tmp", *([dropped_tmp] if dropped_tmp else [])]:
            tmp.unlink(missing_ok=True)
    log.info(f"clean: {where}: {stats.summary()} -> {out_dir}" + "".join(f"; {n}" for n in stats.notes))
    return stats


def _write_outputs(rows: Path, outputs: dict[str, Path], scores: np.ndarray | None, cutoff: float,
                   stats: CleanStats, dropped_tmp: Path | None) -> None:
    """The kept rows (score >= cutoff when scored) as two text files (`.tmp` names); score drops
    counted in `stats` and appended to the dropped file."""
    src_path, tgt_path = (p.with_name(p.name + ".tmp") for p in outputs.values())
    dropped = dropped_tmp.open("a", encoding="utf-8") if dropped_tmp is not None else None
    try:
        with src_path.open("w", encoding="utf-8", newline="\n") as fs, \
                tgt_path.open("w", encoding="utf-8", newline="\n") as ft:
            for i, (line, src, tgt) in enumerate(read_cleaned_rows(rows)):
                if scores is not None and not scores[i] >= cutoff:
                    _record_score_drop(stats, line, src, tgt, float(scores[i]), dropped)
                    continue
                fs.write(_one_line(src) + "\n")
                ft.write(_one_line(tgt) + "\n")
    finally:
        if dropped is not None:
            dropped.close()


def _record_score_drop(stats: CleanStats, line: int, src: str, tgt: str, score: float, dropped: Any) -> None:
    detail = f"score {score:.4f}"
    stats.read -= 1  # record() counts a read pair: this one was counted once, as kept, in pass 1
    stats.kept -= 1
    stats.record(line, src, tgt, (SCORE_RULE, detail))
    if dropped is not None:
        dropped.write(json.dumps({"line": line, "rule": SCORE_RULE, "detail": detail, "src": src, "tgt": tgt},
                                 ensure_ascii=False) + "\n")
