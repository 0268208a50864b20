"""Validation and test sets held out of a corpus that came as one file.

A user with one TSV / JSONL file, or one pair of plain-text files (`mt.data.corpus.single_file`),
has no validation or test split. `split_pairs` makes them, seeded:

- sizes by corpus size (`holdout_size`): 5% each, at least `MIN_HELD` and at most `MAX_HELD`
  pairs (a few hundred sentences already give BLEU a usable confidence interval; more than a
  couple of thousand buys little and costs training data); a corpus under `MIN_PAIRS` pairs is
  too small to split usefully: one MTError says so;
- no leak: a pair is compared by its sides' normalised text (NFKC, case-folded, punctuation
  folded: `mt.data.clean_rules.normalise`). Held-out pairs are drawn first from pairs whose
  source and target each occur once in the corpus, so holding them out costs nothing else;
  no two held-out pairs share a normalised side, and every training pair whose source or target
  equals a held-out side (exactly or once normalised) is removed from training and counted.
  So no test or validation sentence is also in train.

`materialize(pair, out_dir, seed)` writes the three splits as a text-format folder
(`train.{src,tgt}`, `val.*`, `test.*`) with `split.json` (the source files with size and
mtime, the seed, the sizes and the removed counts), and returns the `PairConfig` reading that
folder; the same files and seed leave the folder as it is. `resolve_single_files(cfg)` does
this for every pair of a config whose path is one file, into `<run>/corpus/<pair>/`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.config import Config, PairConfig
from mt.data import corpus
from mt.data.clean_rules import normalise
from mt.errors import MTError
from mt.textio import atomic_write, write_lines_atomic

MIN_PAIRS = 500  # below this, held-out sets of MIN_HELD would leave too little to train on
MIN_HELD = 100  # pairs per held-out set, at least: fewer make BLEU's interval too wide to compare systems
MAX_HELD = 2000  # pairs per held-out set, at most (WMT test sets hold 1,000-3,000 sentences)
SHARE = 0.05  # of the corpus per held-out set between those bounds
SPLIT_RECORD = "split.json"
VALID, TEST = "val", "test"
Pairs = list[tuple[str, str]]


@dataclass(frozen=True)
class Split:
    """A corpus split three ways, with what was removed from training to keep the sets apart."""

    train: Pairs
    valid: Pairs
    test: Pairs
    removed: int  # training pairs dropped because a side equals a held-out side (exact or normalised)

    def record(self) -> dict[str, Any]:
        return {"train": len(self.train), "val": len(self.valid), "test": len(self.test),
                "removed_overlapping_train_pairs": self.removed}


def holdout_size(pairs: int) -> int:
    """Pairs in each of the validation and test sets for a corpus of `pairs` (MTError when too small)."""
    if pairs < MIN_PAIRS:
        raise MTError(f"the corpus has {pairs} sentence pairs, too few to hold out validation and test sets "
                      f"(at least {MIN_PAIRS}); give a folder with your own train and val splits")
    return max(MIN_HELD, min(MAX_HELD, round(SHARE * pairs)))


def split_pairs(pairs: Pairs, seed: int) -> Split:
    """Validation and test sets held out of `pairs`, seeded; no normalised side shared across splits."""
    size = holdout_size(len(pairs))
    keys = [(normalise(s), normalise(t)) for s, t in pairs]
    src_count: dict[str, int] = {}
    tgt_count: dict[str, int] = {}
    for s, t in keys:
        src_count[s] = src_count.get(s, 0) + 1
        tgt_count[t] = tgt_count.get(t, 0) + 1
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    # Pairs whose sides are unique first (holding them out removes nothing else), in seeded order.
    order.sort(key=lambda i: src_count[keys[i][0]] > 1 or tgt_count[keys[i][1]] > 1)
    held: list[int] = []
    held_src: set[str] = set()
    held_tgt: set[str] = set()
    for i in order:
        if len(held) == 2 * size:
            break
        s, t = keys[i]
        if not s or not t or s in held_src or t in held_tgt:
            continue
        held.append(i)
        held_src.add(s)
        held_tgt.add(t)
    if len(held) < 2 * size:
        raise MTError(f"the corpus has only {len(held)} distinct sentence pairs to hold out, "
                      f"{2 * size} needed; "
                      f"give a folder with your own train and val splits")
    taken = set(held)
    train = [pairs[i] for i in range(len(pairs)) if i not in taken
             and keys[i][0] not in held_src and keys[i][1] not in held_tgt]
    removed = len(pairs) - len(held) - len(train)
    return Split(train, [pairs[i] for i in held[size:]], [pairs[i] for i in held[:size]], removed)


def _source_record(single: corpus.SingleFile) -> list[list[Any]]:
    return [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in single.files]


def _write_split(folder: Path, name: str, pairs: Pairs, src_lang: str, tgt_lang: str) -> None:
    write_lines_atomic(folder / f"{name}.{src_lang}", (s for s, _ in pairs))
    write_lines_atomic(folder / f"{name}.{tgt_lang}", (t for _, t in pairs))


def materialize(pair: PairConfig, out_dir: Path, seed: int) -> PairConfig:
    """`pair`'s one-file corpus split three ways into `out_dir` (a no-op when done for these files
    and seed); the `PairConfig` that reads the folder. `pair` itself when its path is a folder."""
    single = corpus.single_file(pair)
    if single is None:
        return pair
    folder = PairConfig(path=str(out_dir), src_lang=pair.src_lang, tgt_lang=pair.tgt_lang, format="text",
                        train_split=pair.train_split, valid_split=VALID, test_splits=(TEST,))
    source = _source_record(single)
    record_path = out_dir / SPLIT_RECORD
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = {}
        if record.get("source") == source and record.get("seed") == seed:
            return folder
    pairs = [(s.strip(), t.strip()) for s, t in corpus.iter_split(pair, pair.train_split)]
    pairs = [(s, t) for s, t in pairs if s and t]
    if not pairs:
        raise MTError(f"{pair.path}: the corpus holds no sentence pairs with text on both sides")
    split = split_pairs(pairs, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    record_path.unlink(missing_ok=True)  # until the new record, the folder reads as incomplete
    for name, part in ((pair.train_split, split.train), (VALID, split.valid), (TEST, split.test)):
        _write_split(out_dir, name, part, pair.src_lang, pair.tgt_lang)
    record = {"source": source, "format": single.format, "seed": seed, "pairs_read": len(pairs),
              "normalisation": "NFKC, case-folded, punctuation folded (mt.data.clean_rules.normalise)",
              **split.record()}
    with atomic_write(record_path) as f:  # last: its presence marks the split complete
        f.write((json.dumps(record, indent=2) + "\n").encode("utf-8"))
    return folder


def resolve_single_files(cfg: Config) -> Config:
    """`cfg` with every pair whose path is one corpus file read from its split folder in the run
    (`<run>/corpus/<pair>/`, made by `materialize` with `train.seed`); `cfg` itself otherwise."""
    if not any(corpus.single_file(p) is not None for p in cfg.data.pairs):
        return cfg
    seed = cfg.train.seed
    if not cfg.data.target_tags:  # the one pair is the data section's own keys
        p = materialize(cfg.data.pairs[0], cfg.run_dir / "corpus" / cfg.data.pairs[0].name, seed)
        data = dataclasses.replace(cfg.data, path=p.path, format=p.format, valid_split=p.valid_split,
                                   test_splits=p.test_splits)
    else:
        pairs = tuple(materialize(p, cfg.run_dir / "corpus" / p.name, seed) for p in cfg.data.pairs)
        data = dataclasses.replace(cfg.data, pairs=pairs)
    return dataclasses.replace(cfg, data=data)
