"""Two rules of `mt.text.protect` for text as people send it: a segment without final punctuation
("Save changes", "Visit {url}") gets no full stop the model added (`decode.ending`), and the word a
translation opens with after a span that opens the segment ("2 blond girls") loses the capital the
model gave a sentence's first word unless the target vocabulary writes it capitalised
(`mt.decode.protected.truecaser`). Golden cases derived by hand, one property over any input, and
the wiring through `translate_texts`, the server's rendering and the flags."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mt.config import DecodeConfig, TextConfig, TokenizerConfig
from mt.data.tokenizer import train_sentencepiece
from mt.decode.protected import prepare_segments, render_nbest, truecaser
from mt.decode.translate import translate_texts
from mt.deploy.loading import load_model
from mt.text.protect import FULL_STOPS, KINDS, prepare, render_all
from mt.text.segment import segmenter_for
from tests.test_protect import CopyEngine

ONE = lambda words: [1] * len(words)  # noqa: E731  (pieces per word: case handling without a model)
NOUN = lambda word: word in ("Mädchen", "Hunde")  # noqa: E731  (a target language that capitalises its nouns)


def ends(segment: str, translation: str, alignment: list[int] | None = None, *, ending: bool = True) -> str:
    return prepare(segment, KINDS, True, ONE, ending).render(translation, alignment)


def test_a_bare_segment_gets_no_full_stop_the_model_added() -> None:
    assert ends("Save changes", "Änderungen speichern.") == "Änderungen speichern"
    assert ends("Two dogs in the snow", "Zwei Hunde im Schnee.") == "Zwei Hunde im Schnee"
    assert ends("Version 2", "Version.") == "Version 2"  # a number ends it (a span: the model reads "Version")
    assert ends("Save changes", "変更を保存。") == "変更を保存" and ends("Save changes", "変更を保存．") == "変更を保存"
    assert ends("Save changes", "Änderungen speichern .") == "Änderungen speichern"  # a full stop of its own
    assert ends("Save changes", "Änderungen speichern. ") == "Änderungen speichern "  # only the stop goes
    # what the source ends with stays the model's: '.', and a closing bracket or quote
    for source in ("Save changes.", "Save (changes)", 'Say "cheese"'):
        assert ends(source, "Änderungen speichern.") == "Änderungen speichern."
    # the source's own mark ('?', '!', ':', '...', '…') ends the translation (tests/test_ui_strings.py)
    assert ends("Is it saved?", "Ist es gespeichert.") == "Ist es gespeichert?"
    # only a single full stop: an ellipsis, '?', '!' and an abbreviation's period stay
    for kept in ("Wird geladen...", "Wird geladen…", "Wird geladen….", "Gespeichert?", "Gespeichert!", "Zum Beispiel z.B.",
                 "In den U.S.", "Siehe www.example.org.", "Preis 3.5.", "Fertig。。", "."):
        assert ends("Loading now", kept) == kept, kept
    # nothing to do: an empty translation, one without a final stop
    assert ends("Save changes", "") == "" and ends("Save changes", "Speichern") == "Speichern"


def test_the_full_stop_placement_moves_past_a_span_goes_too() -> None:
    assert ends("Visit {url}", "Besuchen Sie.") == "Besuchen Sie {url}"
    assert ends("Visit {url}", "Besuchen Sie.", ending=False) == "Besuchen Sie {url}."
    assert ends("Visit https://example.org/a", "Besuchen Sie.") == "Besuchen Sie https://example.org/a"
    # source words: Click0 to1 see2 now3; the translation moves "see" to the end
    translation, alignment = "Klicken Sie, um jetzt zu sehen.", [0, 0, 1, 3, 2, 2]
    assert ends("Click {0} to see {1} now", translation, alignment) == "Klicken Sie {0}, um jetzt zu {1} sehen"
    assert ends("Click {0} to see {1} now", translation, alignment, ending=False) == \
        "Klicken Sie {0}, um jetzt zu {1} sehen."
    assert ends("Click {0} to see {1}", "Klicken Sie, um zu sehen.", [0, 0, 1, 2, 2]) == \
        "Klicken Sie {0}, um zu sehen {1}"
    assert ends("Write to <x>.", "Schreiben Sie an.") == "Schreiben Sie an <x>."  # the source's own full stop
    assert ends("{0} %s", "x.") == "{0} %s"  # nothing but spans: not translated, as before
    # the spans stay each exactly once wherever the words go
    out = ends("Click {0} to see {1}", "a b c d e.")
    assert out.count("{0}") == out.count("{1}") == 1 and not out.endswith(".")


def test_an_all_caps_or_title_line_without_punctuation() -> None:
    assert ends("SAVE CHANGES", "Änderungen speichern.") == "ÄNDERUNGEN SPEICHERN"
    assert ends("SAVE CHANGES", "Änderungen speichern.", ending=False) == "ÄNDERUNGEN SPEICHERN."
    assert ends("Save All Open Files", "alle offenen Dateien speichern.") == "Alle Offenen Dateien Speichern"
    assert ends("SAVE CHANGES TO {file}", "änderungen speichern in.") == "ÄNDERUNGEN SPEICHERN IN {file}"


def test_the_switch_and_the_cheap_fast_path() -> None:
    p = prepare("Save changes", KINDS, True, ONE, True)
    assert p.bare and not p.identity and not p.needs_alignment
    assert p.text is p.source and (p.spans, p.slots, p.word_slots, p.style, p.loud) == ((), (), (), "none", ())
    off = prepare("Save changes", KINDS, True, ONE, False)
    assert off.identity and off == prepare("Save changes", KINDS, True, ONE)  # ending is off unless asked
    assert off.render(" Änderungen  speichern. ") == " Änderungen  speichern. "
    # only the ending applies: the translation as it came, spaces and all, without its final stop
    assert p.render(" Änderungen  speichern. ") == " Änderungen  speichern "
    assert DecodeConfig().text.ending and DecodeConfig().text.case


@pytest.mark.parametrize("segment", ["Save changes.", "the cat sat on the mat.", "Is it saved?!", "",
                                     "Ein Mädchen (rechts).", "Warte….", "Oh (really?)"])
@given(translation=st.text(max_size=40))
@settings(max_examples=25, deadline=None)
def test_a_segment_where_nothing_applies_is_byte_identical(segment: str, translation: str) -> None:
    p = prepare(segment, KINDS, True, ONE, True)
    assert p.identity and p.text == segment and p.render(translation, truecase=NOUN) == translation


WORDS = ["save", "Save", "SAVE", "changes", "dogs", "z.B.", "U.S.", "2", "3.5", "{0}", "%s", "{url}",
         "https://example.org/a", "@bob", "`ls`", "...", "…", ".", "?", "!", ",", "。", "．", "Mädchen", "blond"]
SEGMENTS = st.lists(st.sampled_from(WORDS) | st.text(max_size=6), max_size=8).map(" ".join) | st.text(max_size=30)
TRANSLATIONS = (st.lists(st.sampled_from(WORDS) | st.text(max_size=6), max_size=8).map(" ".join)
                | st.text(max_size=30)).flatmap(lambda t: st.sampled_from(["", ".", " .", "...", "。", "．", ". ", "!"])
                                                .map(lambda end: t + end))


@given(segment=SEGMENTS, translation=TRANSLATIONS, case=st.booleans(), data=st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_ending_only_ever_removes_one_final_full_stop(segment: str, translation: str, case: bool,
                                                          data: st.DataObject) -> None:
    """With `ending` on, the output is the output with it off, or that with one full stop (and the
    spacing around it) taken out, and only for a bare segment whose translation ended with one."""
    n = len(translation.split())
    alignment = data.draw(st.none() | st.lists(st.integers(-1, 8), min_size=n, max_size=n))
    check_ending(segment, translation, case, alignment)


@pytest.mark.parametrize(("segment", "translation"), [("/0\x1b²", "save , ."), ("2 save", "A。")])  # found by hypothesis
def test_the_ending_found_cases(segment: str, translation: str) -> None:
    check_ending(segment, translation, True, None)


def check_ending(segment: str, translation: str, case: bool, alignment: list[int] | None) -> None:
    """The ending rule's invariant for one rendering (see the property test above)."""
    keeps = lambda word: len(word) % 2 == 0  # noqa: E731  (any answer: the same on both sides)
    off = prepare(segment, KINDS, case, ONE, False).render(translation, alignment, truecase=keeps)
    on = prepare(segment, KINDS, case, ONE, True).render(translation, alignment, truecase=keeps)
    mark = prepare(segment, KINDS, case, ONE, True).mark
    if on != off and mark:  # the source's own final mark ends it instead (tests/test_ui_strings.py)
        assert on.rstrip().endswith(mark) and on.rstrip().rstrip(".:;,!?…。．") == off.rstrip().rstrip(".:;,!?…。．")
    elif on != off:
        assert prepare(segment, KINDS, case, ONE, True).bare and translation.rstrip()[-1:] in FULL_STOPS
        # one full stop out, and at most the spacing around where it stood changed ('save 2 \x080' -> '0 2.0'
        # becomes '0 2 0': two spans that the moved full stop kept apart stay apart), or the sentence
        # punctuation it left at the end put after the last span, where it goes ('save 2' translated
        # 'save ... .': 'save ... 2.' off, 'save 2...' on; '/0' translated 'save , .': 'save ,0.' off,
        # 'save 0,' on)
        squeeze = lambda text: "".join(text.split())  # noqa: E731
        assert any(off[i] in FULL_STOPS and (squeeze(on) == squeeze(off[:i] + off[i + 1:]) or sorted(squeeze(on))
                                             == sorted(squeeze(off[:i] + off[i + 1:])) and on[-1:] in ".…!?,;:")
                   for i in range(len(off))), (off, on)


def test_a_word_after_an_opening_span_loses_the_first_words_capital() -> None:
    p = prepare("2 blond girls are running.", KINDS, True, ONE, True)
    assert p.text == "blond girls are running." and p.slots[0] == ""
    assert p.render("Blonde Mädchen rennen.", truecase=NOUN) == "2 blonde Mädchen rennen."
    assert p.render("Mädchen rennen.", truecase=NOUN) == "2 Mädchen rennen."  # a noun keeps its capital
    assert p.render("Blonde Mädchen rennen.") == "2 Blonde Mädchen rennen."  # no truecaser: as the model wrote it
    assert p.render("Zwei blonde Mädchen rennen.", [-1, 0, 1, 3], truecase=NOUN) == "2 zwei blonde Mädchen rennen."
    assert p.render("USB-Sticks rennen.", truecase=NOUN) == "2 USB-Sticks rennen."  # capitals: an acronym
    # the source word after the span starts upper case, or a word opens the segment: left alone
    assert prepare("2 Blond girls", KINDS, True, ONE).render("Blonde Mädchen", truecase=NOUN) == "2 Blonde Mädchen"
    assert prepare("Look: 2 blond girls", KINDS, True, ONE).render("Schau: Blonde Mädchen", truecase=NOUN) == \
        "Schau: 2 Blonde Mädchen"
    # several spans open it, punctuation in between; an ALL CAPS line keeps its style
    p = prepare("{0} %s: delete files", KINDS, True, ONE)
    assert p.render(": Dateien löschen", truecase=NOUN) == "{0} %s: dateien löschen"
    assert p.render(": Hunde löschen", truecase=NOUN) == "{0} %s: Hunde löschen"
    assert prepare("2 BLOND GIRLS", KINDS, True, ONE).render("blonde Mädchen", truecase=NOUN) == "2 BLONDE MÄDCHEN"
    # render_all hands the truecaser to every segment
    prepared = [prepare(s, KINDS, True, ONE, True) for s in ("2 blond girls", "Save changes.")]
    assert render_all(prepared, ["Blonde Mädchen.", "Speichern."], None, truecase=NOUN) == \
        ["2 blonde Mädchen", "Speichern."]


def test_the_truecaser_counts_the_target_vocabularys_pieces() -> None:
    """A tiny real sentencepiece model of German text: nouns written capitalised, adjectives and
    verbs lower case; the casing the corpus writes is the one spelt in fewer pieces."""
    rng = random.Random(0)
    lines = [f"{rng.choice(['Zwei', 'Drei', 'Die'])} {rng.choice(['blonde', 'kleine', 'junge'])} "
             f"{rng.choice(['Mädchen', 'Hunde', 'Kinder'])} {rng.choice(['rennen', 'spielen'])} im Schnee."
             for _ in range(500)]
    tok = train_sentencepiece(lines, lines, TokenizerConfig(type="bpe", vocab_size=150, byte_fallback=False,
                                                            hard_vocab_limit=False))
    pieces = lambda word: len(tok.encode_tgt([word])[0])  # noqa: E731
    assert pieces("Mädchen") < pieces("mädchen") and pieces("blonde") < pieces("Blonde")
    keeps = truecaser(tok)
    assert keeps("Mädchen") and keeps("Hunde") and not keeps("Blonde") and not keeps("Rennen")
    assert keeps("Xq")  # a word the vocabulary spells no better either way: a tie keeps the capital
    p = prepare("2 blond girls are running", KINDS, True, ONE, True)
    assert p.render("Blonde Mädchen rennen.", truecase=keeps) == "2 blonde Mädchen rennen"
    asked: list[list[str]] = []


    class Spy:
        def encode_tgt(self, words: list[str]) -> list[list[int]]:
            asked.append(words)
            return tok.encode_tgt(words)

    spy = Spy()
    found = [[("Blonde Mädchen.", -1.0), ("Mädchen.", -2.0)], [("Gut.", -1.0)]]
    prepared = [p, prepare("fine", KINDS, True, ONE, True)]
    assert render_nbest(prepared, found, None, truecase=truecaser(spy)) == \
        [[("2 blonde Mädchen", -1.0), ("2 Mädchen", -2.0)], [("Gut", -1.0)]]
    assert asked == [["Blonde", "blonde"], ["Mädchen", "mädchen"]]  # only where the rule applies


class FullStopEngine(CopyEngine):
    """A model that copies what it reads and ends every sentence with a full stop, capitalised."""

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None, constraints=None, glue=()):
        texts = self.tokenizer.decode_pieces("src", [list(ids) for ids in src_ids])
        texts = [t[:1].upper() + t[1:] + ("" if t.endswith(".") else ".") for t in texts]
        return [[(ids, 0.0)] * (n_best or 1) for ids in self.tokenizer.encode_tgt(texts)]


def test_translate_texts_and_the_server_apply_both_rules(random_ckpt: Path) -> None:
    loaded = load_model([random_ckpt], "cpu")
    tok, seg = loaded.tokenizer, segmenter_for("en")
    engine, decode = FullStopEngine(tok), dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=1))
    # the tiny vocabulary holds no capitals: 'É' is two byte pieces, 'é' one
    assert not truecaser(tok)("Éa") and truecaser(tok)("Gà")  # a tie ('G' one byte, 'g' one piece) keeps it
    texts = ["éa gà", "Dà bé. Éa gà", "{0} éa gà", "éa {0}", "éa gà."]
    assert translate_texts(engine, tok, texts, decode, device="cpu", segmenter=seg) == \
        ["Éa gà", "Dà bé. Éa gà", "{0} éa gà", "Éa {0}", "Éa gà."]
    off = dataclasses.replace(decode, text=dataclasses.replace(decode.text, ending=False))
    assert translate_texts(engine, tok, texts, off, device="cpu", segmenter=seg) == \
        ["Éa gà.", "Dà bé. Éa gà.", "{0} éa gà.", "Éa {0}.", "Éa gà."]


def test_the_render_stage_applies_both_rules(random_ckpt: Path) -> None:
    """The path's render stage (what `mt translate` and every server route run): the ending and
    the span rules on every alternative, nothing asked of the model where no rule applies."""
    from mt.decode.pipeline import Segment, drive, render
    from mt.decode.steps import Found

    tok = load_model([random_ckpt], "cpu").tokenizer

    def rendered(prepared: list, hyps: list) -> list:
        records = [Segment(p, 0, found=Found(h)) for p, h in zip(prepared, hyps)]
        drive(render(records, tok), lambda search: [], None)
        return [r.rendered for r in records]

    prepared = prepare_segments(["{0} éa gà", "bé gà", "bé gà."], tok, DecodeConfig())
    hyps = [[("Éa gà.", -1.0)], [("Bé gà.", -1.0), ("Gà…", -2.0)], [("Bé gà.", -1.0)]]
    assert rendered(prepared, hyps) == [[("{0} éa gà", -1.0)], [("Bé gà", -1.0), ("Gà…", -2.0)], [("Bé gà.", -1.0)]]
    off = prepare_segments(["bé gà"], tok, DecodeConfig(text=TextConfig(ending=False)))
    assert rendered(off, [[("Bé gà.", -1.0)]]) == [[("Bé gà.", -1.0)]]


def test_the_ending_flags() -> None:
    import typer.main

    from mt.cli import app
    from mt.decode.overrides import DecodeOverrides, apply_overrides
    from mt.serve.model import server_decode
    from mt.serve.settings import ServeSettings

    decode = DecodeConfig()
    assert apply_overrides(decode, DecodeOverrides()).text.ending
    assert not apply_overrides(decode, DecodeOverrides(ending=False)).text.ending
    translate = typer.main.get_command(app).commands["translate"]  # type: ignore[attr-defined]
    assert any("--no-ending" in (param.secondary_opts or []) for param in translate.params)
    flags = {"api_keys": None, "cors_origins": []}
    assert ServeSettings.from_flags(**flags).ending is None  # the checkpoint's decode.ending
    from mt.deploy.tiny import tiny_config

    assert server_decode(ServeSettings.from_flags(**flags), tiny_config())[0].text.ending
    assert not server_decode(ServeSettings.from_flags(**flags, ending=False), tiny_config())[0].text.ending
