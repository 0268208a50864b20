"""Sentence segmenters compared: boundary recovery per language and speed (docs/guides/paragraphs.md).

    MT_DATA_MIRROR=../shared/data/multi30k python scripts/bench/bench_segment.py [--paragraphs 2000]

Accuracy on en/de/fr: Multi30k test_2016_flickr + test_2017_flickr sentences that end in . ! or ?
are joined into seeded paragraphs of 3-6 consecutive sentences with one space; a paragraph counts
as recovered when the segmenter returns exactly its sentences (a missed or an extra boundary fails
it); the table gives the share of paragraphs recovered and of the boundaries found (recall) and of
the boundaries returned that are real (precision). zh/ja/ar/ru/cs: the hand-made cases of
`HAND_MADE` below (abbreviations, numbers, quotes, ellipses), one list of expected sentences each.
Speed: characters per second over all en paragraphs, one call per paragraph, in this process.
Segmenters: sentencex (mt's, `mt.text.segment.Segmenter`) and pysbd (`pip install -e ".[bench]"`);
MiniSBD is not run: it downloads its ONNX models from GitHub at first use (no network here, and
mt downloads nothing at run time).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mt.device import cpu_name
from mt.text.segment import Segmenter
from mt.textio import read_lines

HAND_MADE: dict[str, list[list[str]]] = {
    "zh": [["我今天很忙。", "你呢？", "他说：“我明天再来！”", "然后就走了。"],
           ["价格是3.5元。", "太贵了吧？"], ["这是第一句……", "这是第二句。"]],
    "ja": [["今日は晴れです。", "明日は雨でしょう？", "「行きます！」と彼は言った。"],
           ["価格は3.5ドルです。", "高いですね！"], ["えっと……", "そうですね。"]],
    "ar": [["ذهب الولد إلى المدرسة.", "هل أنت بخير؟", "نعم، أنا بخير!"],
           ["السعر 3.5 دولار.", "هذا غالٍ جداً."]],
    "ru": [["Привет, как дела?", "Я живу в г. Москва.", "Это т.е. пример."],
           ["Цена 3.5 рубля.", "Дорого!"], ["Он сказал: «Я приду».", "И ушёл."]],
    "cs": [["Dobrý den, jak se máte?", "Bydlím v ul. Karlova č. 5.", "To je např. pravda."],
           ["Cena je 3.5 korun.", "To je drahé!"]],
    "en": [["Dr. Smith lives on Elm St. near the U.S. border.", "He is 3.5 m tall!", "Really?"],
           ["The man said \"Wait.\"", "Then he left..."]],
}


def read(mirror: Path, split: str, lang: str) -> list[str]:
    return [line.strip() for line in read_lines(mirror / f"{split}.{lang}.gz")]


def paragraphs(sentences: list[str], count: int, seed: int) -> list[list[str]]:
    """Seeded runs of 3-6 consecutive sentences that end in . ! or ?."""
    ended = [s for s in sentences if s[-1:] in ".!?"]
    rng, out, at = random.Random(seed), [], 0
    while len(out) < count and at < len(ended):
        n = rng.randint(3, 6)
        out.append(ended[at:at + n])
        at += n
    return out


def score(split: Callable[[str], list[str]], cases: list[list[str]]) -> tuple[float, float, float]:
    """(share of cases recovered exactly, boundary recall, boundary precision)."""
    exact = found = real = returned = 0
    for sentences in cases:
        got = [s.strip() for s in split(" ".join(sentences)) if s.strip()]
        exact += got == sentences
        truth = set(_ends(sentences))
        guess = set(_ends(got))
        found, real, returned = found + len(truth & guess), real + len(truth), returned + len(guess)
    return exact / len(cases), found / max(real, 1), found / max(returned, 1)


def _ends(sentences: list[str]) -> list[int]:
    """Character offsets of the internal boundaries (spaces removed, so joiners do not matter)."""
    ends, at = [], 0
    for s in sentences[:-1]:
        at += len(s.replace(" ", ""))
        ends.append(at)
    return ends


def segmenters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    out: dict[str, Callable[[str], list[str]]] = {"sentencex": Segmenter(lang).sentences}
    try:
        import pysbd
        try:
            out["pysbd"] = pysbd.Segmenter(language=lang, clean=False).segment
        except ValueError:  # a language pysbd has no rules for
            out["pysbd"] = lambda text: [text]
    except ImportError:
        print("pysbd not installed (pip install -e '.[bench]'): sentencex only", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mirror", default=os.environ.get("MT_DATA_MIRROR", "../shared/data/multi30k"))
    parser.add_argument("--paragraphs", type=int, default=2000)
    args = parser.parse_args()
    mirror = Path(args.mirror)
    print(f"CPU: {cpu_name()}")
    print("| language | cases | segmenter | paragraphs exact | boundary recall | boundary precision |")
    print("|---|---:|---|---:|---:|---:|")
    speed_text: list[str] = []
    for lang in ("en", "de", "fr"):
        sentences = read(mirror, "test_2016_flickr", lang) + read(mirror, "test_2017_flickr", lang)
        cases = paragraphs(sentences, args.paragraphs, seed=1)
        if lang == "en":
            speed_text = [" ".join(case) for case in cases]
        for name, split in segmenters(lang).items():
            exact, recall, precision = score(split, cases)
            print(f"| {lang} | {len(cases)} | {name} | {exact:.1%} | {recall:.1%} | {precision:.1%} |")
    for lang in ("zh", "ja", "ar", "ru", "cs", "en"):
        for name, split in segmenters(lang).items():
            exact, recall, precision = score(split, HAND_MADE[lang])
            print(f"| {lang} (hand-made) | {len(HAND_MADE[lang])} | {name} | {exact:.0%} | {recall:.0%} | "
                  f"{precision:.0%} |")
    chars = sum(map(len, speed_text))
    print(f"\nspeed over {len(speed_text)} en paragraphs ({chars:,} characters):")
    for name, split in segmenters("en").items():
        split(speed_text[0])  # warm
        start = time.perf_counter()
        for text in speed_text:
            split(text)
        elapsed = time.perf_counter() - start
        print(f"  {name}: {chars / elapsed:,.0f} characters/s ({elapsed * 1e6 / len(speed_text):.0f} us a paragraph)")


if __name__ == "__main__":
    main()
