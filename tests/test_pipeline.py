"""The one translation path (`mt.decode.pipeline`): the stages run once, in one order, whoever
drives them; the path asks for each piece of model work as a step; a glossary's terms are found
once per sentence and travel with it.

A stand-in search on text (the loop rule of tests/test_loop_retry.py's `LoopEngine`) makes every
step exact; the random checkpoint gives the real tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.config import DecodeConfig
from mt.decode.pipeline import Found, Offload, Search, drive, translate_steps
from mt.decode.repeats import RETRY_NGRAM
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


def test_the_stages_run_once_in_order(random_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    finds = count_finds(monkeypatch)
    terms = TermConstraints(parse_glossary("gà\tgà\n".encode(), "t.tsv"), {"gà": tok.encode_tgt(["gà"])[0]},
                            first_pass="swap")
    decode = DecodeConfig(beam=2, no_repeat_ngram_size=3, ending=False)
    texts = ["Ich gà bé. Er sagt {0} bé dà", "éa bé"]
    steps = translate_steps(texts, tok, decode, max_positions=256, segmenter=segmenter_for("en"), terms=terms)
    log: list[tuple] = []

    def search(step: Search) -> list[Found]:
        strict = step.decode.no_repeat_ngram_size == RETRY_NGRAM
        log.append(("search", step.lines, step.wanted is not None, strict))
        return [Found([(looping(line, strict), -1.0)], 0.5) for line in step.lines]

    def aligner(sources: list[str], targets: list[str]) -> list[list[int]]:
        log.append(("align", list(sources)))
        return [list(range(len(t.split()))) for t in targets]

    def run_offload(step: Offload):  # noqa: ANN202
        log.append(("offload",))
        return step.run(aligner)

    answer, done = None, None
    while done is None:
        try:
            step = steps.send(answer)
        except StopIteration as stop:
            done = stop.value
            break
        answer = search(step) if isinstance(step, Search) else run_offload(step)
    kinds = [entry[0] for entry in log if entry[0] != "align"]
    # constrain (the held sentence's own search, the term alone, the choice), search, retry, render
    assert kinds == ["search", "search", "offload", "search", "search", "offload"]
    assert log[0][1] == ["Ich gà bé."] and log[1][1] == ["gà"]
    main, retried = [entry for entry in log if entry[0] == "search"][2:]
    assert main[1] == ["Ich gà bé.", "Er sagt bé dà", "éa bé"]  # what the model reads: the span taken out
    assert main[2] and not retried[2] and retried[3]  # the constraints go with the search, not with the retry
    assert retried[1] == [main[1][1]]  # only the looping sentence without a term is searched again
    assert [s.terms for s in done.segments][1:] == [[], []] and done.segments[0].terms[0].source == "gà"
    assert done.best()[1] == "éa bé"
    assert [finds.count(line) for line in main[1]] == [1, 1, 1]  # each sentence's terms found once
    assert "{0}" in done.best()[0] and done.best()[0].endswith("dà dà dà")  # span back; the retry looped worse: kept


def test_drive_gives_what_translate_texts_gives(random_ckpt: Path) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    decode, seg = DecodeConfig(beam=1, no_repeat_ngram_size=3, ending=False), segmenter_for("en")
    texts = ["éa bé", "éa gà", "bé dà", "gà bé. éa bé"]
    engine = LoopEngine(tok)
    expected = translate_texts(engine, tok, texts, decode, device="cpu", segmenter=seg)

    def search(step: Search) -> list[Found]:
        strict = step.decode.no_repeat_ngram_size == RETRY_NGRAM
        return [Found([(looping(line, strict), -1.0)]) for line in step.lines]

    done = drive(translate_steps(texts, tok, decode, max_positions=256, segmenter=seg), search, None)
    assert done.best() == expected == ["éa bé", "éa gà", "bé dà dà dà dà", "gà bé. éa bé"]


def test_a_glossary_is_matched_once_per_sentence(random_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = load_model([random_ckpt], "cpu").tokenizer
    terms = TermConstraints(parse_glossary("gà\tgà\nbé\tbé\n".encode(), "t.tsv"),
                            {"gà": tok.encode_tgt(["gà"])[0], "bé": tok.encode_tgt(["bé"])[0]})
    calls = count_finds(monkeypatch)
    texts = ["éa gà. bé dà", "éa bé", "dà dà"]
    out = translate_texts(LoopEngine(tok), tok, texts, DecodeConfig(beam=2, ending=False), device="cpu",
                          segmenter=segmenter_for("en"), glossary=terms)
    assert len(out) == 3
    assert sorted(calls) == sorted(["éa gà.", "bé dà", "éa bé", "dà dà"])  # each sentence once, retry included
