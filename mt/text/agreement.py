"""Agreement around a glossary term (issue 72): the determiner and adjectives in front of a noun
rewritten for the term's gender and number, so a term that replaces a word of another gender
does not keep that word's article ("Ein Person" -> "Eine Person", "einem Tasche" -> "einer Tasche").

A glossary line may say a target form's gender and number in a third column (mt.text.glossary):
`man<TAB>Person|Personen<TAB>f|pl`, one tag a form (`m`, `f`, `n`, `pl`, or `f.sg`, `m.pl`...),
or one tag for every form. Where the line says nothing, every gender is offered and the model's
score picks (the swap's choice stage, mt.decode.forced.choose_outputs).

Languages: German (`TABLES`; definite and indefinite articles, the der- and ein-words, and the
weak, mixed and strong adjective endings). Elsewhere a phrase is left as the model wrote it.
The case of the phrase is read from the words themselves: "einem" can be dative masculine or
neuter, so a feminine term gets "einer" (dative), never a nominative "eine"; a word that can be
several cases ("der": nominative masculine, dative or genitive feminine, genitive plural) offers
one variant per case it can be, and the model's score chooses among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mt.errors import MTError
from mt.text.lemma import lemmatizer

GENDERS = ("m", "f", "n")
NUMBER_BY_LEMMA = ("en",)  # source languages whose nouns inflect only for the plural ("men", "dogs")
CASES = ("nom", "acc", "dat", "gen")
SLOTS = (*GENDERS, "pl")  # what an ending agrees with: a singular gender, or the plural
MAX_BETWEEN = 2  # adjectives between a determiner and its noun that are rewritten with it


@dataclass(frozen=True)
class Grammar:
    """A target form's gender ("m", "f", "n") and number ("sg", "pl"), None where not known."""

    gender: str | None = None
    number: str | None = None

    def slots(self) -> tuple[str, ...]:
        """The ending slots this form may agree with: "pl" for a plural, its gender for a singular,
        every gender (and the plural, unless it is singular) where they are not known."""
        if self.number == "pl":
            return ("pl",)
        if self.gender is not None:
            return (self.gender,)
        return GENDERS if self.number == "sg" else SLOTS


UNKNOWN = Grammar()


def parse_tag(tag: str, where: str) -> Grammar:
    """A glossary tag ("f", "pl", "f.sg", "m.pl", "" for unknown) -> Grammar; MTError naming `where`.
    A gender alone is a singular ("f": feminine singular, as a dictionary gives a noun)."""
    gender = number = None
    for part in filter(None, tag.strip().lower().split(".")):
        if part in GENDERS and gender is None:
            gender = part
        elif part in ("sg", "pl") and number is None:
            number = part
        else:
            raise MTError(f"{where}: grammar tag '{tag.strip()}': write a gender (m, f, n) and/or a number "
                          "(sg, pl), as 'f', 'pl' or 'f.sg'")
    return Grammar(gender, "sg" if gender is not None and number is None else number)


def _row(*endings: str) -> dict[str, str]:
    return dict(zip(SLOTS, endings))


# Endings by case, then by slot (m, f, n, pl). DER's follow the stem "d" (der, die, das, den...).
DER = {"nom": _row("er", "ie", "as", "ie"), "acc": _row("en", "ie", "as", "ie"),
       "dat": _row("em", "er", "em", "en"), "gen": _row("es", "er", "es", "er")}
DIESER = {"nom": _row("er", "e", "es", "e"), "acc": _row("en", "e", "es", "e"),
          "dat": _row("em", "er", "em", "en"), "gen": _row("es", "er", "es", "er")}
EIN = {"nom": _row("", "e", "", "e"), "acc": _row("en", "e", "", "e"),
       "dat": _row("em", "er", "em", "en"), "gen": _row("es", "er", "es", "er")}
WEAK = {"nom": _row("e", "e", "e", "en"), "acc": _row("en", "e", "e", "en"),
        "dat": _row("en", "en", "en", "en"), "gen": _row("en", "en", "en", "en")}
MIXED = {"nom": _row("er", "e", "es", "en"), "acc": _row("en", "e", "es", "en"),
         "dat": _row("en", "en", "en", "en"), "gen": _row("en", "en", "en", "en")}
STRONG = {"nom": _row("er", "e", "es", "e"), "acc": _row("en", "e", "es", "e"),  # no determiner
          "dat": _row("em", "er", "em", "en"), "gen": _row("en", "er", "en", "er")}


@dataclass(frozen=True)
class Determiners:
    """One language's determiners: stem -> (its endings, the endings of the adjectives after it)."""

    stems: dict[str, tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]]
    no_plural: frozenset[str]  # stems without a plural: dropped ("ein junger" -> "junge Personen")
    strong: dict[str, dict[str, str]]  # adjective endings without a determiner


TABLES: dict[str, Determiners] = {
    "de": Determiners(
        {"d": (DER, WEAK),
         **{stem: (DIESER, WEAK) for stem in ("dies", "jen", "jed", "welch", "manch", "solch")},
         **{stem: (EIN, MIXED) for stem in ("ein", "kein", "mein", "dein", "sein", "ihr", "unser", "eur")}},
        frozenset({"ein"}), STRONG),
}


def _readings(word: str, table: Determiners) -> list[tuple[str, str, dict, dict]]:
    """Each way `word` (lower case) is a determiner: (stem, ending, its endings, adjective endings)."""
    found = []
    for stem, (endings, adjectives) in table.stems.items():
        if word.startswith(stem):
            ending = word[len(stem):]
            if any(ending == row[slot] for row in endings.values() for slot in SLOTS):
                found.append((stem, ending, endings, adjectives))
    return found


def _adjective(word: str) -> tuple[str, str] | None:
    """(stem, ending) of a lower-case word that can be an inflected adjective, else None."""
    if not word.isalpha() or not word.islower() or len(word) < 4:
        return None
    for ending in ("en", "em", "er", "es", "e"):
        if word.endswith(ending):
            return word[:-len(ending)], ending
    return None


def _cased(new: str, old: str) -> str:
    """`new` in the case of `old`: ALL CAPS, capitalised or as written."""
    if len(old) > 1 and old.isupper():
        return new.upper()
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def phrase_variants(words: Sequence[str], grammar: Grammar,
                    language: str) -> tuple[int, list[tuple[str, ...]]]:
    """The noun phrase ending just before a noun that becomes a form of `grammar`: `words` are the
    words before the noun, as written. -> (index in `words` where the phrase starts, the phrase's
    variants, each the words from there on, agreeing with the form in one case the original could be;
    a variant may be shorter: a plural drops "ein", so "Ein junger" gives ("Junge",) and "Ein" ()).
    (len(words), []) where the language has no table, or no determiner stands in the last
    `MAX_BETWEEN` + 1 words with only adjectives after it."""
    table = TABLES.get(language.split("-")[0].lower())
    if table is None:
        return len(words), []
    for start in range(len(words) - 1, max(-1, len(words) - MAX_BETWEEN - 2), -1):
        readings = _readings(words[start].lower(), table)
        adjectives = [_adjective(w) for w in words[start + 1:]]
        if readings and None not in adjectives:
            break
        if _adjective(words[start]) is None:  # neither a determiner nor an adjective: no phrase
            return len(words), []
    else:
        return len(words), []
    variants: dict[tuple[str, ...], None] = {}
    for stem, ending, endings, adjective_endings in readings:
        for case in CASES:
            said = [slot for slot in SLOTS if endings[case][slot] == ending
                    and not (slot == "pl" and stem in table.no_plural)
                    and all(a is not None and adjective_endings[case][slot] == a[1] for a in adjectives)]
            if not said:  # not a reading of this case
                continue
            for slot in grammar.slots():
                if slot == "pl" and stem in table.no_plural:  # no determiner: strong adjectives
                    new = [a[0] + table.strong[case][slot] for a in adjectives if a is not None]
                    if new:  # the first word takes the determiner's place and its case
                        new[0] = _cased(new[0], words[start])
                else:
                    new = [_cased(stem + endings[case][slot], words[start])]
                    new += [_cased(a[0] + adjective_endings[case][slot], w)
                            for a, w in zip(adjectives, words[start + 1:]) if a is not None]
                variants[tuple(new)] = None
    return start, list(variants)


def agrees(words: Sequence[str], grammar: Grammar, language: str) -> bool | None:
    """Whether the determiner (and adjectives) just before a noun of `grammar` can agree with it:
    True/False, or None where there is no such phrase, no table, or the grammar is not known.
    How exp_glossary counts "Ein Person" (False) and "Eine Person" (True)."""
    if grammar == UNKNOWN:
        return None
    start, variants = phrase_variants(words, Grammar(), language)
    if not variants:
        return None
    own = tuple(w.lower() for w in words[start:])
    possible = {tuple(w.lower() for w in v) for v in phrase_variants(words, grammar, language)[1]}
    return own in possible




def source_number(words: Sequence[str], language: str) -> str | None:
    """"pl" where every one of `words` (a term's last word, as each of its occurrences in a source
    sentence writes it) is an inflected form ("men", "dogs": its lemma differs), "sg" where none is;
    None where they differ or the source language's nouns inflect for more than number."""
    lemma = lemmatizer(language) if language.split("-")[0].lower() in NUMBER_BY_LEMMA else None
    if lemma is None or not words:
        return None
    plural = {lemma(word).casefold() != word.casefold() and not word.endswith(("'s", "\u2019s"))
              for word in words}
    return None if len(plural) > 1 else "pl" if plural.pop() else "sg"


def following_number(grammar: Sequence[Grammar], number: str | None) -> list[int]:
    """The indices of the forms (of `grammar`, one a form) a source word of `number` may take:
    those of its number or of an unknown one; every form where none is left."""
    keep = [i for i, g in enumerate(grammar) if number is None or g.number in (None, number)]
    return keep or list(range(len(grammar)))
