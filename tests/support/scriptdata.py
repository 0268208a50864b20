"""Synthetic parallel corpora in ten scripts, for the recipe's tests (deterministic, no network).

`corpus(script, n, seed)` gives `n` (English-like, script) pairs: a lexicon of random Latin
"English" words, each mapped to a random word of the target script, and sentences of 4-9 words
translated word by word (so a model can learn them). Scripts written without spaces (Han, Kana,
Thai) join their words without one, and end sentences with their own full stop (。 or none).
The Han lexicon draws its characters from `HAN_CHARS` distinct ideographs with Zipf-like
frequencies, so a few hundred pairs hold well over a thousand distinct characters: the corpus
on which the recipe once chose fewer pieces than its own tokenizer training required (issue 61).
"""

from __future__ import annotations

import random

HAN_CHARS = 3000
# script -> (language code, letters to draw from, word length range, written without spaces, full stop)
SCRIPTS: dict[str, tuple[str, str, tuple[int, int], bool, str]] = {
    "Latin": ("de", "abcdefghijklmnopqrstuvwxyzäöüß", (2, 8), False, "."),
    "Cyrillic": ("ru", "".join(map(chr, range(0x430, 0x450))), (2, 8), False, "."),
    "Greek": ("el", "".join(map(chr, range(0x3B1, 0x3CA))), (2, 8), False, "."),
    "Arabic": ("ar", "".join(map(chr, range(0x627, 0x64B))), (2, 7), False, "."),
    "Hebrew": ("he", "".join(map(chr, range(0x5D0, 0x5EB))), (2, 6), False, "."),
    "Devanagari": ("hi", "".join(map(chr, [*range(0x915, 0x93A), *range(0x93E, 0x94D)])), (2, 6), False, "।"),
    "Thai": ("th", "".join(map(chr, [*range(0xE01, 0xE2F), *range(0xE30, 0xE3A)])), (2, 6), True, ""),
    "Han": ("zh", "".join(map(chr, range(0x4E00, 0x4E00 + HAN_CHARS))), (1, 3), True, "。"),
    "Kana": ("ja", "".join(map(chr, [*range(0x3041, 0x3097), *range(0x30A1, 0x30FB)])), (2, 5), True, "。"),
    "Hangul": ("ko", "".join(map(chr, range(0xAC00, 0xAC00 + 1500))), (1, 4), False, "."),
}
_LATIN = "abcdefghijklmnopqrstuvwxyz"


def _word(rng: random.Random, letters: str, lengths: tuple[int, int], zipf: bool) -> str:
    n = rng.randint(*lengths)
    if zipf:  # a few characters common, most rare (Han)
        return "".join(letters[min(len(letters) - 1, int(rng.paretovariate(0.7)) - 1 + rng.randrange(40))]
                       if rng.random() < 0.5 else rng.choice(letters) for _ in range(n))
    return "".join(rng.choice(letters) for _ in range(n))


def corpus(script: str, n: int, seed: int = 0, lexicon: int = 1500) -> list[tuple[str, str]]:
    """`n` (source, target) pairs: English-like source, `script` target, word for word."""
    _, letters, lengths, unspaced, stop = SCRIPTS[script]
    rng = random.Random(f"{script}-{seed}")
    words = [(_word(rng, _LATIN, (2, 9), False), _word(rng, letters, lengths, script == "Han"))
             for _ in range(lexicon)]
    out = []
    for _ in range(n):
        chosen = [words[rng.randrange(lexicon) if rng.random() < 0.5 else int(rng.paretovariate(0.8)) % 60]
                  for _ in range(rng.randint(4, 9))]  # half common words, half from the whole lexicon
        src = " ".join(s for s, _ in chosen).capitalize() + "."
        tgt = ("" if unspaced else " ").join(t for _, t in chosen) + stop
        out.append((src, tgt))
    return out
