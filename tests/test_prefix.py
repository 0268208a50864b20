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
    fails("--alternatives", "2", needle="--prefix FILE")
    fails("--prefix", prefixes, "--sampling", needle="not with --sampling")
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
