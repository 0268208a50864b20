"""The cleaning stage: rules and language identification over raw training pairs, streamed.

`mt prepare` runs it on every pair's training split when `clean.enabled` (before the tokenizer:
the pieces it learns come from the kept pairs), and `mt data clean` runs it alone on a corpus in
any format mt reads (mt.data.corpus). The rules (`clean.rules`, in this order; the first that
applies names the drop):

  no_text         a side empty, or only punctuation, symbols or markup
  length          more than `max_words` words on a side, or a character ratio above `max_char_ratio`
  copy            the target is the source (after case and punctuation folding), or shares
                  `max_overlap` of its words with it
  script          a side with less than `min_script_share` of its letters in its language's script
  numbers         a number, URL or e-mail address on one side only
  duplicate       a pair seen before, byte for byte (after stripping outer whitespace)
  near_duplicate  a pair seen before after case, punctuation and spacing are folded
  langid          a side that py3langid identifies as another language (mt.data.langid)

Duplicates are found by 64-bit hashes (blake2b) in `HashSet64`, a numpy open-addressing table of
16 to 32 bytes per distinct pair (two tables: exact and folded; 4.5M distinct pairs take 256 MiB):
memory grows with the distinct pairs, never with their text.
Everything else keeps no state, so memory is bounded by one pair, the two hash tables and the
examples kept. Cleaning is deterministic (same input and settings, same output), and
`clean.max_drop` stops a run that would drop more than that share of a split, naming the rule
that dropped most: a wrong language code or a swapped corpus should not silently become an empty
training set. Model scores (dual conditional cross-entropy) are a second pass: mt.eval.dualxent.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import logging
import multiprocessing as mp
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from mt.config import CleanConfig, Config, PairConfig
from mt.data import clean_rules
from mt.data.langid import LanguageID
from mt.errors import MTError

log = logging.getLogger(__name__)
CLEAN_VERSION = 1  # part of prepare's cache key with clean.enabled: bump when a rule changes what it drops
# A pair's verdict before the duplicate tables: (per-pair drop, exact hash, folded hash, langid drop).
Verdict = tuple[tuple[str, str] | None, int, int, tuple[str, str] | None]
RULES = ("no_text", "length", "copy", "script", "numbers", "duplicate", "near_duplicate", "langid")


class HashSet64:
    """A set of 64-bit hashes in a numpy table (linear probing, doubled at half full): 16-32 bytes
    per member instead of a Python set's ~60, and no object per member."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.table = np.zeros(capacity, dtype=np.uint64)  # 0 = empty slot
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, h: int) -> bool:
        """Add hash `h`; True when it was new."""
        h = h or 1  # 0 marks an empty slot
        if 2 * (self.size + 1) > len(self.table):
            self._grow()
        table, mask = self.table, len(self.table) - 1
        i = h & mask
        while True:
            slot = int(table[i])
            if slot == 0:
                table[i] = h
                self.size += 1
                return True
            if slot == h:
                return False
            i = (i + 1) & mask

    def _grow(self) -> None:
        """Double the table, re-inserting every member at once: each round places, per free slot,
        one of the members probing it, and moves the rest one slot on (linear probing's order)."""
        pending, capacity = self.table[self.table != 0], 2 * len(self.table)
        self.table = np.zeros(0, dtype=np.uint64)  # the old table freed before the new one exists
        table = np.zeros(capacity, dtype=np.uint64)
        mask = np.uint64(len(table) - 1)
        pos = pending & mask
        while len(pending):
            free = np.flatnonzero(table[pos] == 0)
            _, first = np.unique(pos[free], return_index=True)
            placed = free[first]
            table[pos[placed]] = pending[placed]
            rest = np.ones(len(pending), dtype=bool)
            rest[placed] = False
            pending, pos = pending[rest], (pos[rest] + np.uint64(1)) & mask
        self.table = table


def hash64(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass
class CleanStats:
    """What one cleaning run read, kept and dropped per rule, with seeded examples per rule."""

    samples: int = 10
    seed: int = 1
    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def record(self, line: int, src: str, tgt: str, drop: tuple[str, str] | None) -> None:
        """Count pair number `line` (1-based): kept when `drop` is None, else (rule, detail); keep
        a reservoir sample of `samples` dropped pairs per rule."""
        self.read += 1
        if drop is None:
            self.kept += 1
            return
        rule, detail = drop
        n = self.dropped[rule] = self.dropped.get(rule, 0) + 1
        kept = self.examples.setdefault(rule, [])
        example = {"line": line, "detail": detail, "src": src, "tgt": tgt}
        if len(kept) < self.samples:
            kept.append(example)
        elif self.samples:
            j = self._rng.randrange(n)
            if j < self.samples:
                kept[j] = example

    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def dropped_fraction(self) -> float:
        return self.dropped_total() / self.read if self.read else 0.0

    def summary(self) -> str:
        """e.g. 'kept 28990 of 29000 (dropped 10: copy 6, langid 4)'."""
        drops = ", ".join(f"{rule} {n}" for rule, n in self.dropped.items() if n)
        listed = ": " + drops if drops else ""
        return f"kept {self.kept} of {self.read} (dropped {self.dropped_total()}{listed})"

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "kept": self.kept, "dropped": dict(self.dropped),
                "dropped_share": round(self.dropped_fraction(), 6), "notes": list(self.notes),
                "examples": {rule: sorted(found, key=lambda e: e["line"])
                             for rule, found in self.examples.items()}}


class Cleaner:
    """The rules of `cfg.rules` for one language pair: `check(src, tgt)` -> (rule, detail) or None."""

    def __init__(self, cfg: CleanConfig, src_lang: str, tgt_lang: str) -> None:
        unknown = [r for r in cfg.rules if r not in RULES]
        if unknown:
            raise MTError(f"config key 'clean.rules': unknown rule {unknown[0]!r}; "
                          f"expected some of {', '.join(RULES)}")
        self.cfg, self.rules = cfg, set(cfg.rules)
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.src_scripts = clean_rules.scripts_of(src_lang)
        self.tgt_scripts = clean_rules.scripts_of(tgt_lang)
        self.exact, self.folded = HashSet64(), HashSet64()
        self.langid = (LanguageID([src_lang, tgt_lang], cfg.langid_threshold) if "langid" in self.rules
                       else None)
        self.notes = []
        if "script" in self.rules:
            self.notes += [f"script: no script known for '{lang}'; its side is not checked"
                           for lang, s in ((src_lang, self.src_scripts), (tgt_lang, self.tgt_scripts))
                           if not s]
        if self.langid is not None:
            self.notes += [f"langid: py3langid does not cover '{lang}'; its side is not checked"
                           for lang in self.langid.uncovered]

    def judge(self, src: str, tgt: str) -> Verdict:
        """What needs no state, for one (stripped) pair: the first per-pair rule that drops it, the
        hashes the duplicate rules look up, and language ID's verdict (only when the per-pair
        rules keep it). Runs in worker processes with `workers` > 1."""
        cfg, rules = self.cfg, self.rules
        if "no_text" in rules and (why := clean_rules.no_text(src, tgt)):
            return ("no_text", why), 0, 0, None
        if "length" in rules and (why := clean_rules.length(src, tgt, max_words=cfg.max_words,
                                                             max_char_ratio=cfg.max_char_ratio,
                                                             ratio_min_chars=cfg.ratio_min_chars)):
            return ("length", why), 0, 0, None
        folded = ""
        if "copy" in rules or "near_duplicate" in rules:
            folded = f"{clean_rules.normalise(src)}\t{clean_rules.normalise(tgt)}"
        if "copy" in rules and (why := clean_rules.copy_normalised(*folded.split("\t"),
                                                                   max_overlap=cfg.max_overlap)):
            return ("copy", why), 0, 0, None
        if "script" in rules and (why := clean_rules.script(src, tgt, src_scripts=self.src_scripts,
                                                             tgt_scripts=self.tgt_scripts,
                                                             min_share=cfg.min_script_share)):
            return ("script", why), 0, 0, None
        if "numbers" in rules and (why := clean_rules.numbers(src, tgt)):
            return ("numbers", why), 0, 0, None
        exact = hash64(f"{src}\t{tgt}") if "duplicate" in rules else 0
        near = hash64(folded) if "near_duplicate" in rules else 0
        wrong = None
        if self.langid is not None:
            for side, text, lang in (("source", src, self.src_lang), ("target", tgt, self.tgt_lang)):
                if why := self.langid.wrong_language(text, lang):
                    wrong = ("langid", f"{side}: {why} (expected {lang})")
                    break
        return None, exact, near, wrong

    def decide(self, verdict: Verdict) -> tuple[str, str] | None:
        """The drop for a `judge` verdict, in `RULES` order: its per-pair drop, else a duplicate
        (the hashes enter the tables here, in corpus order), else language ID's."""
        drop, exact, near, wrong = verdict
        if drop is not None:
            return drop
        if "duplicate" in self.rules and not self.exact.add(exact):
            return "duplicate", "seen before"
        if "near_duplicate" in self.rules and not self.folded.add(near):
            return "near_duplicate", "seen before, up to case, punctuation and spacing"
        return wrong

    def check(self, src: str, tgt: str) -> tuple[str, str] | None:
        """Why the (stripped) pair is dropped, as (rule, detail), or None to keep it."""
        return self.decide(self.judge(src, tgt))


_worker: Cleaner | None = None
CHUNK = 2000  # pairs per task sent to a worker


def _init_worker(cfg: CleanConfig, src_lang: str, tgt_lang: str) -> None:
    global _worker
    _worker = Cleaner(cfg, src_lang, tgt_lang)


def _judge_chunk(chunk: list[tuple[str, str]]) -> list[Verdict]:
    assert _worker is not None
    return [_worker.judge(src, tgt) for src, tgt in chunk]


def _chunks(pairs: Iterable[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    it = iter(pairs)
    while chunk := [(s.strip(), t.strip()) for s, t in itertools.islice(it, CHUNK)]:
        yield chunk


def _verdicts(pairs: Iterable[tuple[str, str]], cleaner: Cleaner, workers: int
              ) -> Iterator[tuple[str, str, Verdict]]:
    """(stripped source, target, verdict) in corpus order; judged in `workers` processes when > 1
    (fork, or spawn when torch is loaded: see mt.data.encode.worker_pool), a few chunks in flight."""
    if workers <= 1:
        for src, tgt in pairs:
            src, tgt = src.strip(), tgt.strip()
            yield src, tgt, cleaner.judge(src, tgt)
        return
    spawn = "torch" in sys.modules or "fork" not in mp.get_all_start_methods()
    context = mp.get_context("spawn" if spawn else "fork")
    with context.Pool(workers, initializer=_init_worker,
                      initargs=(cleaner.cfg, cleaner.src_lang, cleaner.tgt_lang)) as pool:
        chunks = _chunks(pairs)
        pending: collections.deque[tuple[list[tuple[str, str]], Any]] = collections.deque()
        for chunk in chunks:
            pending.append((chunk, pool.apply_async(_judge_chunk, (chunk,))))
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                yield from ((s, t, v) for (s, t), v in zip(done, result.get()))
        while pending:
            done, result = pending.popleft()
            yield from ((s, t, v) for (s, t), v in zip(done, result.get()))


def clean_pairs(pairs: Iterable[tuple[str, str]], cleaner: Cleaner, stats: CleanStats,
                dropped: IO[str] | None = None, workers: int = 1) -> Iterator[tuple[str, str]]:
    """The pairs `cleaner` keeps, stripped of outer whitespace, in order; each pair counted in
    `stats`, and each dropped one written to `dropped` (JSON lines: line, rule, detail, src, tgt).
    With `workers` > 1 the per-pair rules and language ID run in that many processes; the result
    is the same."""
    stats.notes = list(dict.fromkeys([*stats.notes, *cleaner.notes]))
    for line, (src, tgt, verdict) in enumerate(_verdicts(pairs, cleaner, workers), start=1):
        drop = cleaner.decide(verdict)
        stats.record(line, src, tgt, drop)
        if drop is None:
            yield src, tgt
        elif dropped is not None:
            record = {"line": line, "rule": drop[0], "detail": drop[1], "src": src, "tgt": tgt}
            dropped.write(json.dumps(record, ensure_ascii=False) + "\n")


def check_share(stats: CleanStats, max_drop: float, where: str) -> None:
    """MTError naming the rule that dropped most when more than `max_drop` of the pairs were dropped."""
    if stats.read and stats.dropped_fraction() > max_drop:
        rule, n = max(stats.dropped.items(), key=lambda kv: kv[1])
        # no example with clean.samples: 0
        example = f" (e.g. {stats.examples[rule][0]['detail']})" if stats.examples.get(rule) else ""
        raise MTError(f"{where}: cleaning would drop {100 * stats.dropped_fraction():.1f}% of "
                      f"{stats.read} pairs, more than clean.max_drop={max_drop:g}; "
                      f"rule '{rule}' drops {100 * n / stats.read:.1f}%"
                      f"{example}; check the language codes, or leave '{rule}' out of clean.rules, or raise "
                      f"clean.max_drop")


def write_cleaned(pairs: Iterable[tuple[str, str]], cfg: CleanConfig, src_lang: str, tgt_lang: str, out: Path,
                  *, dropped_path: Path | None, where: str, workers: int = 1) -> CleanStats:
    """Clean `pairs` into `out`, JSON lines {"line", "src", "tgt"} (any text survives: tabs, newlines);
    every dropped pair to `dropped_path` when given. MTError (after the pass) over `cfg.max_drop`."""
    cleaner = Cleaner(cfg, src_lang, tgt_lang)
    stats = CleanStats(samples=cfg.samples, seed=cfg.seed)
    with out.open("w", encoding="utf-8") as f, _maybe_open(dropped_path) as dropped:
        for src, tgt in clean_pairs(pairs, cleaner, stats, dropped, workers):
            f.write(json.dumps({"line": stats.read, "src": src, "tgt": tgt}, ensure_ascii=False) + "\n")
    check_share(stats, cfg.max_drop, where)
    return stats


class _NoFile:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _maybe_open(path: Path | None) -> Any:
    return _NoFile() if path is None else path.open("w", encoding="utf-8")


def read_cleaned(path: Path) -> Iterator[tuple[str, str]]:
    """The pairs `write_cleaned` wrote, in order."""
    for _, src, tgt in read_cleaned_rows(path):
        yield src, tgt


def read_cleaned_rows(path: Path) -> Iterator[tuple[int, str, str]]:
    """(input line number, source, target) of each pair `write_cleaned` kept, in order."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            yield row["line"], row["src"], row["tgt"]


def clean_for_prepare(cfg: Config, pairs_of: Callable[[PairConfig], Iterable[tuple[str, str]]], work: Path,
                      dropped_dir: Path) -> dict[str, tuple[Path, CleanStats]]:
    """`mt prepare`'s pass 0 when `cfg.clean.enabled`: each pair's training pairs (`pairs_of(pair)`)
    cleaned into `work/<pair>.jsonl`, with every dropped pair in `dropped_dir/clean_dropped.<pair>.jsonl`
    when `clean.dropped_file`, in `tokenizer.workers` processes (as prepare encodes). Returns
    {pair name: (cleaned file, its stats)}; {} when disabled."""
    if not cfg.clean.enabled:
        return {}
    work.mkdir(parents=True, exist_ok=True)
    done = {}
    for pair in cfg.data.pairs:
        dropped = dropped_dir / f"clean_dropped.{pair.name}.jsonl" if cfg.clean.dropped_file else None
        out = work / f"{pair.name}.jsonl"
        where = f"training split '{pair.train_split}' of {pair.hub_name or pair.path}"
        t0 = time.perf_counter()
        stats = write_cleaned(pairs_of(pair), cfg.clean, pair.src_lang, pair.tgt_lang, out,
                              dropped_path=dropped, where=where, workers=cfg.tokenizer.workers)
        seconds = time.perf_counter() - t0
        log.info(f"prepare: cleaned {pair.name} {pair.train_split}: {stats.summary()} in {seconds:.1f}s "
                 f"({stats.read / max(seconds, 1e-9):,.0f} pairs/s)" + "".join(f"; {n}" for n in stats.notes))
        done[pair.name] = out, stats
    return done
