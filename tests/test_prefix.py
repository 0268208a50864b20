"""A translator's typed target prefix (issue 73): `mt translate --prefix FILE` continues each line's
prefix exactly as typed, a word cut short completed by string; `--alternatives K` gives the K most
probable next words after it. Through the real CLI entry point on the tiny random checkpoint of
test_evaluate.py, and the library (`translate_path(prefixes=...)`) underneath."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_evaluate import ckpt, run_cli, small_data, val_lines  # noqa: F401  (fixtures)

from mt.decode.translate import translate_path
from mt.decode.typed import typed_prefix
from mt.model.checkpoint import load_for_inference
from mt.text.segment import segmenter_for

pytestmark = pytest.mark.usefixtures("one_thread")


def typed_like(refs: list[str]) -> list[str]:
    """Prefixes as a translator types them: none, whole words with a trailing space, a word cut short
    (odd spacing and case kept), the whole first word without a space."""
    out = []
    for i, ref in enumerate(refs):
        words = ref.split()
        kind = i % 4
        if kind == 0 or len(words) < 3:
            out.append("")
        elif kind == 1:
            out.append(" ".join(words[:2]) + " ")
        elif kind == 2:
            out.append(words[0] + "  " + words[1] + " " + words[2][:max(1, len(words[2]) // 2)])
        else:
            out.append(words[0])
    return out


@pytest.fixture
def typed_files(small_data: Path, tmp_path: Path) -> tuple[Path, Path, list[str]]:  # noqa: F811
    src, prefixes = tmp_path / "in.en", tmp_path / "typed.de"
    src.write_text("\n".join(val_lines(small_data)) + "\n", encoding="utf-8")
    typed = typed_like(val_lines(small_data, "de"))
    prefixes.write_text("\n".join(typed) + "\n", encoding="utf-8")
    return src, prefixes, typed


@pytest.mark.parametrize("beam", ["1", "3"])
def test_every_output_starts_with_its_prefix_as_typed(ckpt, typed_files, monkeypatch, capsys, beam):  # noqa: F811
    src, prefixes, typed = typed_files
    code, plain, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--beam", beam)
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--beam", beam,
                             "--prefix", prefixes)
    assert code == 0, err
    lines, plain_lines = out.splitlines(), plain.splitlines()
    assert len(lines) == len(typed) == len(plain_lines)
    for line, prefix, alone in zip(lines, typed, plain_lines):
        assert line.startswith(prefix), (line, prefix)
        if not prefix:
            assert line == alone  # an empty prefix: the plain translation


def test_empty_prefixes_give_the_plain_output_byte_for_byte(ckpt, typed_files, tmp_path, monkeypatch,  # noqa: F811
                                                              capsys):
    src, _, typed = typed_files
    empty = tmp_path / "empty.de"
    empty.write_text("\n" * len(typed), encoding="utf-8")
    _, plain, _ = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src)
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--prefix", empty)
    assert code == 0, err
    assert out.encode() == plain.encode()


def test_a_word_cut_short_is_completed_by_string(ckpt, small_data):  # noqa: F811
    """The model's own output (before the typed text is put back) spells the prefix and goes on
    inside the cut word, whatever pieces it took for it; greedy and beam."""
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    refs, sources = val_lines(small_data, "de"), val_lines(small_data)
    cut = [" ".join(r.split()[:2]) + " " + r.split()[2][:2] for r in refs]
    for beam in (1, 4):
        decode = cfg.decode.__class__(**{**vars(cfg.decode),
                                         "search": cfg.decode.search.__class__(
                                             **{**vars(cfg.decode.search), "beam": beam})})
        done = translate_path(model, tokenizer, sources, decode, device="cpu", prefixes=cut,
                              segmenter=segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang))
        for record, prefix, out in zip(done.segments, cut, done.best()):
            typed = typed_prefix(tokenizer, prefix)
            assert typed is not None and typed.rest.startswith("\u2581")
            raw = record.found.hyps[0][0]
            assert raw.startswith(typed.shown), (raw, typed.shown)  # the model itself continued it
            assert out.startswith(prefix) and out[len(prefix):] == raw[len(typed.shown):]


def test_alternatives_are_distinct_next_words_with_probabilities(ckpt, typed_files, monkeypatch,  # noqa: F811
                                                                   capsys):
    src, prefixes, typed = typed_files
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--prefix", prefixes,
                             "--alternatives", "3")
    assert code == 0, err
    by_line: dict[int, list[tuple[str, float]]] = {}
    for line in out.splitlines():
        index, text, probability = line.split(" ||| ")
        by_line.setdefault(int(index), []).append((text, float(probability)))
    assert sorted(by_line) == list(range(len(typed)))
    for i, found in by_line.items():
        assert 1 <= len(found) <= 3
        assert all(text.startswith(typed[i]) and 0.0 < p <= 1.0 for text, p in found)
        assert [p for _, p in found] == sorted((p for _, p in found), reverse=True)
        assert sum(p for _, p in found) <= 1.0 + 1e-6  # the model's own next-piece probabilities
        start = len(typed[i]) if not typed[i] or typed[i].endswith(" ") else typed[i].rfind(" ") + 1
        words = [re.split(r"[ .,;!?]", text[start:].lstrip(), maxsplit=1)[0] for text, _ in found]
        assert len(set(words)) == len(words), words


def test_bad_prefix_files_are_one_line_errors(ckpt, typed_files, tmp_path, monkeypatch, capsys):  # noqa: F811
    src, prefixes, typed = typed_files

    def fails(*args: object, needle: str) -> None:
        code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, *args)
        assert code == 2 and err.startswith("mt: error: ") and err.count("\n") == 1, err
        assert needle in err, err

    short = tmp_path / "short.de"
    short.write_text("\n".join(typed[:3]) + "\n", encoding="utf-8")
    fails("--prefix", short, needle=f"'{short}': 3 lines for the {len(typed)} lines of input '{src}'")
    long = tmp_path / "long.de"
    long.write_text("\n".join(["ein Hund " * 600] + typed[1:]) + "\n", encoding="utf-8")
    fails("--prefix", long, needle="prefix on line 1: up to")
    other = tmp_path / "other.de"  # a script the target vocabulary has no piece for
    other.write_text("\n".join(["a שלום"] + typed[1:]) + "\n", encoding="utf-8")
    fails("--prefix", other, needle="prefix on line 1: 4 letters the model's target vocabulary has no piece")
    fails("--alternatives", "2", needle="--prefix FILE")
    fails("--prefix", prefixes, "--sampling", needle="not with --sampling")
    fails("--prefix", prefixes, "--scores", "--alternatives", "2", needle="--scores and --alternatives")
    fails("--prefix", tmp_path / "missing.de", needle="file not found")


def test_the_loop_guard_never_bars_the_typed_word(tmp_path):
    """A typed word is the translator's, not a loop: its pieces come at their own log-probs even
    where the loop guard (no_repeat_ngram_size 3 in the random checkpoint) would bar them, so every
    prefix gets a completion (a search without one used to end with no hypothesis)."""
    from mt.deploy.loading import load_model
    from mt.deploy.tiny import write_random_checkpoint

    loaded = load_model([write_random_checkpoint(tmp_path / "tiny.pt", seed=1)], "cpu")
    assert loaded.config.decode.search.no_repeat_ngram_size == 3
    ref = "a man rides a bike"
    words = ref.split()
    prefixes = [" ".join(words[:j] + [words[j][:cut]]) for j in range(len(words)) for cut in (1, 2)]
    done = translate_path(loaded.engine, loaded.tokenizer, ["a man rides a bike"] * len(prefixes),
                          loaded.config.decode, device="cpu", segmenter=None, prefixes=prefixes)
    assert all(out.startswith(p) for out, p in zip(done.best(), prefixes))


def test_a_prefix_is_shared_out_over_the_sentences_it_covers():
    """`split_prefix`: the prefix is the first sentence's unless it holds a finished sentence and more;
    a finished sentence is its source sentence's translation as typed; more typed sentences than
    source ones: the last source sentence takes the rest."""
    from mt.decode.typed import Part, split_prefix
    from mt.text.segment import Segmenter

    de = Segmenter("de").sentences
    assert split_prefix("", 2, de) == [Part(""), Part("")]
    assert split_prefix("Ein Mann fä", 2, de) == [Part("Ein Mann fä"), Part("")]
    assert split_prefix("Ein Mann fährt Rad.", 2, de) == [Part("Ein Mann fährt Rad."), Part("")]
    assert split_prefix("Ein Mann fährt Rad.  Zwei Hu", 3, de) == [
        Part("Ein Mann fährt Rad.", True, "  "), Part("Zwei Hu"), Part("")]
    assert split_prefix("Ein Mann fährt Rad. ", 2, de) == [Part("Ein Mann fährt Rad.", True, " "), Part("")]
    assert split_prefix("Ein Mann fährt z. B. Rad. ", 2, de) == [
        Part("Ein Mann fährt z. B. Rad.", True, " "), Part("")]
    assert split_prefix("Eins. Zwei. Drei", 2, de) == [Part("Eins.", True, " "), Part("Zwei. Drei")]
    assert split_prefix("Eins. Zwei. ", 1, de) == [Part("Eins. Zwei.", True, " ")]


def test_a_paragraph_keeps_every_sentence_after_its_prefix(ckpt):  # noqa: F811
    """Issue 73: a line of two sentences with a prefix in the first is translated as two segments:
    the first continues the prefix, the second is its plain translation; a prefix that finishes
    the first sentence and starts the second gives the first as typed and continues the second."""
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    segmenter = segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang)
    first, second = "A man rides a bike.", "Two dogs play in the snow."
    text = f"{first} {second}"
    plain = translate_path(model, tokenizer, [first, second], cfg.decode, device="cpu",
                           segmenter=segmenter).best()
    prefixes = ["Ein Mann fä", "Ein Mann fährt Rad. ", "Ein Mann fährt Rad.  Zwei Hu", "Ein Mann fährt Rad."]
    done = translate_path(model, tokenizer, [text] * len(prefixes), cfg.decode, device="cpu", segmenter=segmenter,
                          prefixes=prefixes, rate=True)
    outs = done.best()
    assert all(out.startswith(p) for out, p in zip(outs, prefixes)), outs
    assert [len(t.segments) for t in done.texts] == [2] * len(prefixes)
    assert outs[0].endswith(" " + plain[1]) and outs[3].endswith(" " + plain[1])  # the second sentence kept
    assert outs[1] == "Ein Mann fährt Rad. " + plain[1]
    assert outs[2].startswith("Ein Mann fährt Rad.  Zwei Hu") and outs[2] != prefixes[2]
    _, mine = next(iter(done.per_text()))
    assert mine[0].typed is not None and mine[1].typed is None
    assert all(0.0 <= c <= 1.0 for c in done.confidences()), done.confidences()
    plain_text = translate_path(model, tokenizer, [text], cfg.decode, device="cpu", segmenter=segmenter,
                                prefixes=[""]).best()
    assert plain_text == [f"{plain[0]} {plain[1]}"]
    alternatives = translate_path(model, tokenizer, [text], cfg.decode, device="cpu", segmenter=segmenter,
                                  prefixes=["Ein Mann fährt Rad. Zwei "], alternatives=3).alternatives()[0]
    assert alternatives and all(t.startswith("Ein Mann fährt Rad. Zwei ") for t, _ in alternatives)


def test_a_glossary_term_applies_after_the_prefix_and_not_again_when_typed(ckpt, tmp_path, monkeypatch,  # noqa: F811
                                                                           capsys):
    """--prefix with --glossary: a term the translator has not typed is required in the
    continuation; one already in the prefix (any case) is not forced again; a sentence without a
    prefix keeps its term as without one."""
    from mt.commands.decoding import glossary_for_model
    from mt.deploy.loading import load_model
    from mt.text.glossary import parse_glossary

    loaded = load_model([Path(ckpt)], "cpu")
    cfg, tokenizer = loaded.config, loaded.tokenizer
    pair = (cfg.data.src_lang, cfg.data.tgt_lang)
    terms = glossary_for_model(parse_glossary(b"dog\tKatze\n", "terms.tsv"), loaded, tokenizer, pair, cfg.decode)
    source = "A dog runs on the grass."
    prefixes = ["Ein Hund ", "Eine katze l", "", "Ein Mann. Der Hu"]
    texts = [source, source, source, f"A man. {source}"]
    done = translate_path(loaded.engine, tokenizer, texts, cfg.decode, device="cpu",
                          segmenter=segmenter_for(*pair), prefixes=prefixes, glossary=terms, rate=True)
    outs = done.best()
    assert all(out.startswith(p) for out, p in zip(outs, prefixes)), outs
    records = list(done.per_text())
    assert "Katze" in outs[0][len(prefixes[0]):] and records[0][1][0].wanted.require
    assert not records[1][1][0].wanted.require and records[1][1][0].terms  # typed: not forced again
    assert "Katze" in outs[2]
    assert "Katze" in outs[3][len(prefixes[3]):] and records[3][1][0].whole == "Ein Mann."
    assert all(0.0 <= c <= 1.0 for c in done.confidences()), done.confidences()
    src, typed = tmp_path / "in.en", tmp_path / "typed.de"
    glossary = tmp_path / "terms.tsv"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    typed.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    glossary.write_text("dog\tKatze\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--prefix", typed,
                             "--glossary", glossary)
    assert code == 0, err
    assert out.splitlines() == outs


def test_protected_spans_case_and_confidence_with_a_prefix(ckpt):  # noqa: F811
    """A typed prefix goes through the text rules as its source does: a protected span the
    translator typed is taken out of what the model writes and not put back twice; a prefix typed in
    an ALL CAPS source's style is written by the model in sentence case (its output then shouted
    again), the cut word in either first-letter case; every output rated."""
    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    assert "urls" in cfg.decode.text.protect and cfg.decode.text.case
    segmenter = segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang)
    texts = ["Visit https://example.com/a now.", "Visit https://example.com/a now.", "A DOG RUNS ON THE GRASS."]
    prefixes = ["Besuchen Sie https://example.com/a ", "Besuchen Sie ", "EIN HU"]
    done = translate_path(model, tokenizer, texts, cfg.decode, device="cpu", segmenter=segmenter,
                          prefixes=prefixes, rate=True)
    outs = done.best()
    assert all(out.startswith(p) for out, p in zip(outs, prefixes)), outs
    assert outs[0].count("https://example.com/a") == 1 and outs[1].count("https://example.com/a") == 1, outs
    raw = [record.found.hyps[0][0] for record in done.segments]
    assert "https" not in raw[0] and raw[0].startswith("Besuchen Sie"), raw  # the model never wrote the span
    assert raw[2].lower().startswith("ein hu") and not raw[2].startswith("EIN"), raw  # sentence case
    assert outs[2] == outs[2].upper()
    assert all(0.0 <= c <= 1.0 for c in done.confidences()), done.confidences()


def test_alternatives_probabilities_are_the_models_next_piece_probabilities(ckpt, small_data):  # noqa: F811
    """`next_pieces` (one teacher-forced pass over the prefix) gives the probabilities the
    incremental decoder gives at the position after the prefix, step by step: the model's own
    P(piece | source, prefix), best first, only pieces the typed word allows."""
    import torch

    from mt.data.batching import collate_source
    from mt.data.tokenizer import BOS_ID
    from mt.decode.alternatives import next_pieces

    model, tokenizer, _ = load_for_inference(ckpt, "cpu")
    model.eval()
    sources, refs = val_lines(small_data)[:3], val_lines(small_data, "de")[:3]
    typed = [typed_prefix(tokenizer, " ".join(r.split()[:2]) + " " + r.split()[2][:1]) for r in refs]
    src, mask = collate_source(tokenizer.encode_src(sources))
    with torch.inference_mode():
        tops = next_pieces(model, src, mask, [t.wanted() for t in typed], 4)
        for b, (t, top) in enumerate(zip(typed, tops)):
            cache, log_probs = None, None
            for token in [BOS_ID, *t.prefix]:
                log_probs, cache = model.decode_step(torch.tensor([[token]]), model.encode(src[b:b + 1], mask[b:b + 1]),
                                                     mask[b:b + 1], cache)
            allowed = {piece for piece, _ in t.partial[0]}
            assert top and all(piece in allowed for piece, _ in top)
            for piece, lp in top:
                assert lp == pytest.approx(float(log_probs[0, piece]), abs=1e-4)


def test_scores_with_a_prefix_rate_each_continued_line(ckpt, typed_files, monkeypatch, capsys):  # noqa: F811
    """--prefix with --scores: 'confidence<TAB>translation', the translation the one --prefix gives."""
    src, prefixes, typed = typed_files
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--prefix", prefixes)
    assert code == 0, err
    code, scored, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--prefix", prefixes,
                                "--scores")
    assert code == 0, err
    pairs = [line.split("\t", 1) for line in scored.splitlines()]
    assert [text for _, text in pairs] == out.splitlines()
    assert all(0.0 <= float(c) <= 1.0 for c, _ in pairs)


def test_the_forced_pieces_decoded_once_give_the_same_outputs_and_scores(ckpt, small_data, monkeypatch):  # noqa: F811
    """`mt.decode.prefill`: the forced pieces decoded on one row a sentence before the search, not
    step by step on every beam row: the same n-best outputs with the same scores, greedy and beam,
    for prefixes of complete words and of a word cut short."""
    import mt.decode.prefill as prefill

    model, tokenizer, cfg = load_for_inference(ckpt, "cpu")
    refs, sources = val_lines(small_data, "de"), val_lines(small_data)
    prefixes = [" ".join(r.split()[:2 + i % 3]) + " " + ("" if i % 2 else r.split()[-1][:2])
                for i, r in enumerate(refs)]
    calls = []
    monkeypatch.setattr(prefill, "MIN_FORCED", 1)
    real = prefill.forced_start
    monkeypatch.setattr("mt.decode.constrained.forced_start",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    for beam in (1, 4):
        decode = cfg.decode.__class__(**{**vars(cfg.decode), "search": cfg.decode.search.__class__(
            **{**vars(cfg.decode.search), "beam": beam, "n_best": min(beam, 3)})})
        found = {}
        for fast in (False, True):
            monkeypatch.setattr(prefill, "FAST_PREFIX", fast)
            done = translate_path(model, tokenizer, sources, decode, device="cpu", prefixes=prefixes,
                                  n_best=min(beam, 3),
                                  segmenter=segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang))
            found[fast] = [record.found.hyps for record in done.segments]
        assert found[True] == found[False]
    assert calls
