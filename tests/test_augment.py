"""Training-time augmentation (`mt.data.augment`): each kind of copy on hand-made pairs, the shares,
determinism, and the prepare stage encoding the copies (a 300-pair slice of Multi30k)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from conftest import tiny_config_at
from mt.config import AugmentConfig
from mt.data.augment import PLACEHOLDERS, augment_pairs, noisy, title_case, with_placeholder
from mt.data.prepare import prepare
from mt.data.splits import load_split

PAIR = ("A man in a red shirt is riding a bike.", "Ein Mann in einem roten Hemd fährt Fahrrad.")


def test_each_kind_of_copy() -> None:
    every = AugmentConfig(upper=1.0, title=1.0, placeholder=1.0, noise=1.0, seed=3)
    original, upper, title, placeholder, typo = list(augment_pairs([PAIR], every))
    assert original == PAIR
    assert upper == ("A MAN IN A RED SHIRT IS RIDING A BIKE.", "EIN MANN IN EINEM ROTEN HEMD FÄHRT FAHRRAD.")
    assert title == ("A Man In A Red Shirt Is Riding A Bike.", "Ein Mann In Einem Roten Hemd Fährt Fahrrad.")
    found = [p for p in PLACEHOLDERS if p in placeholder[0]]
    assert len(found) == 1 and placeholder[0].count(found[0]) == placeholder[1].count(found[0]) == 1
    assert placeholder[0].endswith(".") and placeholder[1].endswith(".")  # before the final punctuation
    assert typo[1] == PAIR[1] and typo[0] != PAIR[0] and abs(len(typo[0]) - len(PAIR[0])) <= 1
    assert list(augment_pairs([PAIR], every)) == [original, upper, title, placeholder, typo]  # seeded
    assert list(augment_pairs([PAIR, PAIR], AugmentConfig())) == [PAIR, PAIR]  # all shares 0: untouched


def test_placeholders_are_aligned_by_shared_words_or_position() -> None:
    rng = random.Random(0)
    for _ in range(5):
        src, tgt = (side.rstrip(".").split() for side in with_placeholder(
            "Anna meets Bob in Berlin.", "Anna trifft Bob in Berlin.", "{0}", rng))
        assert tgt[tgt.index("{0}") - 1] == src[src.index("{0}") - 1]  # right after the same shared word
    src, tgt = with_placeholder("one two three four", "eins zwei drei vier fünf sechs sieben acht", "%s",
                                random.Random(1))
    i, j = src.split().index("%s"), tgt.split().index("%s")
    assert j == round(i * 8 / 4)  # after source word i of 4: after target word 2i of 8
    assert with_placeholder("", "", "{0}", rng) == ("{0}", "{0}")
    assert title_case("ein  Haus") == "Ein  Haus" and noisy("a b c", rng) == "a b c"


def test_shares_are_the_probabilities_of_each_copy() -> None:
    pairs = [(f"source {i} words here", f"ziel {i} Wörter hier") for i in range(2000)]
    out = list(augment_pairs(pairs, AugmentConfig(upper=0.1, noise=0.05, seed=1)))
    uppers = sum(s.isupper() for s, _ in out)
    assert 150 < uppers < 250 and 50 < len(out) - 2000 - uppers < 150
    assert [p for p in out if p in pairs] == pairs  # every original, in order


def test_prepare_encodes_the_copies_and_its_cache_knows_the_shares(multi30k_dir: Path, tmp_path: Path) -> None:
    base = tiny_config_at(multi30k_dir, tmp_path / "plain", ["data.train_limit=300", "tokenizer.vocab_size=400"])
    prepare(base)
    plain = len(load_split(base.run_dir, "train").src)
    shares = dataclasses.replace(base, run_root=str(tmp_path / "augmented"),
                                 augment=AugmentConfig(upper=0.2, placeholder=0.2, seed=1))
    prepare(shares)
    augmented = load_split(shares.run_dir, "train")
    assert plain + 80 < len(augmented.src) < plain + 160  # ~0.4 copies a pair
    assert (shares.run_dir / "spm.model").read_bytes() == (base.run_dir / "spm.model").read_bytes()  # same tokenizer
