"""The glossary's "swap" first pass (mt.decode.swap.swapping): each term put in the place of the
model's own word in the search's own output, its form chosen by the model's score
(mt.decode.forced.choose_outputs), and the choice stage answering such sentences without a search."""

from __future__ import annotations

import random

import pytest
import torch

from mt.config import DecodeConfig, SearchConfig
from mt.data.batching import collate_source
from mt.decode import forced
from mt.decode.constrained import constrained_beam_search
from mt.decode.engine import NativeEngine
from mt.decode.forced import choose_outputs, force_decode_score
from mt.decode.rules import SearchSettings
from mt.decode.search import length_penalty
from mt.decode.swap import _case_like, _swapped, alone_alignments, swapping
from mt.decode.terms import TermConstraints
from mt.decode.wanted import Wanted
from mt.text.agreement import parse_tag
from mt.text.glossary import parse_glossary
from tests.test_constrained import V, make

pytestmark = pytest.mark.usefixtures("one_thread")
WORD_START = "\u2581"


class WordTokenizer:
    """A stand-in target tokenizer: one piece per whitespace-separated word (ids given on first sight)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode_tgt(self, lines: list[str]) -> list[list[int]]:
        return [[self.ids.setdefault(WORD_START + w, len(self.ids) + 7) for w in line.split()] for line in lines]

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.ids) + 7

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        names = {i: p for p, i in self.ids.items()}
        return [names.get(i, "<s>") for i in ids]

    def decode(self, ids: tuple[int, ...]) -> str:
        return " ".join(p[1:] for p in self.tgt_pieces(list(ids)))


def test_choose_outputs_ranks_candidates_by_their_forced_log_prob_and_scores_them_as_beam_search(monkeypatch) -> None:
    model, rng = make(0), random.Random(1)
    sources = [[rng.randint(7, V - 1) for _ in range(rng.randint(2, 7))] for _ in range(3)]
    choices = [[[rng.randint(7, V - 1) for _ in range(rng.randint(1, 6))] for _ in range(k)] for k in (1, 4, 3)]
    choices[2] = [[9, 10, 11, 12], [9, 10, 13], [9, 10]]  # candidates sharing their first tokens (a term's forms)
    src, mask = collate_source(sources)
    with torch.inference_mode():
        ranked = choose_outputs(model, src, mask, choices,
                                SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt", n_best=2))
        for b, (cands, hyps) in enumerate(zip(choices, ranked)):
            rows = torch.tensor([b] * len(cands))
            log_probs = force_decode_score(model, src[rows], mask[rows], cands).tolist()
            scores = [lp / length_penalty(len(c) + 1.0, alpha=0.6, kind="gnmt") for c, lp in zip(cands, log_probs)]
            best = sorted(range(len(cands)), key=lambda i: -log_probs[i])[:2]
            assert [h.tokens for h in hyps] == [cands[i] for i in best]
            assert [h.score for h in hyps] == pytest.approx([scores[i] for i in best], abs=1e-5)
            assert [h.log_prob for h in hyps] == pytest.approx([log_probs[i] for i in best], abs=1e-5)
        monkeypatch.setattr(forced, "CHOICE_NODES", 8)  # the sources split over passes: the same ranking
        again = choose_outputs(model, src, mask, choices,
                               SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt", n_best=2))
    assert [[h.tokens for h in hyps] for hyps in again] == [[h.tokens for h in hyps] for hyps in ranked]


def test_the_engine_chooses_among_given_outputs_apart_from_its_constrained_search() -> None:
    model, rng = make(1), random.Random(2)
    sources = [[rng.randint(7, V - 1) for _ in range(5)] for _ in range(4)]
    picks = ((9, 10, 11), (9, 12), (13, 9, 10))
    cons = [Wanted((((20, 21),),)), Wanted((((22,),),))]
    decode = DecodeConfig(search=SearchConfig(beam=4, alpha=0.6, max_len_a=1.0, max_len_b=10))
    engine = NativeEngine(model, "cpu")
    ranked = engine.choose_ids([sources[0], sources[2]], [picks, picks[:1]], decode, n_best=2)
    best = engine.choose_ids([sources[0]], [picks], decode, n_best=None)
    found = engine.search_ids([sources[1], sources[3]], decode, n_best=2, sentence_ids=[0, 1],
                              constraints=cons)  # type: ignore[arg-type]
    src, mask = collate_source(sources)
    with torch.inference_mode():
        chosen = choose_outputs(model, src[[0, 2]], mask[[0, 2]], [picks, picks[:1]],
                                SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt", n_best=2))
        searched = constrained_beam_search(model, src[[1, 3]], mask[[1, 3]], cons,
                                           SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt",
                                                          max_len_a=1.0, max_len_b=10, n_best=2,
                                                          forbid_unk=decode.search.forbid_unk, max_len_limit=63,
                                                          no_repeat_ngram_size=decode.search.no_repeat_ngram_size,
                                                          repetition_penalty=decode.search.repetition_penalty))
    assert ranked[0] == [(h.tokens, h.score) for h in chosen[0]] and len(ranked[0]) == 2
    assert [tokens for tokens, _ in ranked[1]] == [list(picks[0])]  # one candidate: the n-best holds it alone
    assert best == [ranked[0][:1]]  # without an n-best: the one best
    assert [[t for t, _ in hyps] for hyps in found] == [[h.tokens for h in hyps] for hyps in searched]


def test_a_swapped_word_keeps_its_punctuation_and_takes_the_case_it_stood_in() -> None:
    assert _swapped("Ein Mann, der schläft.", {1: ("Mann", ("Kerl", "Kerle"), ())}) == [
        "Ein Kerl, der schläft.", "Ein Kerle, der schläft."]
    assert _swapped("(Männer) und Männer.", {0: ("Männer", ("Kerle",), ()), 2: ("Männer", ("Kerle",), ())}) == [
        "(Kerle) und Kerle."]
    assert _swapped("Nothing here.", {}) == ["Nothing here."]
    assert _case_like("bloke", "Man", True) == "Bloke" and _case_like("bloke", "man", False) == "bloke"
    assert _case_like("Kerl", "MANN", False) == "KERL" and _case_like("Kerl", "Mann", True) == "Kerl"
    assert _case_like("bloke", "Man", False) == "bloke"  # a capital mid-sentence is the word's, not the term's


def test_swapping_offers_the_first_translation_with_each_term_in_place_of_the_models_word() -> None:
    g = parse_glossary(b"man\tKerl|Kerle\ndog\tVierbeiner\n", "t.tsv").for_pair("en", "de")
    tok = WordTokenizer()
    forms = ["Kerl", "Kerle", "Vierbeiner"]
    terms = TermConstraints(g, dict(zip(forms, tok.encode_tgt(forms))), first_pass="swap")
    lines = ["A man sleeps", "A man and a man", "A dog sleeps", "A man sleeps", "A man sleeps", "A man sleeps"]
    firsts = ["Ein Mann schläft.", "Ein Mann und ein Mann.", "Ein Kerl und ein Hund schlafen.", "Ein Kerl schläft.",
              "Es schläft.", "Ein Junge schläft."]
    # each target word's source word; the fifth output has no word for "man", the sixth only "Ein" (an article)
    aligned = [[1, 1, 2], [0, 1, 2, 3, 4], [1, 1, 1, 1, 1, 2], [1, 1, 2], [2, 2], [1, 0, 2]]
    alone = {"man": ("Mann",), "dog": ("Hund",)}
    asked: list[list[str]] = []

    def align(sources: list[str], targets: list[str]) -> list[list[int]]:
        asked.append(sources)
        return [aligned[lines.index(s) if s != "A man sleeps" else firsts.index(t)] for s, t in zip(sources, targets)]

    found, choices = swapping(terms, lines, firsts, tok, alone, align)  # type: ignore[arg-type]
    texts = [[tok.decode(c) for c in offered] for offered in choices]
    assert texts[0] == ["Ein Kerl schläft.", "Ein Kerle schläft."]
    assert texts[1] == ["Ein Kerl und ein Kerl.", "Ein Kerl und ein Kerle.", "Ein Kerle und ein Kerl.",
                        "Ein Kerle und ein Kerle."]  # every occurrence of the model's word
    assert texts[2] == ["Ein Kerl und ein Vierbeiner schlafen."]  # the word found by what "dog" alone gives
    assert texts[3] == ["Ein Kerl schläft."]  # the term already there: the first translation is the one choice
    assert texts[4] == [] and texts[5] == []  # no word to replace: the constrained search instead
    assert all(w.require for w in found) and found[4].avoid  # ... which avoids the model's word for the term
    assert asked == [["A man sleeps", "A man sleeps"]]  # only the lines the lemmas left without a word are aligned


def test_a_term_of_another_gender_brings_the_words_in_front_of_it_into_agreement() -> None:
    """Issue 72: with the term's gender and number in the glossary's third column, the determiner
    and adjectives before it are rewritten for it, in each case they could be, and only those
    candidates are offered (the model's score picks among cases); untagged terms swap the word alone."""
    f_sg, pl = parse_tag("f", "t"), parse_tag("pl", "t")
    assert _swapped("Ein junger Mann schläft.", {2: ("Mann", ("Person",), (f_sg,))}, "de") == [
        "Eine junge Person schläft."]
    assert _swapped("Er spielt mit einem Mann.", {4: ("Mann", ("Person", "Personen"), (f_sg, pl))}, "de") == [
        "Er spielt mit einer Person.", "Er spielt mit Personen."]  # no plural of "ein": it goes
    # "der" may be nominative masculine or dative/genitive feminine: one variant a case, for a neuter term
    assert _swapped("Ein Mann in der Straße.", {4: ("Straße", ("Gässchen",), (parse_tag("n", "t"),))}, "de") == [
        "Ein Mann in das Gässchen.", "Ein Mann in dem Gässchen.", "Ein Mann in des Gässchen."]
    # a slot's phrase stops at the slot before it and at punctuation; no table for the language: the word alone
    assert _swapped("Ein Mann, ein Mann.", {1: ("Mann", ("Person",), (f_sg,)), 3: ("Mann", ("Person",), (f_sg,))},
                    "de") == ["Eine Person, eine Person."]
    assert _swapped("Un homme dort.", {1: ("homme", ("personne",), (f_sg,))}, "fr") == ["Un personne dort."]


@pytest.mark.requires("simplemma")
def test_a_plural_source_word_gets_a_plural_form_where_the_glossary_tags_them() -> None:
    g = parse_glossary(b"man\tPerson|Personen\tf|pl\n", "t.tsv").for_pair("en", "de")
    tok = WordTokenizer()
    forms = ["Person", "Personen"]
    terms = TermConstraints(g, dict(zip(forms, tok.encode_tgt(forms))), first_pass="swap", language="de")
    lines = ["A man sleeps", "Two men sleep", "The man and the men"]
    firsts = ["Ein Mann schläft.", "Zwei Männer schlafen.", "Der Mann und die Männer."]
    _, choices = swapping(terms, lines, firsts, tok, {"man": ("Mann",)},  # type: ignore[arg-type]
                          lambda sources, targets: pytest.fail("aligned although the lemma found the word"))
    assert [tok.decode(c) for c in choices[0]] == ["Eine Person schläft."]  # singular, and its article agrees
    assert [tok.decode(c) for c in choices[1]] == ["Zwei Personen schlafen."]  # "Zwei" is no determiner here
    # one singular and one plural occurrence: the number is not known, both forms are offered at each
    assert "Die Person und die Personen." in [tok.decode(c) for c in choices[2]]


@pytest.mark.requires("simplemma")
def test_an_inflected_word_of_the_model_is_found_by_its_lemma() -> None:
    g = parse_glossary(b"man\tKerl|Kerle\n", "t.tsv").for_pair("en", "de")
    tok = WordTokenizer()
    terms = TermConstraints(g, dict(zip(["Kerl", "Kerle"], tok.encode_tgt(["Kerl", "Kerle"]))), first_pass="swap",
                            language="de")
    # attention put nothing on "Männer": what "man" alone gives ("Mann") finds it by its lemma
    _, choices = swapping(terms, ["Three men sit"], ["Drei Männer sitzen."], tok,  # type: ignore[arg-type]
                          {"man": ("Mann",)},
                          lambda sources, targets: pytest.fail("aligned although the lemma found the word"))
    assert [tok.decode(c) for c in choices[0]] == ["Drei Kerl sitzen.", "Drei Kerle sitzen."]


def test_a_one_word_term_translated_alone_is_aligned_without_the_model() -> None:
    calls: list[list[str]] = []

    def align(sources: list[str], targets: list[str]) -> list[list[int]]:
        calls.append(sources)
        return [[1] * len(t.split()) for t in targets]

    assert alone_alignments(["man", "fire truck"], ["Ein Mann", "Das rote Feuerwehrauto"], align) == [
        [0, 0], [1, 1, 1]]
    assert calls == [["fire truck"]]


def test_an_article_aligned_with_the_term_is_never_swapped_and_unspaced_targets_keep_the_search() -> None:
    g = parse_glossary(b"Fahrrad\tcycle|cycles\n", "t.tsv").for_pair("de", "en")
    tok = WordTokenizer()
    terms = TermConstraints(g, dict(zip(["cycle", "cycles"], tok.encode_tgt(["cycle", "cycles"]))), first_pass="swap")
    # the model said "bike", its translations alone "bicycle": attention put "Fahrrad" on "a" alone
    found, choices = swapping(terms, ["Er fährt Fahrrad"], ["He rides a bike."],  # type: ignore[arg-type]
                              tok, {"Fahrrad": ("bicycle",)}, lambda sources, targets: [[0, 1, 2, 1]])
    assert not choices[0] and found[0].require  # no swap of "a": the constrained search
    found, choices = swapping(terms, ["Er fährt Fahrrad"], ["He rides a bike."],  # type: ignore[arg-type]
                              tok, {"Fahrrad": ("bicycle", "bike")},
                              lambda sources, targets: pytest.fail("aligned though an alone word was found"))
    assert [tok.decode(c) for c in choices[0]] == ["He rides a cycle.", "He rides a cycles."]
    ja = TermConstraints(g, terms.pieces, first_pass="swap", language="ja")
    found, choices = swapping(ja, ["Er fährt Fahrrad"], ["彼は自転車に乗る。"], tok,  # type: ignore[arg-type]
                              {"Fahrrad": ("自転車",)}, lambda sources, targets: [[2]])
    assert not choices[0] and found[0].require  # a whole clause is one "word": never swapped


def test_the_most_probable_candidate_wins_where_the_length_penalty_would_pick_a_longer_one() -> None:
    """A strong length penalty ranks a longer candidate first by score; the choice follows log-prob."""
    model = make(0)
    src, mask = collate_source([[7, 8, 9, 10]])
    cands = [[9], [9, 12, 13, 14, 15, 16, 17, 18]]
    with torch.inference_mode():
        log_probs = force_decode_score(model, src[[0, 0]], mask[[0, 0]], cands).tolist()
        (hyps,) = choose_outputs(model, src, mask, [cands],
                                 SearchSettings(beam=4, alpha=3.0, length_penalty="average", n_best=2))
    scores = [lp / length_penalty(len(c) + 1.0, alpha=3.0, kind="average") for c, lp in zip(cands, log_probs)]
    assert (log_probs[0] > log_probs[1]) != (scores[0] > scores[1])  # the two rankings disagree here
    assert hyps[0].tokens == cands[max(range(2), key=lambda i: log_probs[i])]
