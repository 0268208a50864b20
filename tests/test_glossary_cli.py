"""`mt translate --glossary` and `mt evaluate --glossary` through the real entry points, on the tiny
random checkpoint (conftest's `random_ckpt`: Latin, Greek, Cyrillic pieces)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mt.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
TERMS = "cat\tкошка\nhello\tγειά\n"
LINES = ["The cat sat. Hello world", "nothing to keep here", "", "cats and dogs"]


def mt(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mt", *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).parents[1])


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["mt", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_translate_keeps_terms_inside_paragraphs_and_leaves_other_lines_as_they_were(random_ckpt, tmp_path):
    (tmp_path / "terms.tsv").write_text(TERMS, encoding="utf-8")
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    kept = mt("translate", "-c", random_ckpt, "-i", tmp_path / "in.txt", "--glossary", tmp_path / "terms.tsv",
              "--device", "cpu")
    plain = mt("translate", "-c", random_ckpt, "-i", tmp_path / "in.txt", "--device", "cpu")
    assert kept.returncode == 0 and plain.returncode == 0, kept.stderr + plain.stderr
    out, before = kept.stdout.split("\n"), plain.stdout.split("\n")
    assert len(out) == len(LINES) + 1 and "кошка" in out[0] and "γειά" in out[0] and "кошка" in out[3]
    assert "кошка" not in before[0] and out[1] == before[1] and out[2] == ""


def test_a_bad_glossary_is_one_line_before_the_model_loads(random_ckpt, tmp_path, monkeypatch, capsys):
    (tmp_path / "terms.tsv").write_text("cat\tкошка\ncat\tкот\n", encoding="utf-8")
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", tmp_path / "missing.pt", "-i",
                             tmp_path / "in.txt", "--glossary", tmp_path / "terms.tsv")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "terms.tsv:2: 'cat' -> 'кот', but line 1 says 'кошка'" in err


def test_evaluate_reports_term_success_beside_bleu(random_ckpt, tmp_path, monkeypatch, capsys):
    (tmp_path / "terms.tsv").write_text(TERMS, encoding="utf-8")
    (tmp_path / "src.en").write_text("the cat\nhello there\nno term\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("кошка\nγειά\nnichts\n", encoding="utf-8")
    common = ("evaluate", "-c", random_ckpt, "--src", tmp_path / "src.en", "--ref", tmp_path / "ref.de",
              "--device", "cpu")
    code, out, err = run_cli(monkeypatch, capsys, *common, "--out-dir", tmp_path / "kept", "--glossary",
                             tmp_path / "terms.tsv")
    assert code == 0, err
    assert "  terms 100.00  (2 of 2 term occurrences kept, in 2 sentences)" in out and "  BLEU " in out
    report = json.loads(next((tmp_path / "kept").glob("*.json")).read_text(encoding="utf-8"))
    assert report["term_success"] == {"terms": 2, "kept": 2, "sentences": 2, "rate": 100.0}
    # placement: the references already hold the terms, so no usual word is there to be replaced
    placed = report["term_placement"]
    assert (placed["sentences"], placed["slots"], placed["exclusivity"]) == (2, 0, None)
    assert placed["bleu_original"] == placed["bleu_rewritten"] and "term placement: 0 of 0" in out
    code, out, _ = run_cli(monkeypatch, capsys, *common, "--out-dir", tmp_path / "plain")
    assert code == 0 and "terms" not in out


def test_terms_inside_markup_and_subtitles_are_kept(random_ckpt, tmp_path):
    """Issue 55: markup placement and document formats keep working with terms inside sentences and
    inside tags: an HTML page with the term inside <b>, and a subtitle cue holding it."""
    import re

    (tmp_path / "terms.tsv").write_text(TERMS, encoding="utf-8")
    page = "<html><body><p>The <b>cat</b> sat on the mat.</p><p>Nothing here.</p></body></html>\n"
    (tmp_path / "in.html").write_text(page, encoding="utf-8")
    cues = "1\n00:00:01,000 --> 00:00:02,500\nHello there, cat.\n\n2\n00:00:03,000 --> 00:00:04,000\nno term\n\n"
    (tmp_path / "in.srt").write_text(cues, encoding="utf-8")
    for name in ("in.html", "in.srt"):
        out = tmp_path / f"out.{name}"
        kept = mt("translate", "-c", random_ckpt, "-i", tmp_path / name, "-o", out, "--glossary",
                  tmp_path / "terms.tsv", "--device", "cpu")
        assert kept.returncode == 0, kept.stderr
        text = out.read_text(encoding="utf-8")
        if name == "in.html":
            assert "<b>" in text and "</b>" in text and text.count("<p>") == 2  # the markup kept
            assert "кошка" in re.sub(r"<[^>]+>", "", text.split("</p>")[0])  # the term in its paragraph
        else:
            blocks = text.strip().split("\n\n")
            assert len(blocks) == 2 and blocks[0].startswith("1\n00:00:01,000 --> 00:00:02,500\n")
            assert "кошка" in blocks[0] and "γειά" in blocks[0] and "кошка" not in blocks[1]
