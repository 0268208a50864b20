"""mt.eval.bleu: the sacreBLEU tokenizer follows the target language; overrides; the mecab fallback."""

from __future__ import annotations

import math

import pytest
from sacrebleu.metrics import BLEU

from mt.errors import MTError, MTWarning
from mt.eval import bleu
from mt.eval.bleu import bleu_tokenizer_for, language_code
from mt.eval.evaluate import score


@pytest.fixture
def no_mecab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bleu, "is_available", lambda name: name not in ("ja-mecab", "ko-mecab"))
    monkeypatch.setattr(bleu, "_warned", set())


@pytest.fixture
def with_mecab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bleu, "is_available", lambda name: True)


def test_language_code() -> None:
    assert [language_code(x) for x in ("zh", "zh-CN", "zh_Hant", "zho_Hans", " JA ", "de")] == \
        ["zh", "zh", "zh", "zho", "ja", "de"]


def test_automatic_choice_by_language(with_mecab: None) -> None:
    got = {lang: bleu_tokenizer_for(lang) for lang in
           ("de", "en", "ru", "ar", "zh", "zh-TW", "zho_Hans", "yue", "ja", "jpn_Jpan", "ko", "th", "km")}
    assert got == {"de": "13a", "en": "13a", "ru": "13a", "ar": "13a", "zh": "zh", "zh-TW": "zh", "zho_Hans": "zh",
                   "yue": "zh", "ja": "ja-mecab", "jpn_Jpan": "ja-mecab", "ko": "ko-mecab", "th": "char", "km": "char"}


def test_missing_mecab_falls_back_to_char_with_one_message(no_mecab: None) -> None:
    with pytest.warns(MTWarning) as caught:
        assert bleu_tokenizer_for("ja") == "char" and bleu_tokenizer_for("ja") == "char"
        assert bleu_tokenizer_for("ko") == "char"
    err = [str(w.message) for w in caught]
    assert len(err) == 2  # once per tokenizer, however often asked
    assert "'ja-mecab'" in err[0] and "pip install -e '.[ja]'" in err[0] and "mecab-python3, ipadic" in err[0]
    assert "pip install -e '.[ko]'" in err[1]
    assert bleu_tokenizer_for("zh") == "zh"  # built in: no extra needed


def test_override(no_mecab: None) -> None:
    assert bleu_tokenizer_for("zh", "13a") == "13a"
    assert bleu_tokenizer_for("de", "char") == "char"
    assert bleu_tokenizer_for("de", "flores200") == "flores200"
    with pytest.raises(MTError, match=r"BLEU tokenizer 'ja-mecab': .*pip install -e '\.\[ja\]'"):
        bleu_tokenizer_for("ja", "ja-mecab")  # asked for explicitly: refused, not replaced
    with pytest.raises(MTError, match="BLEU tokenizer '13b': unknown; sacreBLEU has .*13a"):
        bleu_tokenizer_for("de", "13b")


def test_real_availability_matches_sacrebleu() -> None:
    """is_available agrees with whether sacreBLEU can build the tokenizer in this environment."""
    for name in ("13a", "zh", "char", "ja-mecab", "ko-mecab"):
        try:
            BLEU(tokenize=name)
            buildable = True
        except (RuntimeError, ImportError, AssertionError):
            buildable = False
        assert bleu.is_available(name) == buildable, name


def test_zh_scores_characters_13a_does_not() -> None:
    """Why it matters: one wrong character costs a whole 'word' under 13a. Through mt's own path
    (the tokenizer `bleu_tokenizer_for` picks for the target language, then `score`):
    a zh target is scored on characters: 我 今 天 在 家 喝 茶 。 against 我 今 天 在 家 喝 水 。
    matches 7/8 unigrams, 5/7 bigrams, 4/6 trigrams, 3/5 4-grams, equal lengths (no brevity
    penalty): BLEU = 100 (7/8 * 5/7 * 4/6 * 3/5)^(1/4) = 100 (1/4)^(1/4) = 100 / sqrt(2).
    13a (what a de target gets) sees one 'word' per sentence, and it differs: 0."""
    hyp, ref = ["我今天在家喝茶。"], ["我今天在家喝水。"]
    zh = score(hyp, ref, tokenize=bleu_tokenizer_for("zh-CN"))
    assert zh.bleu_tokenize == "zh" and "tok:zh" in zh.bleu_signature
    assert zh.bleu == pytest.approx(100 / math.sqrt(2), abs=1e-9)
    de = score(hyp, ref, tokenize=bleu_tokenizer_for("de"))
    assert de.bleu_tokenize == "13a" and de.bleu == 0.0
