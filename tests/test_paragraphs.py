"""Text as people write it (issue 43): segmentation keeps the text's shape, long sentences are
translated in pieces, and a paragraph translates to exactly its sentences' translations joined,
through the library, `mt translate`, `/translate` text and html and `/v1/translate`, for an
English and a French source (tiny random models: what matters is the plumbing)."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
import warnings
from html import escape
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serve import ENV, httpx, metric, mt_translate, server

from mt.config import DecodeConfig, SearchConfig
from mt.decode.translate import translate_lines, translate_texts
from mt.errors import MTWarning
from mt.model.checkpoint import load_for_inference
from mt.text.segment import Segmented, Segmenter, fit, has_letter, has_words, whole_lines

WORDS = ["dog", "runs", "the", "park", "an", "man", "rides", "bike", "children", "play", "water", "red"]
GAPS = [" ", "  ", "\t", " \t ", "\n", "\n\n", "\n   ", "  \n\n  ", "\n\u3000"]
NO_WORDS = ["https://example.org/a.b?c=d", "www.example.com", "😀", "🎉🎉", "42", "—", "alice@example.social"]


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(a text, the sentences in it): sentences of known words ended by . ! or ?, separated by
    random whitespace and line breaks, with lines that hold only a URL, an address, emoji or a number."""
    parts, sentences = [draw(st.sampled_from(["", " ", "\n", "  "]))], []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()) and draw(st.booleans()):
            parts += [draw(st.sampled_from(NO_WORDS)), "\n"]
            continue
        words = draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=8))
        sentence = " ".join(words).capitalize() + draw(st.sampled_from([".", "!", "?"]))
        sentences.append(sentence)
        parts += [sentence, draw(st.sampled_from(GAPS))]
    return "".join(parts), sentences


@settings(max_examples=150, deadline=None)
@given(texts())
def test_the_text_keeps_its_shape_and_every_sentence_is_a_segment(case: tuple[str, list[str]]) -> None:
    text, sentences = case
    split = Segmenter("en").split(text)
    assert split.text == text  # gaps + segments give the text back, exactly
    assert list(split.segments) == sentences  # every sentence once; URLs, emoji, numbers never sent
    out = split.render([f"<{i}>" for i in range(len(split.segments))])
    assert out.count("\n") == text.count("\n")
    # Everything but the sentences is where it was: take the translations out, the gaps remain.
    assert "".join(out.split(f"<{i}>")[0] for i in range(1)) == split.gaps[0]
    for i, gap in enumerate(split.gaps[1:-1], start=1):
        assert out.split(f"<{i - 1}>")[1].split(f"<{i}>")[0] == gap
    assert all(has_words(s) and "\n" not in s for s in split.segments)
    lines = whole_lines(text)
    assert lines.text == text and all("\n" not in s for s in lines.segments)


@pytest.mark.parametrize("text, segments", [
    ("%.*s (copy %u)%s", ["%.*s (copy %u)%s"]),  # "%." is no sentence's end (Thunar's msgids)
    ("%s used (%.0f%%)  |  %s free (%.0f%%)", ["%s used (%.0f%%)  |  %s free (%.0f%%)"]),
    ("Total: {0:.2f}. Next one.", ["Total: {0:.2f}.", "Next one."]),
    ("Go to example.org. Then stop.", ["Go to example.org.", "Then stop."]),
])
def test_a_span_is_never_cut_between_two_segments(text: str, segments: list[str]) -> None:
    split = Segmenter("en").split(text)
    assert list(split.segments) == segments and split.text == text


def test_the_letter_scan_is_str_isalpha_on_every_code_point() -> None:
    """`has_letter` scans with the regex engine (a line of 10,000 symbols in C): the same answer as
    `str.isalpha` for every character, "²" and "_" included, and for a letter after 10,000 symbols."""
    chars = [chr(i) for i in range(sys.maxunicode + 1)]
    assert [c for c in chars if has_letter(c) != c.isalpha()] == []
    assert has_letter("[" * 10_000 + " dogs") and not has_letter("²½_ 123 " * 1000)


def test_a_sentence_over_the_limit_is_broken_at_clauses_then_words_and_nothing_is_dropped() -> None:
    count = lambda segments: [len(s.split()) for s in segments]  # noqa: E731  (a word is a piece here)
    text = "one two three, four five six seven, eight nine ten eleven twelve"
    [done] = fit([Segmenter("en").split(text)], count, 5)
    assert done.segments == ("one two three,", "four five six seven,", "eight nine ten eleven twelve")
    assert done.text == text and done.broken == 1
    [done] = fit([Segmenter("en").split("a b c d e f g")], count, 3)
    assert done.segments == ("a b c", "d e f", "g")  # no clause mark: a token window
    chars = lambda segments: [len(s) for s in segments]  # noqa: E731
    [done] = fit([Segmented(("", ""), ("我今天很忙，你呢我很好",))], chars, 4)
    assert done.text == "我今天很忙，你呢我很好" and max(map(len, done.segments)) <= 4
    with pytest.raises(ValueError, match="limit"):
        fit([done], chars, 0)


@pytest.fixture(scope="module")
def fr_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mt.deploy.tiny import write_random_checkpoint
    return write_random_checkpoint(tmp_path_factory.mktemp("fr") / "fr.pt", seed=1, src_lang="fr", tgt_lang="en")


def paragraphs(mirror_dir: Path, lang: str, count: int) -> list[list[str]]:
    """`count` runs of 3-6 consecutive test sentences (those ending in . ! ?), as the docs' benchmark builds them."""
    with gzip.open(mirror_dir / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        ended = [line.strip() for line in f if line.strip()[-1:] in ".!?"]
    out, at = [], 0
    for i in range(count):
        out.append(ended[at:at + 3 + i % 4])
        at += 3 + i % 4
    return out


def test_a_long_sentence_is_translated_in_pieces_with_one_warning(random_ckpt: Path, one_thread) -> None:
    model, tokenizer, cfg = load_for_inference(random_ckpt, "cpu")
    decode = DecodeConfig(search=SearchConfig(beam=1, max_len_a=0.2, max_len_b=2))
    words = ("aä bγ cж dé eß " * 400).split()  # no punctuation at all
    text = " ".join(words)
    assert len(tokenizer.encode_src([text])[0]) >= 1000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [out] = translate_texts(model, tokenizer, [text], decode, device="cpu", segmenter=Segmenter("en"))
    [note] = [w for w in caught if issubclass(w.category, MTWarning)]  # once, not per piece
    assert "1 sentence longer than 255 pieces" in str(note.message)
    split = fit([Segmenter("en").split(text)], lambda s: [len(x) for x in tokenizer.encode_src(s)], 255)[0]
    assert len(split.segments) >= 4 and " ".join(split.segments) == text  # every word in some piece
    assert out == " ".join(translate_lines(model, tokenizer, list(split.segments), decode, device="cpu"))


@pytest.mark.requires("httpx", "fastapi", "uvicorn")
@pytest.mark.parametrize("lang", ["en", "fr"])
def test_paragraphs_translate_as_their_sentences_on_every_path(lang: str, random_ckpt: Path, fr_ckpt: Path,
                                                               mirror_dir: Path, one_thread) -> None:
    ckpt, target = (random_ckpt, "de") if lang == "en" else (fr_ckpt, "en")
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    groups = paragraphs(mirror_dir, lang, 6)
    one_by_one = iter(translate_texts(model, tokenizer, [s for group in groups for s in group], cfg.decode,
                                      device="cpu", segmenter=Segmenter(lang)))  # each sentence alone
    expected = [" ".join(next(one_by_one) for _ in group) for group in groups]
    texts = [" ".join(group) for group in groups]
    assert [list(Segmenter(lang).split(t).segments) for t in texts] == groups
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MTWarning)  # whole paragraphs: cut at the model's limit
        assert translate_lines(model, tokenizer, texts, cfg.decode, device="cpu") != expected
    assert mt_translate(ckpt, texts) == expected  # mt translate segments by default
    html = [f'<p class="x">{t}</p>' for t in texts]
    with server(ckpt) as (url, _):
        post = lambda route, body: httpx.post(url + route, json=body, timeout=60)  # noqa: E731
        r = post("/translate", {"q": texts, "source": lang, "target": target})
        assert r.status_code == 200 and r.json()["translatedText"] == expected
        r = post("/translate", {"q": html, "source": lang, "target": target, "format": "html"})
        assert r.json()["translatedText"] == [f'<p class="x">{escape(t, quote=False)}</p>' for t in expected]
        r = post("/v1/translate", {"segments": ["\n\n".join(texts[:2])]})
        assert r.json()["translations"][0]["text"] == "\n\n".join(expected[:2])
        if lang == "fr":
            return
        # A long input answered in full: 10,000 characters of paragraphs, a blank line between them.
        long_text = "\n\n".join(texts * 40)[:10_000].rsplit(" ", 1)[0]
        r = post("/translate", {"q": long_text, "source": "en", "target": "de"})
        [whole] = translate_texts(model, tokenizer, [long_text], cfg.decode, device="cpu", segmenter=Segmenter("en"))
        assert r.status_code == 200 and r.json()["translatedText"] == whole and whole.count("\n") == long_text.count("\n")
        over = "a" * 10_001
        r = post("/translate", {"q": over, "source": "en", "target": "de"})
        assert r.status_code == 400 and r.json() == {"error": "Invalid request: request (10001) exceeds text limit (10000)"}
        r = post("/v1/translate", {"segments": [over[:5000], over[:5001]]})
        assert r.status_code == 400 and "(10001) exceeds text limit (10000)" in r.json()["error"]
        # The cache keys on sentences: a paragraph repeating a sentence decodes it once.
        hits, misses = metric(url, "mt_cache_hits_total"), metric(url, "mt_cache_misses_total")
        r = post("/translate", {"q": "Zebras walk home. Zebras walk home.\nZebras walk home.", "source": "en",
                                "target": "de"})
        once = translate_texts(model, tokenizer, ["Zebras walk home."], cfg.decode, device="cpu",
                               segmenter=Segmenter("en"))[0]
        assert r.json()["translatedText"] == f"{once} {once}\n{once}"
        assert (metric(url, "mt_cache_misses_total") - misses, metric(url, "mt_cache_hits_total") - hits) == (1, 0)
        post("/translate", {"q": "Zebras walk home.", "source": "en", "target": "de"})
        assert metric(url, "mt_cache_hits_total") - hits == 1


def test_evaluate_and_no_segment_translate_one_sentence_per_line(random_ckpt: Path, tmp_path: Path) -> None:
    """`mt evaluate` and `mt translate --no-segment` take each line whole, as before segmentation
    existed: a line of two sentences is one segment there (byte-identical to translate_lines)."""
    lines = ["A dog runs. A man rides a bike.", "Children play in the water!  The water is red."]
    model, tokenizer, cfg = load_for_inference(random_ckpt, "cpu")
    expected = translate_lines(model, tokenizer, lines, cfg.decode, device="cpu")
    segmented = translate_texts(model, tokenizer, lines, cfg.decode, device="cpu", segmenter=Segmenter("en"))
    assert segmented != expected
    src, ref, out = tmp_path / "src.en", tmp_path / "ref.de", tmp_path / "eval"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    ref.write_text("ein Hund.\nKinder.\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "mt", "evaluate", "-c", str(random_ckpt), "--src", str(src), "--ref", str(ref),
                    "--out-dir", str(out)], env=ENV, check=True, capture_output=True, timeout=120)
    [hyp] = out.glob("*.hyp")
    assert hyp.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert mt_translate(random_ckpt, lines, "--no-segment") == expected


@pytest.mark.parametrize("source, target, text, expected", [
    ("ja", "en", "今日は晴れです。明日は雨でしょう！本当？\n次の行。", "<1> <2> <3>\n<4>"),
    ("zh", "de", "我是学生。你呢？", "<1> <2>"),
    ("en", "ja", "It is sunny. It rains!  Really?\n Next line.", "<1><2><3>\n <4>"),
    ("en", "zh", "One.\tTwo.", "<1>\t<2>"),  # a tab is not a space between sentences: kept
    ("ja", "zh", "晴れです。雨です。", "<1><2>"),
    ("en", "de", "It is sunny.  It rains.", "<1>  <2>"),
    ("ja", "", "晴れです。雨です。", "<1><2>"),  # no target given: as written
])
def test_sentences_are_joined_as_the_target_language_writes_them(source, target, text, expected) -> None:
    """Chinese and Japanese sentences follow one another without a space, English ones with one: the
    gap between two translated sentences of a line is the target's (issue 61); the source stays exact."""
    split = Segmenter(source, target).split(text)
    assert split.text == text
    assert split.render([f"<{i}>" for i in range(1, len(split.segments) + 1)]) == expected
    assert fit([split], lambda segments: [len(s) for s in segments], 6)[0].joining == split.joining  # kept when broken


def test_a_tokenizer_knows_the_language_it_translates_into(random_ckpt: Path) -> None:
    _, tokenizer, cfg = load_for_inference(random_ckpt, "cpu")
    assert tokenizer.target == cfg.data.target_langs[0]
    assert pickle.loads(pickle.dumps(tokenizer.for_target(tokenizer.target))).target == tokenizer.target
