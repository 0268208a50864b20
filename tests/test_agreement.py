"""Agreement around a glossary term (issue 72, mt.text.agreement): German determiners and adjectives
rewritten for a term's gender and number, against hand-derived values of the grammar tables, and
the glossary's third column that gives them."""

from __future__ import annotations

import itertools

import pytest

from mt.errors import MTError
from mt.text.agreement import (
    GENDERS,
    UNKNOWN,
    Grammar,
    agrees,
    following_number,
    parse_tag,
    phrase_variants,
    source_number,
)
from mt.text.glossary import parse_glossary

F, M, N, PL = Grammar("f", "sg"), Grammar("m", "sg"), Grammar("n", "sg"), Grammar(None, "pl")


@pytest.mark.parametrize(("before", "grammar", "want"), [
    (["Ein"], F, (0, [("Eine",)])),  # nominative (or accusative neuter) "Ein" -> "Eine"
    (["mit", "einem"], F, (1, [("einer",)])),  # dative stays dative
    (["Ein", "junger"], F, (0, [("Eine", "junge")])),  # mixed adjective ending follows
    (["einen", "großen", "roten"], N, (0, [("ein", "großes", "rotes")])),  # accusative, two adjectives
    (["Die"], M, (0, [("Der",), ("Den",)])),  # nominative or accusative feminine: one variant a case
    (["in", "der"], N, (1, [("das",), ("dem",), ("des",)])),  # "der": nom. m, dat./gen. f, gen. pl
    (["Ein", "junger"], PL, (0, [("Junge",)])),  # no plural of "ein": dropped, the adjective strong
    (["Ein"], PL, (0, [()])),
    (["mit", "diesem"], F, (1, [("dieser",)])),
    (["SEIN"], F, (0, [("SEINE",)])),  # ALL CAPS stays
    (["Der"], M, (0, [("Der",), ("Dem",), ("Des",)])),  # it already agrees: kept, beside the other cases
])
def test_the_determiner_and_adjectives_in_front_take_the_terms_gender_in_the_same_case(
        before: list[str], grammar: Grammar, want: tuple[int, list[tuple[str, ...]]]) -> None:
    assert phrase_variants(before, grammar, "de") == want


def test_no_phrase_where_no_determiner_stands_or_the_language_has_no_table() -> None:
    assert phrase_variants(["sitzt", "auf"], F, "de") == (2, [])
    assert phrase_variants(["Zwei"], PL, "de") == (1, [])  # a numeral is not rewritten
    assert phrase_variants(["der", "rote", ","], F, "de") == (3, [])  # punctuation ends the phrase
    assert phrase_variants(["Un"], F, "fr") == (1, [])
    assert agrees(["Un"], F, "fr") is None and agrees(["Ein"], UNKNOWN, "de") is None


def test_every_variant_agrees_and_only_what_can_agree_is_offered() -> None:
    """Invariants over every German determiner form, with and without an adjective: each variant
    for a grammar agrees with it (`agrees`), and the phrase as written agrees with at least one."""
    determiners = [stem + ending for stem, endings in (("d", ("er", "ie", "as", "en", "em", "es")),
                                                       ("ein", ("", "e", "en", "em", "er", "es")),
                                                       ("dies", ("er", "e", "es", "en", "em")))
                   for ending in endings]
    for det, adjective in itertools.product(determiners, ["", "kleine", "kleinen", "kleiner", "kleines"]):
        before = [det, adjective] if adjective else [det]
        if phrase_variants(before, UNKNOWN, "de")[1] == []:  # "der kleiner" and the like: no reading
            continue
        assert any(agrees(before, g, "de") for g in (F, M, N, PL)), before
        for grammar in (F, M, N, PL):
            start, variants = phrase_variants(before, grammar, "de")
            for variant in variants:
                if len(variant) == len(before) - start:  # not a plural that dropped "ein"
                    assert agrees(list(variant), grammar, "de"), (before, grammar, variant)


@pytest.mark.requires("simplemma")
def test_a_source_word_says_its_number_in_english_and_forms_follow_it() -> None:
    assert source_number(["men"], "en") == "pl" and source_number(["man"], "en") == "sg"
    assert source_number(["dogs", "dog"], "en") is None  # both in one sentence: not known
    assert source_number(["man's"], "en") == "sg" and source_number(["Mann"], "de") is None
    grammar = [F, PL, Grammar("f", None)]
    assert following_number(grammar, "pl") == [1, 2] and following_number(grammar, "sg") == [0, 2]
    assert following_number([F], "pl") == [0] and following_number(grammar, None) == [0, 1, 2]


def test_the_glossary_third_column_gives_each_forms_grammar() -> None:
    g = parse_glossary(b"man\tPerson|Personen\tf|pl\nwoman\tMensch\tm\ndog\tTier|Tiere\tn.sg|n.pl\nday\tTag\n",
                       "g.tsv")
    person, mensch, tier, tag = g.terms
    assert person.grammar == (F, PL) and person.grammar_of("Personen") == PL
    assert person.grammar_of("Personen's") == Grammar("f")  # a form the vocabulary adds: the shared gender
    assert mensch.grammar == (M,) and tier.grammar == (N, Grammar("n", "pl")) and tag.grammar == ()
    assert tag.grammar_of("Tag") == UNKNOWN and set(GENDERS) == {"m", "f", "n"}
    assert parse_tag(" F.PL ", "x") == Grammar("f", "pl") and parse_tag("", "x") == UNKNOWN
    for data, message in [(b"a\tb\tx\n", "g.tsv:1: grammar tag 'x'"),
                          (b"a\tb|c\tf|m|n\n", "g.tsv:1: 3 grammar tags for 2 target forms"),
                          (b"a\tb\tf\tz\n", "g.tsv:1: 4 tab-separated columns"),
                          (b"a\tb\tm.f\n", "g.tsv:1: grammar tag 'm.f'")]:
        with pytest.raises(MTError, match=message) as caught:
            parse_glossary(data, "g.tsv")
        assert "\n" not in str(caught.value)


@pytest.mark.requires("simplemma")
def test_the_measure_counts_disagreeing_determiners_wrong_numbers_and_terms_beside_a_noun() -> None:
    from mt.eval.terms import agreement
    g = parse_glossary(b"man\tPerson|Personen\tf|pl\ndog\tTier\n", "g.tsv").for_pair("en", "de")
    sources = ["A man sleeps.", "A man sleeps.", "Two men sleep.", "A man with a hat.", "A dog sleeps."]
    hyps = ["Ein Person schläft.", "Eine Person schläft.", "Zwei Person schlafen.", "Ein Mann Person mit Hut.",
            "Ein Tier schläft."]  # the untagged "Tier" is not counted
    got = agreement(sources, hyps, g, "de").to_dict()
    assert (got["forms"], got["phrases"], got["disagreeing"]) == (4, 2, 1)  # "Ein Person"; "Zwei" is no determiner
    assert (got["numbered"], got["wrong_number"]) == (4, 1)  # "Zwei Person" for "men"
    assert got["beside_noun"] == 1 and got["disagreeing_rate"] == 50.0  # "Mann Person"
