"""The text checks of the cleaning stage (mt.data.clean): one function per rule, over one raw pair.

Each check answers why a pair is dropped (a short detail string) or None to keep it, in plain
Python over regular expressions (C speed); nothing here keeps state across pairs (duplicates and
language identification do, in mt.data.clean and mt.data.langid). Lengths are characters and
words here: the stage runs on raw text, before any tokenizer exists (prepare's limits in subword
pieces, data.max_len and data.max_len_ratio, still apply after encoding).

Scripts: `LANGUAGE_SCRIPTS` maps a language code to the Unicode scripts its text is written in
(de -> Latin, ja -> Han + Kana, ar -> Arabic ...); a language it does not list is not checked (the
report notes it). A side passes when at least `min_share` of its letters are in those scripts, so
a German line with a Greek letter or a Japanese line with a brand name in Latin passes.
"""

from __future__ import annotations

import re
import unicodedata

# Unicode blocks per script (letters and the marks written with them).
SCRIPT_RANGES = {
    "Latin": "A-Za-z\u00aa\u00ba\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0250-\u02af\u1e00-\u1eff"
             "\u2c60-\u2c7f\ua720-\ua7ff\uff21-\uff3a\uff41-\uff5a",
    "Greek": "\u0370-\u03ff\u1f00-\u1fff",
    "Cyrillic": "\u0400-\u052f\u1c80-\u1c8f\u2de0-\u2dff\ua640-\ua69f",
    "Armenian": "\u0530-\u058f",
    "Hebrew": "\u0590-\u05ff\ufb1d-\ufb4f",
    "Arabic": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "Devanagari": "\u0900-\u097f\ua8e0-\ua8ff",
    "Bengali": "\u0980-\u09ff",
    "Gurmukhi": "\u0a00-\u0a7f",
    "Gujarati": "\u0a80-\u0aff",
    "Tamil": "\u0b80-\u0bff",
    "Telugu": "\u0c00-\u0c7f",
    "Kannada": "\u0c80-\u0cff",
    "Malayalam": "\u0d00-\u0d7f",
    "Sinhala": "\u0d80-\u0dff",
    "Thai": "\u0e00-\u0e7f",
    "Lao": "\u0e80-\u0eff",
    "Tibetan": "\u0f00-\u0fff",
    "Myanmar": "\u1000-\u109f",
    "Georgian": "\u10a0-\u10ff\u2d00-\u2d2f",
    "Ethiopic": "\u1200-\u139f",
    "Khmer": "\u1780-\u17ff",
    "Hangul": "\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff",
    "Kana": "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f",
    "Han": "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
           "\U00020000-\U0003134f",
}
_LATIN = ("af an az br bs ca cs cy da de en eo es et eu fi fo fr fy ga gd gl ha hr ht hu id ig is "
          "it jv ku la lb lt lv mg ms mt nl nn no nb om pl pt qu ro rw se sk sl sn so sq st sv sw tk "
          "tl tr uz vi wa xh yo zu")
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{lang: ("Latin",) for lang in _LATIN.split()},
    **{lang: ("Cyrillic",) for lang in "ru uk be bg mk kk ky mn tg tt ba".split()},
    "sr": ("Cyrillic", "Latin"),
    **{lang: ("Arabic",) for lang in "ar fa ur ps ug sd ckb arz ary".split()},
    **{lang: ("Hebrew",) for lang in "he yi".split()},
    **{lang: ("Devanagari",) for lang in "hi mr ne sa".split()},
    "el": ("Greek",), "hy": ("Armenian",), "ka": ("Georgian",), "am": ("Ethiopic",), "th": ("Thai",),
    "lo": ("Lao",), "km": ("Khmer",), "my": ("Myanmar",), "bn": ("Bengali",), "as": ("Bengali",),
    "pa": ("Gurmukhi",), "gu": ("Gujarati",), "ta": ("Tamil",), "te": ("Telugu",), "kn": ("Kannada",),
    "ml": ("Malayalam",), "si": ("Sinhala",), "bo": ("Tibetan",), "dz": ("Tibetan",),
    "zh": ("Han",), "yue": ("Han",), "wuu": ("Han",), "ja": ("Han", "Kana"), "ko": ("Hangul", "Han"),
}

_LETTER = re.compile(r"[^\W\d_]")
_SCRIPT_RE: dict[tuple[str, ...], re.Pattern[str]] = {}
_MARKUP = re.compile(r"<[^<>]{0,200}>|&(?:[a-zA-Z]{2,8}|#\d{1,7}|#x[0-9a-fA-F]{1,6});")
_TEXT = re.compile(r"[^\W_]")  # a letter or a digit
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d+")
# An e-mail address starts where a run of its characters starts (the lookbehind): without it every
# position inside a long run of word characters began a match that scanned to the run's end, so a
# 19,000-digit line beside a URL took 1.5 s (n squared; found by tests/test_fuzz_text.py).
_URL = re.compile(r"(?:https?://|www\.)[^\s<>\"]+|(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
_NOT_ALNUM = re.compile(r"[\W_]+")
_DENSE = re.compile("[" + SCRIPT_RANGES["Han"] + SCRIPT_RANGES["Kana"] + "]")


def base_language(code: str) -> str:
    """'pt-BR' -> 'pt', 'zh_Hant' -> 'zh', 'DE' -> 'de': the part the tables here and langid know."""
    return re.split(r"[-_]", code.strip().lower(), maxsplit=1)[0]


def scripts_of(lang: str) -> tuple[str, ...]:
    """The scripts `lang` is written in, () when this module does not know the language."""
    return LANGUAGE_SCRIPTS.get(base_language(lang), ())


def normalise(text: str) -> str:
    """Case-folded NFKC text with every run of punctuation, symbols and spaces made one space:
    what near-duplicates and copies are compared by."""
    return _NOT_ALNUM.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


# --------------------------------------------------------------------------- the checks


def no_text(src: str, tgt: str) -> str | None:
    """A side that is empty, or only punctuation, symbols or markup (tags, entities)."""
    for side, text in (("source", src), ("target", tgt)):
        if not _TEXT.search(_MARKUP.sub(" ", text) if "<" in text or "&" in text else text):
            return f"{side} has no letters or digits"
    return None


def length(src: str, tgt: str, *, max_words: int, max_char_ratio: float, ratio_min_chars: int) -> str | None:
    """More than `max_words` words on a side, or a ratio of `char_length`s above `max_char_ratio`
    (checked when the longer side has at least `ratio_min_chars`). <= 0 turns a limit off."""
    if max_words > 0:
        words = max(len(src.split()), len(tgt.split()))
        if words > max_words:
            return f"{words} words (max {max_words})"
    if max_char_ratio > 0:
        a, b = char_length(src), char_length(tgt)
        longer, shorter = max(a, b), min(a, b)
        if longer >= ratio_min_chars and longer > max_char_ratio * max(shorter, 1):
            return f"length ratio {longer / max(shorter, 1):.1f} (max {max_char_ratio:g})"
    return None


def char_length(text: str) -> int:
    """Characters, a Han or Kana character counting as 3 (it carries about a Latin word's share of
    meaning: a Chinese sentence has about a third of the characters of its English translation)."""
    return len(text) + 2 * len(_DENSE.findall(text)) if _DENSE.search(text) else len(text)


def copy(src: str, tgt: str, *, max_overlap: float) -> str | None:
    """The target is the source (equal after `normalise`), or nearly: the share of the longer side's
    word types found on the other side is at least `max_overlap` (<= 0: exact copies only), for
    sides of 3 words or more (names and numbers make short pairs overlap)."""
    return copy_normalised(normalise(src), normalise(tgt), max_overlap=max_overlap)


def copy_normalised(a: str, b: str, *, max_overlap: float) -> str | None:
    """`copy` of two sides already `normalise`d."""
    if a == b:
        return "target equals source"
    if max_overlap > 0:
        wa, wb = set(a.split()), set(b.split())
        if min(len(wa), len(wb)) >= 3:
            share = len(wa & wb) / max(len(wa), len(wb))
            if share >= max_overlap:
                return f"{100 * share:.0f}% of the words shared"
    return None


def _foreign_letters(scripts: tuple[str, ...]) -> re.Pattern[str]:
    """Letters outside `scripts` (a word character that is no digit, no '_' and not in their ranges)."""
    if scripts not in _SCRIPT_RE:
        _SCRIPT_RE[scripts] = re.compile(r"[^\W\d_" + "".join(SCRIPT_RANGES[s] for s in scripts) + "]")
    return _SCRIPT_RE[scripts]


def script_share(text: str, scripts: tuple[str, ...]) -> float:
    """The share of the letters of `text` written in `scripts` (1.0 for text without letters)."""
    foreign = len(_foreign_letters(scripts).findall(text))  # usually none: one cheap pass
    if not foreign:
        return 1.0
    return 1.0 - foreign / len(_LETTER.findall(text))


def script(src: str, tgt: str, *, src_scripts: tuple[str, ...], tgt_scripts: tuple[str, ...],
           min_share: float) -> str | None:
    """A side with less than `min_share` of its letters in its language's scripts (a side whose
    language has no entry, `()`, is not checked)."""
    for side, text, scripts in (("source", src, src_scripts), ("target", tgt, tgt_scripts)):
        if scripts:
            share = script_share(text, scripts)
            if share < min_share:
                return f"{side}: {100 * share:.0f}% of its letters in {'/'.join(scripts)}"
    return None


def _may_link(text: str) -> bool:
    return "@" in text or "://" in text or "www." in text.lower()


def _numbers(text: str) -> set[str]:
    """Numbers of two digits or more, by value ('٣' and '３' are 3, '007' is 7); single digits are
    left out: translations often write them as words ('2 dogs', 'zwei Hunde'). Each digit is read
    by its Unicode decimal value, not int(): linear in the run's length, and a run of 4,300 digits
    or more (int()'s limit) is a number like any other."""
    found = set()
    for run in _NUMBER.findall(text):
        value = (run if run.isascii() else "".join(str(unicodedata.decimal(c)) for c in run)).lstrip("0")
        if len(value) >= 2:
            found.add(value)
    return found


def numbers(src: str, tgt: str) -> str | None:
    """A number (10 or more), URL or e-mail address on one side that the other side does not have
    (numbers compared by value across digit systems: '12', '１２', '١٢')."""
    if any(_may_link(t) for t in (src, tgt)):
        urls_s, urls_t = ({u.rstrip(".,;:!?)").lower() for u in _URL.findall(t)} for t in (src, tgt))
        if urls_s != urls_t:
            first = sorted(urls_s ^ urls_t)[0]
            return f"URL/e-mail on one side only: {first if len(first) <= 60 else first[:57] + '...'}"
        src, tgt = _URL.sub(" ", src), _URL.sub(" ", tgt)
    nums_s, nums_t = _numbers(src), _numbers(tgt)
    if nums_s != nums_t:
        first = min(nums_s ^ nums_t, key=lambda n: (len(n), n))
        shown = first if len(first) <= 40 else first[:20] + f"... ({len(first)} digits)"
        return f"number on one side only: {shown}"
    return None


def words(text: str) -> int:
    """Word count (runs of word characters)."""
    return len(_WORD.findall(text))
