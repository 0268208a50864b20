"""The one translation path (`mt.decode.pipeline`): the stages run once, in one order, whoever
drives them; the path asks for each piece of model work as a step; a glossary's terms are found
once per sentence and travel with it.

A stand-in search on text (the loop rule of tests/test_loop_retry.py's `LoopEngine`) makes every
step exact; the random checkpoint gives the real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.config import DecodeConfig, SearchConfig, TextConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.pipeline import Translated, drive, translate_steps
from mt.decode.repeats import RETRY_NGRAM
from mt.decode.steps import Choose, Found, Search, Step, Steps
from mt.decode.terms import TermConstraints
from mt.decode.translate import translate_texts
from mt.deploy.loading import load_model
from mt.text.glossary import Glossary, parse_glossary
from mt.text.segment import segmenter_for
from tests.test_loop_retry import LoopEngine


def count_finds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sentences `Glossary.find` is asked about from now on (the one way terms are matched)."""
    calls: list[str] = []
    find = Glossary.find

    def counted(self: Glossary, sentence: str):  # noqa: ANN202
        calls.append(sentence)
        return find(self, sentence)

    monkeypatch.setattr(Glossary, "find", counted)
    return calls


def looping(line: str, strict: bool) -> str:
    """`LoopEngine`'s rule on text: 'dà' loops under any guard, 'gà' unless every repeat is banned."""
    if "dà" in line.split():
        return line + " dà" * (5 if strict else 3)
    return line + (" gà" * 4 if "gà" in line.split() and not strict else "")


def run_logged(steps: Steps[Translated], tok: Tokenizer, log: list[tuple]) -> Translated:
    """The path run with the stand-in search (`looping`), a choice that keeps each line's first
    candidate and an aligner by position, each piece of model work logged: ("search", lines, with
    constraints, strict), ("choose", lines), ("offload",), ("align", sources)."""

    def search(step: Search) -> list[Found]:
        strict = step.decode.search.no_repeat_ngram_size == RETRY_NGRAM
        log.append(("search", step.lines, step.wanted is not None, strict))
        return [Found([(looping(line, strict), -1.0)], 0.5) for line in step.lines]

    def choose(step: Choose) -> list[Found]:
        log.append(("choose", step.lines))
        return [Found([(tok.decode_tgt([list(offered[0])])[0], -1.0)], 0.5) for offered in step.choices]

    def aligner(sources: list[str], targets: list[str]) -> list[list[int]]:
        log.append(("align", list(sources)))
        return [list(range(len(t.split()))) for t in targets]

    def run(step: Step) -> object:
        if isinstance(step, Search):
            return search(step)
        if isinstance(step, Choose):
            return choose(step)
        log.append(("offload",))
        return step.run(aligner)

    answer: object = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as stop:
            return stop.value
        answer = run(step)


def swap_terms(tok: Tokenizer, term: str = "gà") -> TermConstraints:
    """A one-term glossary (`term` kept as it is) with its first pass, "swap"."""
    return TermConstraints(parse_glossary(f"{term}\t{term}\n".encode(), "t.tsv"),
                           {term: tok.encode_tgt([term])[0]}, first_pass="swap")


def test_the_stages_run_once_in_order(random_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    finds = count_finds(monkeypatch)
    decode = DecodeConfig(search=SearchConfig(beam=2, no_repeat_ngram_size=3), text=TextConfig(ending=False))
    texts = ["Ich gà bé. Er sagt {0} bé dà", "éa bé"]
    log: list[tuple] = []
    done = run_logged(translate_steps(texts, tok, decode, max_positions=256, segmenter=segmenter_for("en"),
                                      terms=swap_terms(tok)), tok, log)
    kinds = [entry[0] for entry in log if entry[0] != "align"]
    # constrain (the held sentence's own search, the term alone, the swap), search, choose, retry, render
    assert kinds == ["search", "search", "offload", "search", "choose", "search", "offload"]
    assert log[0][1] == ["Ich gà bé."] and log[1][1] == ["gà"]
    main, retried = [entry for entry in log if entry[0] == "search"][2:]
    (chosen,) = [entry for entry in log if entry[0] == "choose"]
    assert main[1] == ["Er sagt bé dà", "éa bé"]  # what the model reads: the span taken out
    assert chosen[1] == ["Ich gà bé."]  # the sentence with outputs to choose from: chosen, not searched
    assert main[2] and not retried[2] and retried[3]  # the constraints go with the search, not with the retry
    assert retried[1] == [main[1][0]]  # only the looping sentence without a term is searched again
    assert [s.terms for s in done.segments][1:] == [[], []] and done.segments[0].terms[0].source == "gà"
    assert done.segments[0].choices and not any(s.choices for s in done.segments[1:])
    assert done.best()[1] == "éa bé"
    assert [finds.count(line) for line in [*chosen[1], *main[1]]] == [1, 1, 1]  # each one's terms found once
    assert "{0}" in done.best()[0] and done.best()[0].endswith("dà dà dà")  # span back; the retry looped worse: kept


def test_a_term_sentence_is_chosen_in_a_step_of_its_own_after_two_passes_at_most(random_ckpt: Path) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    decode = DecodeConfig(search=SearchConfig(beam=2), text=TextConfig(ending=False))
    line = "Ich bé éa."  # no loop: no retry
    log: list[tuple] = []
    done = run_logged(translate_steps([line], tok, decode, max_positions=256, segmenter=None,
                                      terms=swap_terms(tok, "bé")), tok, log)
    plain: list[tuple] = []
    run_logged(translate_steps([line], tok, decode, max_positions=256, segmenter=None), tok, plain)
    reading = [entry[0] for entry in log if entry[0] != "offload" and line in entry[1]]  # passes reading it
    assert [entry[0] for entry in plain if entry[0] != "offload"] == ["search"]
    assert reading[0] == "search" and reading[-1] == "choose" and len(reading) - 1 <= 2  # plain search + <= 2
    assert not any(entry[0] == "search" and line in entry[1] for entry in log[reading.index("choose"):])
    assert done.best() == [line]  # the stand-in writes the source back: the term is already in place


def test_drive_gives_what_translate_texts_gives(random_ckpt: Path) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    decode, seg = DecodeConfig(search=SearchConfig(beam=1, no_repeat_ngram_size=3), text=TextConfig(ending=False)), segmenter_for("en")
    texts = ["éa bé", "éa gà", "bé dà", "gà bé. éa bé"]
    engine = LoopEngine(tok)
    expected = translate_texts(engine, tok, texts, decode, device="cpu", segmenter=seg)

    def search(step: Search) -> list[Found]:
        strict = step.decode.search.no_repeat_ngram_size == RETRY_NGRAM
        return [Found([(looping(line, strict), -1.0)]) for line in step.lines]

    done = drive(translate_steps(texts, tok, decode, max_positions=256, segmenter=seg), search, None)
    assert done.best() == expected == ["éa bé", "éa gà", "bé dà dà dà dà", "gà bé. éa bé"]


def test_a_glossary_is_matched_once_per_sentence(random_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    terms = TermConstraints(parse_glossary("gà\tgà\nbé\tbé\n".encode(), "t.tsv"),
                            {"gà": tok.encode_tgt(["gà"])[0], "bé": tok.encode_tgt(["bé"])[0]})
    calls = count_finds(monkeypatch)
    texts = ["éa gà. bé dà", "éa bé", "dà dà"]
    out = translate_texts(LoopEngine(tok), tok, texts, DecodeConfig(search=SearchConfig(beam=2), text=TextConfig(ending=False)), device="cpu",
                          segmenter=segmenter_for("en"), glossary=terms)
    assert len(out) == 3
    assert sorted(calls) == sorted(["éa gà.", "bé dà", "éa bé", "dà dà"])  # each sentence once, retry included


def test_a_searched_term_with_a_grammar_is_brought_into_agreement_in_one_choice(random_ckpt: Path) -> None:
    """The agree stage (issue 72): a line searched with its term (here with no first pass) whose
    term has a gender and number gets its output offered again with the determiner in front in
    agreement, in one `Choose` after the search; the same glossary without its grammar column
    takes no such step."""
    tok = load_model([random_ckpt], "cpu").tokenizer
    decode = DecodeConfig(search=SearchConfig(beam=2), text=TextConfig(ending=False))
    runs = {}
    for name, glossary in (("tagged", b"Person\tPerson|Personen\tf|pl\n"), ("untagged", b"Person\tPerson|Personen\n")):
        forms = ["Person", "Personen"]
        terms = TermConstraints(parse_glossary(glossary, "t.tsv"), dict(zip(forms, tok.encode_tgt(forms))),
                                language="de")
        log: list[tuple] = []
        done = run_logged(translate_steps(["Ein Person bé.", "éa bé"], tok, decode, max_positions=256,
                                          segmenter=None, terms=terms), tok, log)
        runs[name] = ([entry[:2] for entry in log if entry[0] != "offload"], done.best())
    assert runs["tagged"][0] == [("search", ["Ein Person bé.", "éa bé"]), ("choose", ["Ein Person bé."])]
    assert runs["tagged"][1] == ["Eine Person bé.", "éa bé"]  # the stand-in keeps the first offer
    assert runs["untagged"] == ([("search", ["Ein Person bé.", "éa bé"])], ["Ein Person bé.", "éa bé"])
