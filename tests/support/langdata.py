"""Synthetic parallel corpora in scripts other than Latin, for tests (no network, deterministic).

`pairs(lang, n, seed)` gives `n` (English, lang) sentence pairs built from small aligned
lexicons and templates, with each language's own punctuation: full-width ，。？！：（） and …
for Chinese and Japanese, 。/、 in Japanese, Hangul with ASCII punctuation for Korean, Cyrillic
with «», Arabic with ، and ؟, German with „“. Sentences are short and regular enough that a
tiny model learns something in seconds. `RARE` holds one line per language with characters
that never occur in `pairs(...)` (a rare Han character, an astral-plane one, ...): what a test
reference may contain that the tokenizer's training sample did not.
"""

from __future__ import annotations

import random
from pathlib import Path

LANGS = ("zh", "ja", "ko", "ru", "ar", "de")

# (English, translation) per slot: subject, verb (+ object), place.
_SUBJ = {
    "zh": [("I", "我"), ("he", "他"), ("she", "她"), ("we", "我们"), ("the teacher", "老师"), ("the cat", "小猫")],
    "ja": [("I", "私"), ("he", "彼"), ("she", "彼女"), ("we", "私たち"), ("the teacher", "先生"), ("the cat", "猫")],
    "ko": [("I", "나는"), ("he", "그는"), ("she", "그녀는"), ("we", "우리는"), ("the teacher", "선생님은"),
           ("the cat", "고양이는")],
    "ru": [("I", "я"), ("he", "он"), ("she", "она"), ("we", "мы"), ("the teacher", "учитель"), ("the cat", "кошка")],
    "ar": [("I", "أنا"), ("he", "هو"), ("she", "هي"), ("we", "نحن"), ("the teacher", "المعلم"), ("the cat", "القطة")],
    "de": [("I", "ich"), ("he", "er"), ("she", "sie"), ("we", "wir"), ("the teacher", "der Lehrer"),
           ("the cat", "die Katze")],
}
_VERB = {
    "zh": [("eats an apple", "吃苹果"), ("reads a book", "看书"), ("drinks tea", "喝茶"), ("writes a letter", "写信"),
           ("buys bread", "买面包"), ("likes music", "喜欢音乐")],
    "ja": [("eats an apple", "りんごを食べる"), ("reads a book", "本を読む"), ("drinks tea", "お茶を飲む"),
           ("writes a letter", "手紙を書く"), ("buys bread", "パンを買う"), ("likes music", "音楽が好きだ")],
    "ko": [("eats an apple", "사과를 먹는다"), ("reads a book", "책을 읽는다"), ("drinks tea", "차를 마신다"),
           ("writes a letter", "편지를 쓴다"), ("buys bread", "빵을 산다"), ("likes music", "음악을 좋아한다")],
    "ru": [("eats an apple", "ест яблоко"), ("reads a book", "читает книгу"), ("drinks tea", "пьёт чай"),
           ("writes a letter", "пишет письмо"), ("buys bread", "покупает хлеб"), ("likes music", "любит музыку")],
    "ar": [("eats an apple", "يأكل تفاحة"), ("reads a book", "يقرأ كتابا"), ("drinks tea", "يشرب الشاي"),
           ("writes a letter", "يكتب رسالة"), ("buys bread", "يشتري الخبز"), ("likes music", "يحب الموسيقى")],
    "de": [("eats an apple", "isst einen Apfel"), ("reads a book", "liest ein Buch"), ("drinks tea", "trinkt Tee"),
           ("writes a letter", "schreibt einen Brief"), ("buys bread", "kauft Brot"), ("likes music", "mag Musik")],
}
_PLACE = {
    "zh": [("at home", "在家"), ("in the park", "在公园"), ("at school", "在学校"), ("today", "今天")],
    "ja": [("at home", "家で"), ("in the park", "公園で"), ("at school", "学校で"), ("today", "今日")],
    "ko": [("at home", "집에서"), ("in the park", "공원에서"), ("at school", "학교에서"), ("today", "오늘")],
    "ru": [("at home", "дома"), ("in the park", "в парке"), ("at school", "в школе"), ("today", "сегодня")],
    "ar": [("at home", "في البيت"), ("in the park", "في الحديقة"), ("at school", "في المدرسة"), ("today", "اليوم")],
    "de": [("at home", "zu Hause"), ("in the park", "im Park"), ("at school", "in der Schule"), ("today", "heute")],
}

# Templates: (English, translation) with {s} subject, {v} verb phrase, {p} place.
_TEMPLATES = {
    "zh": [("{s} {v} {p}.", "{s}{p}{v}。"), ("Does {s} {v} {p}?", "{s}{p}{v}吗？"),
           ("Look, {s} {v}!", "看，{s}{v}！"), ("Note: {s} {v} ({p}) ...", "注意：{s}{v}（{p}）…")],
    "ja": [("{s} {v} {p}.", "{s}は{p}{v}。"), ("Does {s} {v} {p}?", "{s}は{p}{v}か？"),
           ("Look, {s} {v}!", "ほら、{s}は{v}！"), ("Note: {s} {v} ({p}) ...", "注意：{s}は{v}（{p}）…")],
    "ko": [("{s} {v} {p}.", "{s} {p} {v}."), ("Does {s} {v} {p}?", "{s} {p} {v}?"),
           ("Look, {s} {v}!", "봐, {s} {v}!"), ("Note: {s} {v} ({p}) ...", "주의: {s} {v} ({p}) …")],
    "ru": [("{s} {v} {p}.", "{S} {v} {p}."), ("Does {s} {v} {p}?", "{S} {v} {p}?"),
           ("Look, {s} {v}!", "Смотри, {s} {v}!"), ("Note: {s} {v} ({p}) ...", "Внимание: «{s} {v}» ({p}) …")],
    "ar": [("{s} {v} {p}.", "{s} {v} {p}."), ("Does {s} {v} {p}?", "هل {s} {v} {p}؟"),
           ("Look, {s} {v}!", "انظر، {s} {v}!"), ("Note: {s} {v} ({p}) ...", "ملاحظة: {s} {v} ({p}) …")],
    "de": [("{s} {v} {p}.", "{S} {v} {p}."), ("Does {s} {v} {p}?", "{V} {s} {p}?"),
           ("Look, {s} {v}!", "Schau, {s} {v}!"), ("Note: {s} {v} ({p}) ...", "Hinweis: „{s} {v}“ ({p}) …")],
}

# One line per language with characters absent from pairs(): rare Han (龘, and 𠀋 beyond the BMP),
# rare kana/kanji, rare Hangul syllables, Cyrillic ё/Ѣ, Arabic with harakat, German ß/ẞ and ‰.
RARE = {
    "zh": "龘龘腾飞，𠀋字罕见！",
    "ja": "𩸽（ほっけ）を食べた…ゟ！",
    "ko": "똠얌꿍을 먹었다!",
    "ru": "Ёжик и Ѣ — редкость.",
    "ar": "كَتَبَ الوَلَدُ؟",
    "de": "Straße, GROẞ ‰ ÿ.",
}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def pairs(lang: str, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """`n` (English, `lang`) pairs, deterministic given `seed`."""
    rng = random.Random(f"{lang}-{seed}")
    out = []
    for _ in range(n):
        (es, xs), (ev, xv), (ep, xp) = rng.choice(_SUBJ[lang]), rng.choice(_VERB[lang]), rng.choice(_PLACE[lang])
        te, tx = rng.choice(_TEMPLATES[lang])
        if es in ("I", "we") or te.startswith("Does"):  # base form: "I eat", "does he eat"
            verb, _, rest = ev.partition(" ")
            ev = f"{verb[:-1]} {rest}"
            te = te.replace("Does", "Do") if es in ("I", "we") else te
        en = _cap(te.format(s=es, v=ev, p=ep))
        x = tx.format(s=xs, v=xv, p=xp, S=_cap(xs), V=_cap(xv))
        out.append((en, x))
    return out


def write_text_corpus(root: Path, src_lang: str, tgt_lang: str, splits: dict[str, list[tuple[str, str]]]) -> Path:
    """Write `{split}.{src_lang}` / `{split}.{tgt_lang}` files (data.format text) under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (root / f"{split}.{src_lang}").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
        (root / f"{split}.{tgt_lang}").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    return root
