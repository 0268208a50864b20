"""Glossaries whose terms replace the model's word (issue 65): source terms found by lemma (and the
suffix rules without a lemmatiser), target forms on a line, CSV and TBX files, disjunctive and
negative constraints and a forced prefix in the constrained search, and the placement measures."""

from __future__ import annotations

import random

import pytest
import torch

from mt.data.batching import collate_source
from mt.decode.constrained import Constraints, constrained_beam_search
from mt.decode.rules import SearchSettings
from mt.decode.swap import own_words
from mt.decode.terms import TermConstraints
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.eval.terms import placement, term_success, usual_words_left
from mt.text import glossary as glossary_module
from mt.text.glossary import Glossary, Term, parse_glossary
from tests.test_constrained import V, contains, make

pytestmark = pytest.mark.usefixtures("one_thread")
TBX = """<?xml version="1.0" encoding="UTF-8"?>
<martif type="TBX" xml:lang="en"><text><body>
<termEntry id="1">
  <langSet xml:lang="en"><tig><term>bike</term></tig><tig><term>bicycle</term></tig></langSet>
  <langSet xml:lang="de-CH"><tig><term>Velo</term></tig><tig><term>Velos</term></tig>
    <tig><term>Fahrrad</term><termNote type="administrativeStatus">deprecatedTerm-admn-sts</termNote></tig>
  </langSet>
</termEntry>
<termEntry id="2"><langSet xml:lang="en"><tig><term>car</term></tig></langSet></termEntry>
</body></text></martif>
"""
TBX3 = """<tbx type="TBX-Basic" style="dct" xml:lang="en" xmlns="urn:iso:std:iso:30042:ed-2"><text><body>
<conceptEntry id="c1"><langSec xml:lang="en"><termSec><term>woman</term></termSec></langSec>
<langSec xml:lang="de"><termSec><term>Dame</term></termSec></langSec></conceptEntry>
</body></text></tbx>
"""


def terms_in(g: Glossary, sentence: str) -> list[str]:
    return [t.source for t in g.match(sentence)]


@pytest.mark.requires("simplemma")
def test_irregular_forms_match_their_entries_by_lemma_in_both_languages() -> None:
    en = parse_glossary("woman\tDame\nman\tKerl\nchild\tKind\nmouse\tMaus\nsaw\tSäge\n".encode(), "t.tsv").for_pair("en", "de")
    assert terms_in(en, "Two women, three men and children watch mice.") == ["woman", "man", "child", "mouse"]
    assert terms_in(en, "Women sit.") == ["woman"]  # capitalised at the sentence start
    assert terms_in(en, "He sees the Men.") == []  # a lower-case term's word in capitals mid-sentence: a name
    assert terms_in(en, "She sees it.") == []  # "sees" is "see", not the term "saw" as written
    de = parse_glossary("Mann\tguy\nFuß\tfoot\n".encode(), "t.tsv").for_pair("de", "en")
    assert terms_in(de, "Zwei Männer und ihre Füße.") == ["Mann", "Fuß"]
    assert terms_in(de, "zwei männer") == []  # a capitalised term's word in lower case is another word


def test_without_a_lemmatiser_the_suffix_rules_still_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(glossary_module, "lemmatizer", lambda language: None)
    g = parse_glossary(b"woman\tDame\ncat\tKatze\n", "t.tsv").for_pair("en", "de")
    assert terms_in(g, "two cats and women") == ["cat"]  # "women" needs a lemmatiser


def test_a_line_lists_forms_on_either_side() -> None:
    g = parse_glossary(b"bike|bicycle\tVelo|Velos\nMastodon|Mastodons\n", "t.tsv")
    assert g.terms == (Term("bike", "Velo", 1, ("Velo", "Velos")), Term("bicycle", "Velo", 1, ("Velo", "Velos")),
                       Term("Mastodon", "Mastodon", 2, ("Mastodon", "Mastodons")),
                       Term("Mastodons", "Mastodon", 2, ("Mastodon", "Mastodons")))
    assert g.terms[0].targets == ("Velo", "Velos") and Term("a", "b", 1).targets == ("b",)
    for text, problem in [("bike\tVelo||Velos\n", "glossary t.tsv:1: an empty target form in 'Velo||Velos'"),
                          ("bike\tVelo\nbike\tVelo|Velos\n",
                           "glossary t.tsv:2: 'bike' -> 'Velo|Velos', but line 1 says 'Velo'")]:
        with pytest.raises(MTError, match="^" + problem.replace("|", r"\|")):
            parse_glossary(text.encode(), "t.tsv")


def test_csv_with_a_header_in_any_order_and_without_one() -> None:
    g = parse_glossary(b'context,target,source\nbikes,"Velo|Velos",bike\nx,,untranslated\n', "t.csv")
    assert g.terms == (Term("bike", "Velo", 2, ("Velo", "Velos")),)  # an empty target: exported untranslated
    assert parse_glossary(b'"New York"\ncat,Katze\n', "t.csv").terms == (Term("New York", "New York", 1),
                                                                        Term("cat", "Katze", 2))
    with pytest.raises(MTError, match=r"^glossary t.csv:1: a header row without a 'source' column$"):
        parse_glossary(b"target,context\nx,y\n", "t.csv")


def test_tbx_2_and_3_entries_become_terms_for_the_models_pair() -> None:
    g = parse_glossary(TBX.encode(), "t.tbx")
    assert g.terms == () and len(g.entries) == 2
    pair = g.for_pair("en", "de")  # de-CH counts as de; the entry without German is left out
    assert pair.terms == (Term("bike", "Velo", 4, ("Velo", "Velos"), ("Fahrrad",)),
                          Term("bicycle", "Velo", 4, ("Velo", "Velos"), ("Fahrrad",)))
    assert [t.source for t in pair.match("my bicycle")] == ["bicycle"]
    assert parse_glossary(TBX3.encode(), "t.tbx").for_pair("en", "de").terms == (Term("woman", "Dame", 2),)
    with pytest.raises(MTError, match=r"^glossary t.tbx: no entry has terms in both en and fr$"):
        g.for_pair("en", "fr")


@pytest.mark.parametrize("text, line, problem", [
    ("<martif><text><body><termEntry>\n<langSet>\n</termEntry>", 3, "not TBX (XML error: mismatched tag)"),
    ("<html><body>a glossary?</body></html>", 1, "not TBX (the root element is <html>, expected <martif> or <tbx>)"),
])
def test_a_file_that_is_not_tbx_is_one_line_naming_file_and_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(MTError) as e:
        parse_glossary(text.encode(), "terms.tbx")
    assert str(e.value) == f"glossary terms.tbx:{line}: {problem}"


def search(model, sources, constraints, beam=4):
    src, mask = collate_source(sources)
    with torch.inference_mode():
        return constrained_beam_search(model, src, mask, constraints,
                                       SearchSettings(beam=beam, alpha=0.6, length_penalty="gnmt",
                                                      max_len_a=1.0, max_len_b=10, n_best=1,
                                                      forbid_unk=True), glue=[5, 6])


def test_any_one_alternative_keeps_a_constraint_and_shared_prefixes_stay_open() -> None:
    model, rng = make(0), random.Random(3)
    sources, wanted = [], []
    for _ in range(8):
        sources.append([rng.randint(7, V - 1) for _ in range(rng.randint(2, 8))])
        a, b, c = (rng.randint(7, V - 1) for _ in range(3))
        wanted.append(Wanted((((a, b), (a, c)), ((c,), (a, b, c)))))  # two forms each, sharing first tokens
    batched = search(model, sources, wanted)
    for src, w, (hyp,) in zip(sources, wanted, batched):
        assert all(any(contains(hyp.tokens, list(alt)) for alt in alts) for alts in w.require), (hyp.tokens, w)
        assert search(model, [src], [w])[0][0].tokens == hyp.tokens  # a batch equals its sentences alone


def test_a_longer_form_may_follow_a_shorter_one_past_the_glue() -> None:
    # (9,) and (9, 5) are forms of one term: after 9 the constraint is met, and the glue (5, 6) is
    # barred except 5, which carries on into the longer form; a lone (9,) bars both
    cons = Constraints.start([Wanted((((9,), (9, 5)),)), Wanted((((9,),),))], 1, torch.device("cpu"))
    cons.follow(cons.after(torch.tensor([[0], [1]]), torch.tensor([[9], [9]])), torch.tensor([[0], [0]]))
    assert cons.all_met().tolist() == [True, True] and cons.rows.ended.tolist() == [True, True]
    tokens, valid = cons.continuations()
    assert tokens[valid].tolist() == [5] and valid.any(dim=1).tolist() == [True, False]
    model = make(1)
    for src in ([9, 10, 11], [12, 13], [20, 21, 22, 23]):
        barred = search(model, [src], [Wanted((((9,),),))])[0][0].tokens
        assert 9 in barred and not any(barred[i] == 9 and barred[i + 1] in (5, 6) for i in range(len(barred) - 1))


def test_avoided_sequences_never_appear_and_a_prefix_starts_the_output_then_a_term() -> None:
    model, rng = make(2), random.Random(5)
    sources = [[rng.randint(7, V - 1) for _ in range(6)] for _ in range(3)]
    for source, (hyp,) in zip(sources, search(model, sources, [[[7]]] * 3)):
        common = max(set(hyp.tokens) - {7}, key=hyp.tokens.count)  # what the model writes without a ban
        first = search(model, [source], [Wanted((((7,),),), avoid=((common,),))])[0][0].tokens
        pair = next(first[i:i + 2] for i in range(len(first) - 1) if 7 not in first[i:i + 2])  # its next choice
        out = search(model, [source], [Wanted((((7,),),), avoid=((common,), tuple(pair)))])[0][0].tokens
        assert common not in first and common not in out and not contains(out, pair) and 7 in out, (first, out)
        placed = search(model, [source], [Wanted((((30, 31),),), prefix=(12, 13), place=True)])[0][0].tokens
        assert placed[:4] == [12, 13, 30, 31]
    # an avoided sequence inside a required form is dropped (the term stays possible)
    assert search(model, [[8, 9]], [Wanted((((7, 8),),), avoid=((8,),))])[0][0].tokens.count(8) >= 1


def test_own_words_and_placement_follow_the_attention_given() -> None:
    g = parse_glossary(b"man\tKerl|Kerle\n", "t.tsv").for_pair("en", "de")
    # the source word each target word aligns with: "Ein" and "Mann" both with "man" (the longer is its word)
    scores = [[1, 1, 2], [0, 1]]
    sources, refs = ["A man sleeps", "no term"], ["Ein Mann schläft.", "kein Begriff"]
    assert [[(t.source, w, i) for t, w, i in found] for found in own_words(g, sources, refs, scores)] == [
        [("man", "Mann", 1)], []]
    # a longer article in lower case ("einem") is not the word of a capitalised term ("Kerl")
    dative = own_words(g, ["He sat with a man"], ["Er saß mit einem Mann."], [[0, 1, 2, 4, 4]])
    assert [(w, i) for _, w, i in dative[0]] == [("Mann", 4)]
    hyps = ["Ein Kerl schläft.", "kein Begriff"]
    placed = placement(sources, refs, hyps, g, scores)
    assert (placed.slots, placed.exclusive, placed.rewritten) == (1, 1, ["Ein Kerl schläft.", "kein Begriff"])
    assert placement(sources, refs, ["Ein Mann schläft, Kerl.", "x"], g, scores).exclusive == 0  # left beside
    assert term_success(sources, ["Die Kerle", "x"], g).kept == 1  # any listed form keeps the term
    assert usual_words_left(["Ein Mann, Kerl.", "x"], sources, g, {"Kerl": {"Mann"}}) == (1, 1)


def test_term_constraints_give_each_line_its_forms_and_deprecated_words() -> None:
    g = parse_glossary(TBX.encode(), "t.tbx").for_pair("en", "de")
    pieces = {"Velo": [7], "Velos": [7, 8], "Fahrrad": [9], "fahrrad": [10, 11]}
    terms = TermConstraints(g, pieces, first_pass="off")
    assert terms.for_lines(["a bike", "nothing", "bicycle and bike"]) == [
        Wanted((((7,), (7, 8)),), ((9,), (10, 11))), Wanted(()), Wanted((((7,), (7, 8)),), ((9,), (10, 11)))]
    assert not terms.for_lines(["nothing"])[0]


def test_a_prefix_longer_than_the_usual_limit_still_ends_in_its_term_under_the_loop_guard() -> None:
    """A looping model's first pass can run past the usual output limit (1 x |src| + 10 here): the
    search's limit grows by the prefix, so the term still fits and the sentence gets an output
    (it got none, and the server answered 500, when the limit ignored the prefix)."""
    model = make(2)
    prefix = tuple([12, 13, 14] * 8)  # 24 tokens against a limit of 13 for a 3-token source
    src, mask = collate_source([[20, 21, 22]])
    with torch.inference_mode():
        (found,) = constrained_beam_search(model, src, mask, [Wanted((((30, 31),),), prefix=prefix,
                                                                     place=True)], SearchSettings(beam=4,
                                                                                                  alpha=0.6,
                                                                                                  length_penalty="gnmt", max_len_a=1.0, max_len_b=10, n_best=1, forbid_unk=True, no_repeat_ngram_size=3))
    assert found and list(found[0].tokens[:len(prefix) + 2]) == [*prefix, 30, 31]
