"""Training-time augmentation: copies of a small share of the training pairs in the forms people
send and a corpus rarely holds, so that a model learns to translate them (as Mozilla's translations
pipeline does with OpusTrainer's modifiers).

`augment_pairs` runs in the prepare stage (mt/data/prepare.py) on each pair's training split as it
is read for encoding, after cleaning and after the tokenizer is trained (the tokenizer learns from
the corpus as it is; upper-case text costs more pieces, as it does at translation time). Every
original pair is kept; after it come, each with its own probability (`AugmentConfig`, a share of
the training pairs):

- `upper`: both sides in upper case (`A MAN IS RIDING A BIKE.` / `EIN MANN FÄHRT FAHRRAD.`);
- `title`: both sides with every word's first letter in upper case (headlines, buttons);
- `placeholder`: one placeholder of a common format (`PLACEHOLDERS`: printf, ICU/Python/.NET,
  templates, URLs, handles, numbers) inserted on both sides at aligned positions, verbatim. The
  alignment is positional: after source word i of n, after target word round(i * m / n) of m, and
  before a sentence's final punctuation on both sides; a word both sides share as it is (a name, a
  number) anchors it exactly instead. Good enough for a model to learn to copy the span through;
- `noise`: light noise on the source side only (one character of one word of four letters or more
  dropped, doubled or swapped with its neighbour), the target untouched: typos in, clean text out.

Each pair's draws come from its own generator seeded by (seed, line number), so the copies are the
same whatever the chunking of the stream, and a rerun of prepare writes the same cache.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator

from mt.config import AugmentConfig

# Formats a placeholder takes in software strings; each copy draws one and fills in its name/number.
PLACEHOLDERS = ("{0}", "{1}", "{name}", "{count}", "%s", "%d", "%1$s", "%(name)s", "{{ user }}", "${driver}",
                ":name", "<user>", "%{count}", "https://example.org/page", "user@example.com", "@mastodon",
                "#weekend", "`make test`", "42", "3.14")
_FINAL = re.compile(r"^(.*?)(\s*[.!?:;]+)$", re.S)


def augmented(src: str, tgt: str, config: AugmentConfig, rng: random.Random) -> list[tuple[str, str]]:
    """The augmented copies of one pair (possibly none), in a fixed order: upper, title, placeholder,
    noise."""
    out = []
    if rng.random() < config.upper:
        out.append((src.upper(), tgt.upper()))
    if rng.random() < config.title:
        out.append((title_case(src), title_case(tgt)))
    if rng.random() < config.placeholder:
        out.append(with_placeholder(src, tgt, rng.choice(PLACEHOLDERS), rng))
    if rng.random() < config.noise:
        out.append((noisy(src, rng), tgt))
    return out


def augment_pairs(pairs: Iterable[tuple[str, str]], config: AugmentConfig) -> Iterator[tuple[str, str]]:
    """Every pair, each followed by its augmented copies (`augmented`); the pairs unchanged when
    every share is 0."""
    if not config.enabled:
        yield from pairs
        return
    for i, (src, tgt) in enumerate(pairs):
        yield src, tgt
        yield from augmented(src, tgt, config, random.Random(f"{config.seed}:{i}"))


def title_case(text: str) -> str:
    """Every space-separated word with its first letter in upper case, the rest as it was."""
    return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))


def _split_final(text: str) -> tuple[str, str]:
    """(text, its final punctuation with the space before it) — ('', '') parts where there is none."""
    found = _FINAL.match(text)
    return (found.group(1), found.group(2)) if found else (text, "")


def with_placeholder(src: str, tgt: str, placeholder: str, rng: random.Random) -> tuple[str, str]:
    """`placeholder` inserted once into each side at aligned positions (module docstring)."""
    src_body, src_end = _split_final(src)
    tgt_body, tgt_end = _split_final(tgt)
    src_words, tgt_words = src_body.split(), tgt_body.split()
    if not src_words or not tgt_words:
        return f"{src_body} {placeholder}".strip() + src_end, f"{tgt_body} {placeholder}".strip() + tgt_end
    shared = [w for w in src_words if w in tgt_words and len(w) > 1]
    if shared:  # a name or number both sides hold: the placeholder goes right after it
        word = rng.choice(shared)
        i, j = src_words.index(word) + 1, tgt_words.index(word) + 1
    else:
        i = rng.randint(0, len(src_words))
        j = round(i * len(tgt_words) / len(src_words))
    src_words.insert(i, placeholder)
    tgt_words.insert(j, placeholder)
    return " ".join(src_words) + src_end, " ".join(tgt_words) + tgt_end


def noisy(text: str, rng: random.Random) -> str:
    """One typo in one word of at least four letters: a letter dropped, doubled or swapped with
    the next; the text as it is when it has no such word."""
    words = text.split(" ")
    long = [k for k, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not long:
        return text
    k = rng.choice(long)
    word, at = words[k], rng.randrange(1, len(words[k]) - 1)  # never the first letter (names, capitals)
    kind = rng.randrange(3)
    if kind == 0:
        word = word[:at] + word[at + 1:]
    elif kind == 1:
        word = word[:at] + word[at] + word[at:]
    else:
        word = word[:at] + word[at + 1] + word[at] + word[at + 2:]
    words[k] = word
    return " ".join(words)
