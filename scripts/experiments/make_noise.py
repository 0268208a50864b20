"""Seeded noise for the cleaning stage: corrupt Multi30k en->de training pairs the ways web-crawled
corpora are noisy (Khayrallah & Koehn 2018), with a label per pair, and score a cleaning run's
drops against those labels.

    python scripts/experiments/make_noise.py make --mirror /work/shared/data/multi30k --out data/noisy
    mt data clean data/noisy --src-lang en --tgt-lang de -o data/noisy.clean --dropped-file
    python scripts/experiments/make_noise.py score data/noisy/train.labels data/noisy.clean/clean_dropped.jsonl

`make` writes `train.en`, `train.de` (the 29,000 pairs, a share of them corrupted in place) and
`train.labels` (one label per line: clean or the kind of noise), copies the validation and test
splits unchanged, and writes `noise.json` (seed, shares, counts). The kinds, in stated shares of
the pairs (35% in all by default), on disjoint pairs:

  copy        target := source (untranslated text copied over)
  misaligned  targets shuffled among these pairs (no pair keeps its own)
  wrong_lang  target := the French translation of the same caption (the mirror is three-way parallel)
  duplicate   the pair := an earlier clean pair, half of them as is, half with case or final
              punctuation changed (near-duplicates)
  fragment    target := its first third of words or fewer (a sentence cut by a bad splitter)

`score` prints (and with --json writes) each rule's precision (the share of its drops that are
noise) and each noise kind's recall (the share of its pairs dropped, by any rule), plus the share
of clean pairs dropped.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections import Counter
from pathlib import Path

from mt.textio import read_lines

KINDS = {"copy": 0.08, "misaligned": 0.08, "wrong_lang": 0.07, "duplicate": 0.07, "fragment": 0.05}
SPLITS = ("val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")


def read_mirror(mirror: Path, name: str) -> list[str]:
    """The lines of the mirror's NAME (or NAME.gz)."""
    for path in (mirror / name, mirror / f"{name}.gz"):
        if path.is_file():
            return read_lines(path)
    sys.exit(f"make_noise: {mirror / name}(.gz) not found")


def copy_splits(mirror: Path, dest: Path) -> None:
    """Copy the mirror's en and de validation and test splits into `dest` (beside a train split)."""
    for split in SPLITS:
        for lang in ("en", "de"):
            found = mirror / f"{split}.{lang}.gz"
            if found.is_file():
                shutil.copyfile(found, dest / found.name)


def _near(text: str, rng: random.Random) -> str:
    """A near-duplicate of `text`: lower-cased, or its final punctuation removed or added."""
    if rng.random() < 0.5:
        return text.lower()
    return text[:-1].rstrip() if text.endswith((".", "!", "?")) else text + "."


def corrupt(en: list[str], de: list[str], fr: list[str], shares: dict[str, float], seed: int
            ) -> tuple[list[str], list[str], list[str]]:
    """(source, target, label per pair): `shares` of the pairs corrupted by kind, seeded."""
    rng = random.Random(seed)
    n = len(en)
    order = list(range(n))
    rng.shuffle(order)
    src, tgt, labels = list(en), list(de), ["clean"] * n
    start = 0
    chosen: dict[str, list[int]] = {}
    for kind, share in shares.items():
        chosen[kind] = sorted(order[start:start + round(share * n)])
        start += len(chosen[kind])
    for i in chosen.get("copy", []):
        tgt[i] = src[i]
    mis = chosen.get("misaligned", [])
    if len(mis) > 1:
        moved = mis[:]
        rng.shuffle(moved)
        targets = [de[j] for j in moved]
        targets = targets[1:] + targets[:1]  # a rotation of a shuffle: no pair keeps its own target
        for i, t in zip(moved, targets):
            tgt[i] = t
    for i in chosen.get("wrong_lang", []):
        tgt[i] = fr[i]
    for i in chosen.get("fragment", []):
        words = de[i].split()
        tgt[i] = " ".join(words[:max(1, min(len(words) // 3, rng.randint(1, 4)))])
    for kind in ("copy", "misaligned", "wrong_lang", "fragment"):
        for i in chosen.get(kind, []):
            labels[i] = kind
    for i in chosen.get("duplicate", []):  # copies of an earlier clean pair (dedup keeps the first)
        earlier = [j for j in (rng.randrange(max(i, 1)) for _ in range(20)) if labels[j] == "clean" and j < i]
        if not earlier:
            continue
        j = earlier[0]
        near = rng.random() < 0.5
        src[i], tgt[i] = (_near(src[j], rng), _near(tgt[j], rng)) if near else (src[j], tgt[j])
        labels[i] = "duplicate"
    return src, tgt, labels


def make(mirror: Path, out: Path, seed: int, scale: float, limit: int = 0) -> dict[str, object]:
    """Write the noisy corpus into `out` (module docstring) from the first `limit` pairs (0 = all)."""
    en, de, fr = (read_mirror(mirror, f"train.{lang}")[:limit or None] for lang in ("en", "de", "fr"))
    shares = {kind: share * scale for kind, share in KINDS.items()}
    src, tgt, labels = corrupt(en, de, fr, shares, seed)
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in (("train.en", src), ("train.de", tgt), ("train.labels", labels)):
        (out / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    copy_splits(mirror, out)
    counts = Counter(labels)
    summary = {"seed": seed, "pairs": len(labels), "shares": shares, "counts": dict(counts),
               "noisy_share": round(1 - counts["clean"] / len(labels), 4)}
    (out / "noise.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def score(labels_path: Path, dropped_path: Path) -> dict[str, object]:
    """Precision per rule and recall per noise kind of a cleaning run's dropped file against the labels."""
    labels = labels_path.read_text(encoding="utf-8").split("\n")[:-1]
    rule_of: dict[int, str] = {}
    with dropped_path.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            rule_of[row["line"] - 1] = row["rule"]
    kinds = Counter(labels)
    per_rule: dict[str, Counter[str]] = {}
    for i, rule in rule_of.items():
        per_rule.setdefault(rule, Counter())[labels[i]] += 1
    rules = {rule: {"dropped": sum(c.values()), "precision": round(1 - c["clean"] / sum(c.values()), 4),
                    "by_label": dict(c)} for rule, c in sorted(per_rule.items())}
    recall = {}
    for kind, total in sorted(kinds.items()):
        by_rule = Counter(rule_of[i] for i, lab in enumerate(labels) if lab == kind and i in rule_of)
        recall[kind] = {"pairs": total, "dropped": sum(by_rule.values()),
                        "recall": round(sum(by_rule.values()) / total, 4), "by_rule": dict(by_rule)}
    noisy = sum(n for k, n in kinds.items() if k != "clean")
    dropped_noisy = sum(1 for i in rule_of if labels[i] != "clean")
    return {"rules": rules, "kinds": recall, "overall": {
        "precision": round(dropped_noisy / max(len(rule_of), 1), 4), "recall": round(dropped_noisy / max(noisy, 1), 4),
        "clean_dropped_share": round(recall.get("clean", {}).get("dropped", 0) / max(kinds["clean"], 1), 4)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write a noisy copy of Multi30k en-de with labels")
    m.add_argument("--mirror", type=Path, required=True, help="Multi30k folder with train.{en,de,fr}(.gz)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--scale", type=float, default=1.0, help="multiply every share (1 = 35%% noisy pairs)")
    m.add_argument("--limit", type=int, default=0, help="use only the first N training pairs (0 = all)")
    s = sub.add_parser("score", help="precision and recall of a cleaning run's dropped pairs")
    s.add_argument("labels", type=Path)
    s.add_argument("dropped", type=Path, help="the clean_dropped.jsonl of `mt data clean --dropped-file`")
    s.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    if args.cmd == "make":
        print(json.dumps(make(args.mirror, args.out, args.seed, args.scale, args.limit)))
        return
    result = score(args.labels, args.dropped)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
