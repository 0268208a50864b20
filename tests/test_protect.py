"""Protected spans and case styles (mt.text.protect, mt.text.case, mt.decode.protected): every kind
found and put back verbatim exactly once where the alignment puts its words; what matches no kind
(an unknown style, an unbalanced brace) translated as text; a sentence where nothing applies
byte-identical to a translation without them; linear time on a 10,000-character line. The ending and
the word after an opening span: tests/test_endings.py."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from mt.config import DecodeConfig
from mt.decode.translate import translate_lines, translate_texts, translate_texts_nbest
from mt.deploy.loading import load_model
from mt.errors import MTError, MTWarning
from mt.text.case import case_style, restyle, sentence_case, shouted
from mt.text.protect import KINDS, drop_full_stop, find_spans, parse_kinds, prepare, span_links
from mt.text.segment import segmenter_for
from tests.support.scaling import assert_linear

SPANS = {  # a sentence per kind, with the span it must keep
    "placeholders": [("Hello %s, you have %d new messages.", ["%s", "%d"]),
                     ("Welcome back, %(name)s and %1$s!", ["%(name)s", "%1$s"]),
                     ("Click {0} to see {name} and {user.name}.", ["{0}", "{name}", "{user.name}"]),
                     ("Hi {{ user }}, your ${driver} and %{count} and :name and <user> are here.",
                      ["{{ user }}", "${driver}", "%{count}", ":name", "<user>"]),
                     ("Copy %.*s of %s used (%.0f%%) now.", ["%.*s", "%s", "%.0f", "%%"])],
    "urls": [("Visit https://example.org/dogs?a=1 to see more.", ["https://example.org/dogs?a=1"]),
             ("See www.example.com.", ["www.example.com"]),
             ("Read (https://en.wikipedia.org/wiki/Dog_(disambiguation)).",
              ["https://en.wikipedia.org/wiki/Dog_(disambiguation)"])],
    "emails": [("Write to support@example.co.uk today.", ["support@example.co.uk"])],
    "handles": [("Thanks @bob and @alice@mastodon.social for this.", ["@bob", "@alice@mastodon.social"])],
    "hashtags": [("A dog in the snow #winter #dogs2024 today.", ["#winter", "#dogs2024"])],
    "numbers": [("I paid 3.50 on 2024-01-31 at 10:30 for 1,000 apples, 50% off.",
                 ["3.50", "2024-01-31", "10:30", "1,000", "50%"]),
                # a unit written onto its number is part of it; a decade and an ordinal are words
                ("Icons of 16px and 512KiB at 3.5GHz, 2x faster than in the 1990s, the 3rd time.",
                 ["16px", "512KiB", "3.5GHz", "2x"])],
    "code": [("Run `ls -la` in the shell.", ["`ls -la`"])],
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_found_and_only_when_switched_on(kind: str) -> None:
    for sentence, expected in SPANS[kind]:
        assert [sentence[a:b] for a, b, _ in find_spans(sentence, KINDS)] == expected, sentence
        off = find_spans(sentence, [k for k in KINDS if k != kind])  # (a number inside a URL is still one)
        assert kind not in {k for _, _, k in off} and not {sentence[a:b] for a, b, _ in off} & set(expected)
    assert find_spans(SPANS[kind][0][0], []) == []


@pytest.mark.parametrize("text", ["An unbalanced {name here.", "A lone } brace and { another.",
                                  "{count, plural, one {# dog} other {# dogs}} are here.", "50 % of [[name]] and %%.",
                                  "Note: this is {not a placeholder} at all.", "3rd place and 10km away."])
def test_unknown_styles_and_unbalanced_braces_are_text(text: str) -> None:
    """Nothing of what matches no kind is lost: the model reads it as words, with case handling off
    every character is either in the text the model reads or in a span put back verbatim."""
    prepared = prepare(text, KINDS, False, lambda words: [1] * len(words))
    kept = prepared.text + "".join(span.text for span in prepared.spans)
    assert sorted(kept.replace(" ", "")) == sorted(text.replace(" ", ""))
    for unknown in ("{name here", "} brace and {", "{# dog}", "[[name]]", "{not a placeholder}", "3rd"):
        if unknown in text:
            assert unknown in prepared.text
    if "10km" in text:  # a unit written onto its number is kept with it (`UNITS`), not read as a word
        assert "10km" in [span.text for span in prepared.spans]


def test_spans_go_where_the_alignment_puts_their_words() -> None:
    one = lambda words: [1] * len(words)  # noqa: E731
    p = prepare("Click {0} to see {1} people on the beach.", KINDS, False, one)
    assert p.text == "Click to see people on the beach." and p.needs_alignment
    # source words: Click0 to1 see2 people3 on4 the5 beach.6; the translation moves "see" to the end
    translation = "Klicken Sie, um {x} Leute am Strand zu sehen."
    assert p.render("Klicken Sie, um Leute am Strand zu sehen.", [0, 0, 1, 3, 6, 6, 2, 2]) == \
        "Klicken Sie {0}, um {1} Leute am Strand zu sehen."
    assert "{x}" in translation  # the model's own text is never searched for spans
    # a full stop the source has after the span goes after it; no alignment needed there
    p = prepare("Contact us at support@example.com.", KINDS, False, one)
    assert p.text == "Contact us at." and not p.needs_alignment
    assert p.render("Kontaktieren Sie uns unter.") == "Kontaktieren Sie uns unter support@example.com."
    p = prepare("Five people stand in the snow %(name)s #StreetArt.", KINDS, False, one)
    assert p.render("Fünf Leute stehen im Schnee.") == "Fünf Leute stehen im Schnee %(name)s #StreetArt."
    p = prepare("Hello %s, you have %d new messages.", KINDS, False, one)
    assert p.text == "Hello, you have new messages."
    assert p.render("Hallo, du hast neue Nachrichten.", [0, 1, 2, 3, 4]) == "Hallo %s, du hast %d neue Nachrichten."
    # without an alignment (an export) the spans go in proportion, still each exactly once
    out = prepare("Click {0} to see {1} people.", KINDS, False, one).render("a b c d e f")
    assert out.count("{0}") == 1 and out.count("{1}") == 1 and out.index("{0}") < out.index("{1}")
    # a segment of nothing but spans is not translated at all
    p = prepare("{0} %s https://x.org", KINDS, False, one)
    assert p.text.strip() == "" and p.render("") == "{0} %s https://x.org"


def test_case_styles_and_the_model_truecaser() -> None:
    vocab = {"dogs": 1, "snow": 1, "york": 4, "York": 1, "really": 3, "REALLY": 6, "nasa": 3, "NASA": 4, "usb": 3,
             "USB": 3, "not": 1, "NOT": 3}
    count = lambda words: [vocab.get(w.strip("."), 2) for w in words]  # noqa: E731
    assert case_style("TWO DOGS ARE PLAYING IN THE SNOW.".split()) == "upper"
    assert case_style("Two Dogs Are Playing in the Snow.".split()) == "title"
    assert case_style("John and Mary visit New York today.".split()) == "none"
    assert case_style("A man plugs a USB stick into the NASA computer.".split()) == "none"
    # a script without case around a few capitals is not shouting (issue 61's Japanese input)
    assert case_style("ＡＢＣの本を読みました。".split()) == "none" and case_style("NHKのニュースを見た".split()) == "none"
    assert case_style("ПРИВЕТ МИР СЕГОДНЯ".split()) == "upper"
    assert case_style(["OK"]) == "none" and case_style(["CANCEL"]) == "upper"
    words = "TWO DOGS IN NEW YORK.".split()
    assert sentence_case(words, "upper", count) == ["Two", "dogs", "in", "new", "York."]  # York: 1 piece capitalised
    assert sentence_case("Two Dogs In The Snow.".split(), "title", count) == ["Two", "dogs", "in", "the", "snow."]
    assert shouted("This is REALLY NOT good, says NASA about the USB stick.".split(), count) == [2, 3]
    assert restyle(["zwei", "Hunde."], "upper") == ["ZWEI", "HUNDE."]
    assert restyle(["zwei", "Hunde", "(im", "Schnee)."], "title") == ["Zwei", "Hunde", "(Im", "Schnee)."]
    p = prepare("A man is REALLY happy.", KINDS, True, count)
    assert p.text == "A man is really happy." and p.loud == (3,)
    assert p.render("Ein Mann ist wirklich froh.", [0, 1, 2, 3, 4]) == "Ein Mann ist WIRKLICH froh."
    # no word linked to the shouted one: the capitals go to the word linked nearest to it
    assert p.render("Ein Mann ist froh.", [0, 1, 2, 4]) == "Ein Mann IST froh."
    p = prepare("TWO DOGS AT {place}.", KINDS, True, count)
    assert p.style == "upper" and p.render("zwei Hunde bei.") == "ZWEI HUNDE BEI {place}."


def test_parse_kinds() -> None:
    assert parse_kinds("all") == KINDS and parse_kinds("none") == () and parse_kinds("") == ()
    assert parse_kinds("numbers, URLs") == ("urls", "numbers")
    with pytest.raises(MTError, match="--protect: unknown kind 'links'"):
        parse_kinds("urls,links")


def test_a_long_line_of_placeholders_is_linear() -> None:
    """10,000 characters of placeholders (and of near-misses: unbalanced braces, lone % and @) in linear time."""
    one = lambda words: [1] * len(words)  # noqa: E731
    unit = "{0} %s {{ x }} ${y} <z> :w @h #t 12.5 `c` {unbalanced %( @ a@b "

    def run(n: int) -> None:
        line = (unit * (n // len(unit) + 1))[:n]
        prepare(line, KINDS, True, one).render("x " * 10)

    assert_linear(run, 1250, what="prepare + render of a line of placeholders")
    line = (unit * 200)[:10_000]
    assert len(find_spans(line, KINDS)) > 1000


def test_translations_keep_spans_and_leave_other_sentences_identical(random_ckpt: Path, one_thread: None) -> None:
    loaded = load_model([random_ckpt], "cpu")
    engine, tok = loaded.engine, loaded.tokenizer
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=2))
    off = dataclasses.replace(decode, text=dataclasses.replace(decode.text, protect=(), case=False, ending=False))
    seg = segmenter_for("en")
    texts = ["Click {0} to see {1} people. A man rides a bike.", "Visit https://example.org/a to see %d dogs.",
             "the cat sat on the mat.", "{0}", "TWO DOGS ARE PLAYING IN THE SNOW.", "the cat sat on the mat"]
    on = translate_texts(engine, tok, texts, decode, device="cpu", segmenter=seg)
    plain = translate_texts(engine, tok, texts, off, device="cpu", segmenter=seg)
    for text, out in zip(texts, on):
        for a, b, _ in find_spans(text, KINDS):
            assert out.count(text[a:b]) == 1, (text[a:b], out)
    # nothing applies: the same bytes as with everything off (and as translate_lines)
    assert on[2] == plain[2] == translate_lines(engine, tok, [texts[2]], decode, device="cpu")[0]
    assert on[0].endswith(" " + translate_lines(engine, tok, ["A man rides a bike."], decode, device="cpu")[0])
    assert on[3] == "{0}" and on[4] == on[4].upper()
    bare = translate_lines(engine, tok, [texts[5]], decode, device="cpu")[0]  # no final punctuation: a full
    assert plain[5] == bare and on[5] == drop_full_stop(bare)                  # stop the model adds is dropped
    nbest = translate_texts_nbest(engine, tok, texts[:2], dataclasses.replace(decode, search=dataclasses.replace(decode.search, n_best=2)), device="cpu",
                                  segmenter=seg)
    assert all(text.count("{0}") == 1 and text.count("{1}") == 1 for text, _ in nbest[0])
    assert all(text.count("https://example.org/a") == 1 for text, _ in nbest[1])
    assert DecodeConfig().text.protect == KINDS and DecodeConfig().text.case and DecodeConfig().text.ending


class CopyEngine:
    """An engine that translates a sentence into itself (its source pieces, re-encoded as target
    pieces): what comes out is exactly what the model read, so the case and span handling around
    the search can be checked word for word."""

    max_positions = 256

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None, constraints=None, glue=()):
        texts = self.tokenizer.decode_pieces("src", [list(ids) for ids in src_ids])
        return [[(ids, 0.0)] * (n_best or 1) for ids in self.tokenizer.encode_tgt(texts)]


def test_case_styles_and_spans_around_a_model_that_copies(random_ckpt: Path) -> None:
    loaded = load_model([random_ckpt], "cpu")
    engine, tok, seg = CopyEngine(loaded.tokenizer), loaded.tokenizer, segmenter_for("en")
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=1))
    texts = ["TWO DOGS ARE PLAYING IN THE SNOW.", "Two Dogs Are Playing In The Snow.", "A man plays a GUITAR.",
             "Click {0} to see {1} people on the beach.", "A man plugs a USB stick into the NASA computer."]
    read = translate_texts(engine, tok, texts, dataclasses.replace(decode, text=dataclasses.replace(decode.text, protect=(), case=False)), device="cpu",
                           segmenter=seg)
    assert read == texts  # the copy is exact
    out = translate_texts(engine, tok, texts, decode, device="cpu", segmenter=seg)
    assert out[0] == texts[0] and out[1] == texts[1]  # read in sentence case, the style given back
    assert out[3] == texts[3] and out[4] == texts[4]  # spans back in place; acronyms untouched
    seen: list[str] = []
    spy = CopyEngine(tok)
    spy.search_ids = lambda src_ids, *a, **k: seen.extend(tok.decode_pieces("src", [list(i) for i in src_ids])) \
        or CopyEngine.search_ids(spy, src_ids, *a, **k)
    translate_texts(spy, tok, texts, decode, device="cpu", segmenter=seg)
    assert seen.count("Two dogs are playing in the snow.") == 2
    assert "Click to see people on the beach." in seen and texts[4] in seen
    assert not any(line.isupper() for line in seen) and not any(line.istitle() for line in seen)



def test_markup_around_a_span_stays_on_the_span() -> None:
    """format=html: a target word that is a protected span of its block is linked to that span, and
    no other word is, whatever the attention said (here: everything on the URL)."""
    from mt.text.html import HtmlFragment, render_fragments

    fragment = HtmlFragment("<p>Visit <b>https://example.org/a</b> to see {count} dogs.</p>")
    target = "Besuchen Sie https://example.org/a, um {count} Hunde zu sehen."
    # the attention put "Besuchen Sie" on "Visit" and everything after it on the URL
    on_the_url = lambda sources, targets: [[0, 0] + [1] * (len(t.split()) - 2) for t in targets]  # noqa: E731
    assert "<b>https://example.org/a</b>" not in render_fragments([fragment], [target], on_the_url)[0]  # tail in bold
    assert span_links(on_the_url)([fragment.blocks[0]], [target]) == [[0, 0, 1, -1, 4, -1, -1, -1]]
    out = render_fragments([fragment], [target], span_links(on_the_url))[0]
    assert out == "<p>Besuchen Sie <b>https://example.org/a</b>, um {count} Hunde zu sehen.</p>"
    assert span_links(None) is None


def test_a_long_line_of_placeholders_is_answered_whole_in_linear_time(random_ckpt: Path) -> None:
    """The whole of `translate_texts` (segmenting, breaking to the model's limit, spans out and back)
    on 10,000 characters of placeholders and near-misses, around a model that copies: every
    character comes back, in time linear in the line."""
    loaded = load_model([random_ckpt], "cpu")
    engine, decode = CopyEngine(loaded.tokenizer), dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=1))
    engine.max_positions = 32  # many pieces to break off: a quadratic breaking shows at once
    unit = "{0} %s {{ x }} ${y} <z> :w @h #t 12.5 `c` {unbalanced %( @ a@b "

    def run(n: int) -> list[str]:
        line = (unit * (n // len(unit) + 1))[:n].strip()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MTWarning)  # broken to fit the model
            return translate_texts(engine, loaded.tokenizer, [line], decode, device="cpu", segmenter=segmenter_for("en"))

    line = (unit * (10_000 // len(unit) + 1))[:10_000].strip()
    assert run(10_000) == [line]
    assert_linear(run, 1250, what="translate_texts of a line of placeholders")


def test_serve_protect_flags() -> None:
    from mt.serve.settings import ServeSettings

    flags = {"api_keys": None, "cors_origins": []}
    assert ServeSettings.from_flags(**flags).protect is None  # the checkpoint's decode.protect
    assert ServeSettings.from_flags(**flags, protect="none").protect == ()
    assert ServeSettings.from_flags(**flags, protect="urls,numbers").protect == ("urls", "numbers")
    with pytest.raises(MTError, match="--protect: unknown kind 'links'"):
        ServeSettings.from_flags(**flags, protect="links")
