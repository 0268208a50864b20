"""Inline markup placed by word alignment (mt.text.html `render(..., alignments)`) and the
alignment itself (mt.decode.align, from the model's cross-attention)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.decode.align import align_words, piece_words
from mt.deploy.loading import load_model
from mt.text.html import HtmlFragment, render_fragments

SOURCE = '<p>A man in a <b>red</b> shirt rides a <a href="x">bike</a> today.</p>'
TARGET = "Ein Mann in einem roten Hemd fährt heute ein Fahrrad."  # "today" moved before "a bike"


def test_markup_follows_the_alignment_where_words_move() -> None:
    fragment = HtmlFragment(SOURCE)
    assert fragment.aligned_blocks == [0]
    # source words: A0 man1 in2 a3 red4 shirt5 rides6 a7 bike8 today.9
    alignment = [0, 1, 2, 3, 4, 5, 6, 9, 7, 8]
    assert fragment.render([TARGET], {0: alignment}) == \
        '<p>Ein Mann in einem <b>roten</b> Hemd fährt heute ein <a href="x">Fahrrad</a>.</p>'
    # by position alone the link lands on "ein", which translates "a", not "bike"
    assert '<a href="x">ein</a>' in fragment.render([TARGET])


def test_a_marked_word_is_never_left_empty_and_order_is_kept() -> None:
    fragment = HtmlFragment("<p><b>one</b> two <i>three</i></p>")
    # the translation's words all align to "two": the DP still gives <b> and <i> a word each
    out = fragment.render(["eins zwei drei"], {0: [1, 1, 1]})
    assert out == "<p><b>eins</b> zwei <i>drei</i></p>"
    # swapped order: <i>'s word comes first in the translation; slots stay in source order
    out = fragment.render(["drei zwei eins"], {0: [2, 1, 0]})
    assert out.count("<b>") == 1 and out.count("<i>") == 1 and "drei" in out and "eins" in out
    # unaligned words (-1) stay where the proportional placement puts them
    assert fragment.render(["x y z"], {0: [-1, -1, -1]}) == fragment.render(["x y z"])
    # a wrong-length alignment is ignored (proportional placement), never an error
    assert fragment.render(["x y z"], {0: [0]}) == fragment.render(["x y z"])


def test_blocks_without_inline_markup_are_not_aligned() -> None:
    fragment = HtmlFragment("<h1>Title</h1><p>plain text here</p><p>with <em>one</em> mark</p>")
    assert fragment.aligned_blocks == [2]


def test_piece_words() -> None:
    assert piece_words(["▁A", "▁ma", "n", "▁in", "."]) == [0, 1, 1, 2, 2]
    assert piece_words(["<2de>", "▁x", "y"], skip=1) == [-1, 0, 0]
    assert piece_words(["x", "▁y"]) == [0, 1]  # a first piece without the mark still starts a word


def test_align_words_shapes_and_batch_independence(random_ckpt: Path, one_thread: None) -> None:
    loaded = load_model([random_ckpt], "cpu")
    model = loaded.engine.model
    sources = ["the cat sat on the mat", "a dog", "", "one two three four five six seven"]
    targets = ["die Katze saß auf der Matte", "ein Hund", "leer", ""]
    together = align_words(model, loaded.tokenizer, sources, targets)
    assert [len(a) for a in together] == [len(t.split()) for t in targets]
    for source, alignment in zip(sources, together):
        assert all(-1 <= v < max(1, len(source.split())) for v in alignment)
    assert together[2] == [-1]  # an empty source aligns nothing
    one_by_one = [align_words(model, loaded.tokenizer, [s], [t])[0] for s, t in zip(sources, targets)]
    assert one_by_one == together
    with pytest.raises(ValueError):
        align_words(model, loaded.tokenizer, ["a"], [])


def test_render_fragments_aligns_only_marked_blocks_across_fragments() -> None:
    fragments = [HtmlFragment("<p>plain one</p>"), HtmlFragment(SOURCE), HtmlFragment("<p>x <i>y</i></p>")]
    translations = ["EINS", TARGET, "X Y"]
    asked: list[tuple[list[str], list[str]]] = []

    def align(sources: list[str], targets: list[str]) -> list[list[int]]:
        asked.append((sources, targets))
        return [[0, 1, 2, 3, 4, 5, 6, 9, 7, 8], [1, 0]]

    out = render_fragments(fragments, translations, align)
    assert asked == [([fragments[1].blocks[0], "x y"], [TARGET, "X Y"])]  # the plain block is not aligned
    assert out[0] == "<p>EINS</p>"
    assert out[1] == '<p>Ein Mann in einem <b>roten</b> Hemd fährt heute ein <a href="x">Fahrrad</a>.</p>'
    assert out[2] == "<p>X <i>Y</i></p>"  # "X" aligned to "y" cannot leave <i> empty
    assert render_fragments(fragments, translations, None)[1] == fragments[1].render([TARGET])
    with pytest.raises(ValueError):
        render_fragments(fragments, translations[:2], None)
