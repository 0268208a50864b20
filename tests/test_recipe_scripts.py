"""`mt train --data` in every script (issue 61): the recipe reads each side as its script requires
(mt/train/recipe_vocab.py) and whatever it writes, the tokenizer training and `mt train` accept.

The corpora are synthetic (tests/support/scriptdata.py), ten scripts; the Han one holds over a
thousand distinct characters in 400 pairs, where the old rule (pieces = half the distinct
"words" split at spaces) chose a vocabulary sentencepiece refused.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml
from test_evaluate import run_cli

from mt.config import TokenizerConfig
from mt.data.survey import CorpusSurvey, survey
from mt.data.tokenizer import train_sentencepiece
from mt.errors import MTError
from mt.eval.bleu import is_available
from mt.train import recipe_run, recipe_vocab
from mt.train.recipe import Machine, choose
from mt.train.recipe_vocab import BYTE_PIECES, chars_kept
from tests.support.scriptdata import SCRIPTS, corpus

CPU = Machine("cpu", "test CPU", 110.0, "fp32")
UNSPACED_OR_LARGE = {"Han": 0.9995, "Kana": 0.9995, "Hangul": 0.9995}


def tokenizer_config(chosen: dict) -> TokenizerConfig:
    return TokenizerConfig(**{k: v for k, v in chosen["tokenizer"].items() if k != "type"})


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_sentencepiece_accepts_what_the_recipe_chose(script: str) -> None:
    pairs = corpus(script, 400)
    found = survey(pairs)
    assert found.tgt_script == script, found.describe()
    chosen = choose(found, 600, CPU).config
    cfg = tokenizer_config(chosen)
    assert cfg.joint == (script == "Latin")  # English-like source: one script only with Latin
    assert cfg.character_coverage == UNSPACED_OR_LARGE.get(script, 1.0)
    assert cfg.normalization == ("cjk_width" if script in UNSPACED_OR_LARGE else "identity")
    kept = chars_kept(found.tgt_char_counts, cfg.character_coverage)
    assert cfg.vocab_size >= kept + BYTE_PIECES + 4, (cfg.vocab_size, kept)
    tok = train_sentencepiece([s for s, _ in pairs], [t for _, t in pairs], cfg)  # refused before: MTError
    # hard_vocab_limit false: at most the chosen size (a corpus this small may hold fewer pieces)
    assert kept + BYTE_PIECES < tok.tgt_vocab_size <= cfg.vocab_size
    if not cfg.joint:
        assert tok.src_vocab_size <= cfg.src_vocab_size and cfg.src_character_coverage == 1.0


def test_the_han_corpus_is_one_the_old_rule_failed_on() -> None:
    """The guard of the test above: a vocabulary sized from space-split words is refused on it."""
    pairs = corpus("Han", 400)
    found = survey(pairs)
    assert len(found.tgt_char_counts) + BYTE_PIECES > 1000  # the old rule's 1,000 pieces: fewer than it needs
    with pytest.raises(MTError, match=r"tokenizer.vocab_size: 1000 is too small for this corpus \(target sample\)"):
        train_sentencepiece([s for s, _ in pairs], [t for _, t in pairs],
                            TokenizerConfig(vocab_size=1000, joint=False, character_coverage=0.9995))


def test_a_corpus_of_rare_characters_gets_bytes_and_a_reason_not_an_error(monkeypatch) -> None:
    """More distinct characters than a sensible vocabulary (MAX_CHAR_PIECES, made 1,000 here so the
    corpus stays small): coverage lowered so that that many characters get a piece, the rest spelled
    in bytes; sentencepiece accepts it and a character it never kept comes back as itself."""
    monkeypatch.setattr(recipe_vocab, "MAX_CHAR_PIECES", 1000)
    rng = random.Random(3)
    chars = [chr(0x4E00 + i) for i in range(20_000)]
    names = ["".join(rng.choice(chars[:300]) if rng.random() < 0.985 else rng.choice(chars) for _ in range(4))
             for _ in range(20_000)]
    pairs = [(f"name {i}.", names[i] + "。") for i in range(20_000)]
    found = survey(pairs)
    assert chars_kept(found.tgt_char_counts, 0.9995) > 1000
    r = choose(found, 600, CPU)
    cfg = tokenizer_config(r.config)
    assert 0.98 <= cfg.character_coverage < 0.9995 and cfg.byte_fallback
    assert chars_kept(found.tgt_char_counts, cfg.character_coverage) <= 1000
    assert "spelled in UTF-8 byte pieces" in r.reasons["tokenizer.character_coverage"]
    tok = train_sentencepiece([s for s, _ in pairs], [t for _, t in pairs], cfg)
    rare = next(c for c, k in reversed(found.tgt_char_counts) if k == 1)
    assert tok.decode_tgt(tok.encode_tgt([f"{rare}{names[0]}"])) == [f"{rare}{names[0]}"]


def test_chinese_and_japanese_share_one_vocabulary_and_reasons_name_characters() -> None:
    zh = [t for _, t in corpus("Han", 300)]
    ja = [t for _, t in corpus("Kana", 300)]
    r = choose(survey(zip(zh, ja)), 600, CPU)
    assert r.config["tokenizer"]["joint"] is True and "Han characters shared" in r.reasons["tokenizer.joint"]
    assert "distinct characters and frequent character pairs" in r.reasons["tokenizer.vocab_size"]


def test_survey_reads_unspaced_text_in_characters() -> None:
    found = survey([("a b c", "我们喜欢音乐。"), ("a b", "我们喜欢音乐。")] * 3)
    assert (found.tgt_words, found.src_words) == (42, 15)
    # 7 characters; bigrams seen >= 5 times: 我们 们喜 喜欢 欢音 音乐 乐。 -> 13 units
    assert found.tgt_types == 13 and dict(found.tgt_char_counts)["\u2581"] == 6
    hand_made = CorpusSurvey(10, 10, 10, 5, 5, "Latin", "Latin", 0)  # no character counts: no floor
    assert choose(hand_made, 600, CPU).config["tokenizer"]["vocab_size"] == 1000


def _write_splits(root: Path, pairs: list[tuple[str, str]]) -> None:
    root.mkdir(parents=True)
    for name, part in (("train", pairs[:300]), ("val", pairs[300:320]), ("test", pairs[320:340])):
        (root / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in part), encoding="utf-8")


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_mt_train_data_prepares_trains_and_evaluates_in_every_script(script, tmp_path, monkeypatch, capsys):
    lang = SCRIPTS[script][0]
    _write_splits(tmp_path / "corpus", corpus(script, 340))
    monkeypatch.setattr(recipe_run, "measure_machine", lambda threads, precision: CPU)
    code, out, err = run_cli(monkeypatch, capsys, "train", "--data", tmp_path / "corpus", "--src-lang", "en",
                             "--tgt-lang", lang, "--budget", "10m", "--set", f"run_root={tmp_path / 'runs'}",
                             "--set", "train.max_updates=3", "--set", "train.threads=1", "--set", "train.fit_alpha=false",
                             "--set", "train.precision=fp32", "--set", "train.average_last=0")
    assert code == 0, err
    run = tmp_path / "runs" / f"corpus_en_{lang}"
    chosen = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8"))
    assert "vocab_size" in chosen["tokenizer"] and not re.search(r"tokenizer\.\w+ = .*set by --set", out)
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", run / "checkpoints" / "best.pt", "--split", "test",
                             "--beam", "2")
    assert code == 0, err
    report = json.loads(next((run / "eval").glob("*test*.json")).read_text(encoding="utf-8"))
    tok = {"zh": "zh", "ja": "ja-mecab", "th": "char", "ko": "ko-mecab"}.get(lang, "13a")
    sig = report["bleu_signature"]  # ja-mecab signs as tok:ja-mecab-0.996-IPA; without the extra: char
    assert f"|tok:{tok}" in sig or (tok.endswith("mecab") and not is_available(tok) and "|tok:char|" in sig), sig
    assert "chrf" in report and report["sentences"] == 20
