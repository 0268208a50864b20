"""The cleaning stage's rules (mt.data.clean_rules, mt.data.clean, mt.data.langid): each finds the
noise it is for and keeps clean pairs in Latin, CJK, Arabic and Cyrillic scripts; duplicates by
hashes; the stop at clean.max_drop; `mt data clean` on every text format, with its report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mt.config import CleanConfig
from mt.data import clean_rules
from mt.data.clean import Cleaner, CleanStats, HashSet64, check_share, clean_pairs
from mt.data.clean_corpus import clean_corpus
from mt.data.corpus import iter_split
from mt.errors import MTError
from tests.support.langdata import LANGS, pairs
from tests.support.scaling import assert_linear

pytestmark = pytest.mark.requires("py3langid")
ON = CleanConfig(enabled=True)
RULES_ONLY = replace(ON, rules=tuple(r for r in ON.rules if r != "langid"))  # no model load: fast
EN_DE = [("A man in a blue shirt is standing on a ladder.", "Ein Mann in einem blauen Hemd steht auf einer Leiter."),
         ("Two dogs play in the snow at 10 o'clock.", "Zwei Hunde spielen um 10 Uhr im Schnee."),
         ("A girl reads a book on a bench.", "Ein Mädchen liest ein Buch auf einer Bank.")]


@pytest.fixture(scope="module")
def cleaner() -> Cleaner:
    return Cleaner(ON, "en", "de")


def check(cfg: CleanConfig, src: str, tgt: str, tgt_lang: str = "de") -> str | None:
    drop = Cleaner(cfg, "en", tgt_lang).check(src, tgt)
    return None if drop is None else drop[0]


@pytest.mark.parametrize("lang", LANGS)
def test_clean_pairs_of_every_script_are_kept(lang: str) -> None:
    corpus = list(dict.fromkeys(pairs(lang, 120, seed=3)))
    cleaner = Cleaner(ON, "en", lang)
    dropped = [(s, t, cleaner.check(s, t)) for s, t in corpus if cleaner.check(s, t)]
    assert not dropped, dropped[:3]


@pytest.mark.parametrize(("src", "tgt", "rule"), [
    ("Hello there.", "   ", "no_text"),
    ("A dog runs.", "<p>...</p> &amp; !!", "no_text"),
    ("A man.", "Ein Mann steht mit seinem Hund und seiner Katze vor einem großen roten Haus.", "length"),
    ("A man in a blue shirt.", "A man in a blue shirt.", "copy"),
    ("A man in a blue shirt.", "a man in a blue shirt!", "copy"),
    ("A man in a blue shirt is standing on a ladder.", "Ein man in a blue shirt is standing on a Leiter.", "copy"),
    ("A man on a ladder.", "Мужчина стоит на лестнице.", "script"),
    ("A man on a ladder.", "梯子の上の男性です。", "script"),
    ("Call 555 1234 today.", "Rufen Sie heute an.", "numbers"),
    ("See www.example.com for more.", "Mehr dazu auf der Webseite.", "numbers"),
    ("Write to me at a@b.org please.", "Schreiben Sie mir bitte.", "numbers"),
    ("A man in a blue shirt is standing on a ladder.", "Un homme en chemise bleue se tient sur une échelle.", "langid"),
])
def test_each_rule_finds_its_noise(src: str, tgt: str, rule: str) -> None:
    assert check(ON, src, tgt) == rule
    assert check(replace(ON, rules=tuple(r for r in ON.rules if r != rule)), src, tgt) != rule


def test_clean_german_pairs_pass_every_rule(cleaner: Cleaner) -> None:
    assert [cleaner.check(s, t) for s, t in EN_DE] == [None, None, None]


def test_target_script_follows_the_language() -> None:
    """An Arabic, Chinese or Russian target must be in its script; a German one in Latin."""
    assert check(ON, "The cat drinks tea.", "القطة تشرب الشاي.", "ar") is None
    assert check(ON, "The cat drinks tea.", "The cat drinks tea now.", "ar") in ("script", "copy")
    assert check(RULES_ONLY, "The cat drinks tea.", "Die Katze trinkt Tee.", "zh") == "script"
    assert check(RULES_ONLY, "The cat drinks tea.", "Кошка пьёт чай.", "ru") is None
    assert clean_rules.scripts_of("pt-BR") == ("Latin",) and clean_rules.scripts_of("xx") == ()


def test_numbers_compare_by_value_across_digit_systems() -> None:
    assert clean_rules.numbers("Room 12.", "Zimmer １２.") is None
    assert clean_rules.numbers("Room 12.", "غرفة ١٢.") is None
    assert clean_rules.numbers("Room 12.", "Zimmer 13.") is not None
    assert clean_rules.numbers("2 dogs.", "zwei Hunde.") is None  # single digits are often words


def test_duplicates_exact_and_folded(cleaner: Cleaner) -> None:
    corpus = [*EN_DE, EN_DE[0], (EN_DE[1][0].upper(), EN_DE[1][1] + " "), ("  " + EN_DE[2][0], EN_DE[2][1])]
    stats = CleanStats()
    kept = list(clean_pairs(corpus, Cleaner(RULES_ONLY, "en", "de"), stats))
    assert kept == EN_DE
    assert stats.dropped == {"duplicate": 2, "near_duplicate": 1} and stats.read == 6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=300))
def test_hash_set_is_a_set(values: list[int]) -> None:
    table, seen = HashSet64(capacity=8), set()
    for v in values:
        assert table.add(v) == ((v or 1) not in seen)
        seen.add(v or 1)
    assert len(table) == len(seen)


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=60), st.text(max_size=60))
def test_rules_never_fail_and_copies_of_text_always_go(src: str, tgt: str) -> None:
    """Any text: a verdict, never an exception; a side copied over (text with letters) is dropped."""
    cleaner = Cleaner(RULES_ONLY, "en", "de")
    cleaner.check(src.strip(), tgt.strip())
    if clean_rules.no_text(src, src) is None:
        assert Cleaner(RULES_ONLY, "en", "de").check(src.strip(), src.strip()) is not None


def test_examples_are_seeded_and_bounded() -> None:
    def run() -> CleanStats:
        stats = CleanStats(samples=3, seed=5)
        list(clean_pairs([("Same line here.", "Same line here.")] * 50, Cleaner(RULES_ONLY, "en", "de"), stats))
        return stats
    a, b = run(), run()
    assert a.dropped == {"copy": 50} and len(a.examples["copy"]) == 3
    assert a.to_dict() == b.to_dict()


def write_corpus(root: Path, fmt: str, rows: list[tuple[str, str]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if fmt == "text":
        (root / "train.en").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
        (root / "train.de").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    elif fmt == "tsv":
        (root / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    else:
        (root / "train.jsonl").write_text("".join(json.dumps({"src": s, "tgt": t}) + "\n" for s, t in rows),
                                          encoding="utf-8")
    return root


NOISY = [*EN_DE, ("A man in a blue shirt.", "A man in a blue shirt."), EN_DE[0],
         ("Three boys play football in a park.", "Trois garçons jouent au football dans un parc.")]


@pytest.mark.parametrize("fmt", ["text", "tsv", "jsonl"])
def test_clean_corpus_in_every_format(tmp_path: Path, fmt: str) -> None:
    from mt.config import DataConfig

    data = DataConfig(path=str(write_corpus(tmp_path / "in", fmt, NOISY)), format=fmt)  # type: ignore[arg-type]
    stats = clean_corpus(data, "train", ON, tmp_path / "out", dropped_file=True)
    assert stats.dropped == {"copy": 1, "duplicate": 1, "langid": 1}
    out = DataConfig(path=str(tmp_path / "out"))
    assert list(iter_split(out, "train")) == EN_DE
    report = json.loads((tmp_path / "out" / "clean_report.json").read_text())
    assert report["kept"] == 3 and report["examples"]["langid"][0]["line"] == 6
    dropped = [json.loads(line) for line in (tmp_path / "out" / "clean_dropped.jsonl").read_text().splitlines()]
    assert [(d["line"], d["rule"]) for d in dropped] == [(4, "copy"), (5, "duplicate"), (6, "langid")]


def test_a_corpus_that_would_lose_most_of_its_pairs_stops(tmp_path: Path) -> None:
    """Cleaning a German-English corpus as en-de: langid drops nearly everything; one line names it."""
    from mt.config import DataConfig

    swapped = [(t, s) for s, t in EN_DE]
    data = DataConfig(path=str(write_corpus(tmp_path / "in", "text", swapped)))
    with pytest.raises(MTError, match=r"would drop 100.0% of 3 pairs.*rule 'langid'.*clean.max_drop") as err:
        clean_corpus(data, "train", ON, tmp_path / "out", dropped_file=False)
    assert "\n" not in str(err.value) and not (tmp_path / "out" / "train.en").exists()
    stats = clean_corpus(data, "train", replace(ON, max_drop=1.0), tmp_path / "out", dropped_file=False)
    assert stats.kept == 0


def test_languages_langid_does_not_cover_are_noted() -> None:
    cleaner = Cleaner(ON, "en", "tlh")
    assert any("does not cover 'tlh'" in note for note in cleaner.notes)
    assert any("no script known for 'tlh'" in note for note in cleaner.notes)
    assert cleaner.check("A man on a ladder.", "tlhIngan Hol Dajatlh'a'?") is None


def test_mt_data_clean_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mt.cli import app

    root = write_corpus(tmp_path / "in", "text", NOISY)
    result = CliRunner().invoke(app, ["data", "clean", str(root), "-o", str(tmp_path / "out"),
                                      "--set", "clean.rules=[copy]", "--dropped-file"])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "out" / "train.de").read_text().splitlines()) == 5
    bad = CliRunner().invoke(app, ["data", "clean", str(root), "-o", str(tmp_path / "o2"), "--set", "clean.rules=[nope]"])
    assert bad.exit_code != 0


def test_noise_generator_labels_what_it_did_and_scoring_counts_it(tmp_path: Path) -> None:
    """scripts/experiments/make_noise.py: each kind in its share, on disjoint pairs, labelled; `score` turns a
    dropped file into per-rule precision and per-kind recall."""

    from scripts.experiments.make_noise import KINDS, corrupt, score
    en = [f"English caption number {i} about a dog." for i in range(400)]
    de = [f"Deutsche Bildunterschrift {i} über einen Hund." for i in range(400)]
    fr = [f"Légende française {i} sur un chien." for i in range(400)]
    src, tgt, labels = corrupt(en, de, fr, KINDS, seed=3)
    assert src == corrupt(en, de, fr, KINDS, seed=3)[0]
    for kind, share in KINDS.items():
        assert abs(labels.count(kind) - round(share * 400)) <= (2 if kind == "duplicate" else 0)
    for i, label in enumerate(labels):
        expected = {"clean": tgt[i] == de[i], "copy": tgt[i] == src[i], "wrong_lang": tgt[i] == fr[i],
                    "misaligned": tgt[i] in de and tgt[i] != de[i], "fragment": de[i].startswith(tgt[i]) and tgt[i] != de[i],
                    "duplicate": any(clean_rules.normalise(src[i]) == clean_rules.normalise(src[j]) for j in range(i))}
        assert expected[label], (i, label, src[i], tgt[i])
    (tmp_path / "labels").write_text("".join(x + "\n" for x in labels), encoding="utf-8")
    copies = [i for i, x in enumerate(labels) if x == "copy"]
    rows = [{"line": i + 1, "rule": "copy"} for i in copies] + [{"line": labels.index("clean") + 1, "rule": "copy"}]
    (tmp_path / "dropped").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = score(tmp_path / "labels", tmp_path / "dropped")
    assert result["rules"]["copy"]["precision"] == round(len(copies) / (len(copies) + 1), 4)
    assert result["kinds"]["copy"]["recall"] == 1.0 and result["kinds"]["misaligned"]["recall"] == 0.0


def test_workers_give_the_same_result(tmp_path: Path) -> None:
    """Per-pair rules and language ID in 2 processes (chunks of 2): same kept pairs, drops, examples."""
    import mt.data.clean as clean

    corpus = [*NOISY, *NOISY, ("", "x"), *pairs("ar", 5, seed=1)] * 2
    results = []
    for workers in (1, 2):
        stats = CleanStats(samples=2)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(clean, "CHUNK", 2)
            kept = list(clean_pairs(corpus, Cleaner(ON, "en", "de"), stats, workers=workers))
        results.append((kept, stats.to_dict()))
    assert results[0] == results[1] and results[0][1]["dropped"]["duplicate"] > 0


def test_keep_below_what_max_drop_allows_is_refused_before_any_pass(tmp_path: Path) -> None:
    """Issue 45, item 6: --keep 0.3 with clean.max_drop 0.5 can only fail; it used to fail after the
    rules pass and the whole scoring pass (and then deleted the scored rows)."""
    from mt.config import DataConfig

    data = DataConfig(path=str(write_corpus(tmp_path / "in", "text", EN_DE)))
    scored: list[int] = []

    def scorer(sources, targets):
        scored.append(len(sources))
        return np.zeros(len(sources))

    with pytest.raises(MTError, match=r"--keep 0.3: drops 70.0% .* clean.max_drop=0.5"):
        clean_corpus(data, "train", ON, tmp_path / "out", dropped_file=False, scorer=scorer, keep=0.3)
    assert scored == [] and not (tmp_path / "out").exists()
    clean_corpus(data, "train", replace(ON, max_drop=0.7), tmp_path / "out", dropped_file=False, scorer=scorer,
                 keep=0.3)
    assert scored == [3]


def test_digit_runs_longer_than_int_reads_are_numbers_like_any_other() -> None:
    """Issue 45, item 6: int() refuses more than 4,300 digits (ValueError in `mt prepare` and `mt data
    clean`); digits are read one by one now, in linear time, in any digit system."""
    run = "7" * 50_000
    assert clean_rules.numbers(f"code {run}", f"Code {run}") is None
    assert clean_rules.numbers(f"code {run}", "Code") == "number on one side only: 77777777777777777777... (50000 digits)"
    assert clean_rules.numbers("0" * 5000 + "12", "１２") is None  # leading zeros, full-width digits
    # beside a URL: the e-mail pattern was scanned from every digit (n squared: 1.5 s at 19,000 digits)
    assert clean_rules.numbers("see me@example.org", "٣" * 100_000 + " me@example.org").startswith("number")
    assert_linear(lambda n: clean_rules.numbers("see me@example.org", "٣" * n + " me@example.org"), 5_000,
                  what="numbers() on a digit run beside an e-mail address")


def test_max_drop_message_without_examples() -> None:
    """Issue 45, item 6: with clean.samples: 0 no example is kept, and the message indexed one."""
    stats = CleanStats(samples=0)
    for line in range(1, 5):
        stats.record(line, "a", "a", ("copy", "same text"))
    with pytest.raises(MTError, match=r"would drop 100.0% of 4 pairs.*rule 'copy' drops 100.0%; check"):
        check_share(stats, 0.5, "test")
