"""Language identification accuracy of `mt serve`'s detector (/detect, source "auto"):
`mt.serve.detect.LanguageDetector` over the languages a server serves, on the first N test
sentences of each language of a parallel test set.

    .venv/bin/python scripts/tools/detect_accuracy.py --data /work/shared/data/multi30k --langs en de fr

Reads `<split>.<lang>[.gz]` (default test_2016_flickr, Multi30k's test set) and prints, per
language, how many of its first `--limit` sentences (default 200) were identified as that
language, what they were taken for otherwise, the time per sentence and the CPU it ran on;
`--words N` keeps each sentence's first N words (short texts are the hard case).
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections import Counter
from pathlib import Path

from mt.device import cpu_name
from mt.serve.detect import LanguageDetector


def read_lines(data: Path, split: str, lang: str, limit: int) -> list[str]:
    for path in (data / f"{split}.{lang}", data / f"{split}.{lang}.gz"):
        if path.is_file():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                return [line.strip() for line, _ in zip(f, range(limit))]
    raise SystemExit(f"--data {data}: no {split}.{lang} or {split}.{lang}.gz")


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder of <split>.<lang>[.gz] files")
    ap.add_argument("--langs", nargs="+", default=["en", "de", "fr"], help="the served languages")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--limit", type=int, default=200, help="sentences per language")
    ap.add_argument("--words", type=int, default=0, help="keep only each sentence's first N words (0: all)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    detector = LanguageDetector(args.langs)
    loaded = time.perf_counter() - started
    print(f"detector: py3langid over {', '.join(detector.languages)} (loaded in {loaded:.2f} s); "
          f"CPU: {cpu_name() or 'unknown'}")
    accuracy, seconds, count = {}, 0.0, 0
    for lang in args.langs:
        lines = read_lines(args.data, args.split, lang, args.limit)
        if args.words:
            lines = [" ".join(line.split()[:args.words]) for line in lines]
        started = time.perf_counter()
        found = Counter(detector.detect(line)["language"] for line in lines)
        seconds += time.perf_counter() - started
        count += len(lines)
        accuracy[lang] = found[lang] / len(lines)
        wrong = ", ".join(f"{code} {n}" for code, n in found.most_common() if code != lang) or "none"
        print(f"{lang}: {found[lang]}/{len(lines)} = {100 * accuracy[lang]:.1f}%  (taken for: {wrong})")
    print(f"mean {100 * sum(accuracy.values()) / len(accuracy):.1f}% over {count} sentences; "
          f"{1000 * seconds / max(count, 1):.2f} ms per sentence")
    return accuracy


if __name__ == "__main__":
    main()
