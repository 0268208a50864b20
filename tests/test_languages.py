"""Other languages and dirty corpora, through the real CLI: English->Chinese, Japanese->English,
and a corpus with 5,000-character lines. The corpora are generated here (tests/support/langdata.py).

Each runs prepare -> train (a few seconds, a tiny model) -> translate -> evaluate as separate
`python -m mt` processes and checks what issue 11 promises: target text survives the tokenizer
unchanged (full-width punctuation, a character the tokenizer never saw), BLEU is tokenised for
the target language (`tok:zh`; `ja-mecab`, or `char` without the `ja` extra), long lines are
dropped from training / truncated elsewhere and counted, never a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mt.eval.bleu import is_available
from tests.support.langdata import RARE, pairs, write_text_corpus

pytestmark = pytest.mark.slow  # ~15-50 s each: four CLI processes and a few seconds of training

TINY = {
    "tokenizer": {"vocab_size": 360},
    "model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 64, "dropout": 0.0},
    "train": {"max_tokens": 1024, "lr": 5e-3, "warmup": 10, "max_updates": 30, "valid_every": 15,
              "valid_max_sentences": 20, "log_every": 10, "threads": 1, "keep_checkpoints": 1},
    "decode": {"beam": 2, "max_len_a": 1.5, "max_len_b": 5},
}


def mt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "mt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"mt {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_config(tmp: Path, name: str, data: dict, extra: dict | None = None) -> Path:
    cfg = {"name": name, "run_root": str(tmp / "runs"),
           "data": {"format": "text", "path": str(tmp / "data"), "valid_split": "valid", "test_splits": ["test"],
                    **data}, **{k: dict(v) for k, v in TINY.items()}}
    for section, values in (extra or {}).items():
        cfg[section].update(values)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def check_round_trip(run: Path, target_lines: list[str]) -> None:
    from mt.data.tokenizer import Tokenizer

    assert Tokenizer.from_files(run).round_trip_failures(target_lines) == []


def test_english_to_chinese(tmp_path: Path) -> None:
    test = pairs("zh", 40, seed=2) + [("The dragon flies, a rare word!", RARE["zh"])]
    write_text_corpus(tmp_path / "data", "en", "zh", {"train": pairs("zh", 400), "valid": pairs("zh", 30, seed=1),
                                                     "test": test})
    config = write_config(tmp_path, "en_zh", {"src_lang": "en", "tgt_lang": "zh"})
    out = mt("prepare", str(config), cwd=tmp_path).stdout
    run = tmp_path / "runs" / "en_zh"
    report = json.loads((run / "data" / "clean_report.json").read_text(encoding="utf-8"))["pairs"]["en-zh"]
    # Whitespace words would make every pair "one Chinese word": pieces keep all 400.
    assert report["kept"] == 400 and sum(report["dropped"].values()) == 0, out
    assert all(r["changed"] == 0 for r in report["round_trip"].values()), report["round_trip"]
    check_round_trip(run, [t for _, t in test])  # full-width ，？！：（）…, 龘 and 𠀋 never seen in training

    mt("train", str(config), cwd=tmp_path)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "valid" and "bleu" in r for r in metrics)

    src = [s for s, _ in test]
    (tmp_path / "in.en").write_text("\ufeff" + "\n".join(src) + "\n", encoding="utf-8")  # a BOM, as Notepad writes
    mt("translate", "-c", str(run / "checkpoints" / "best.pt"), "-i", "in.en", "-o", "out.zh", cwd=tmp_path)
    assert len((tmp_path / "out.zh").read_text(encoding="utf-8").split("\n")[:-1]) == len(src)

    mt("evaluate", "-c", str(run / "checkpoints" / "best.pt"), "--split", "test", "--out-dir", "eval", cwd=tmp_path)
    report = json.loads(next((tmp_path / "eval").glob("test.*.json")).read_text(encoding="utf-8"))
    assert "|tok:zh|" in report["bleu_signature"] and report["bleu_tokenize"] == "zh"
    # the override: --tokenize on the command line
    mt("evaluate", "-c", str(run / "checkpoints" / "best.pt"), "--split", "test", "--out-dir", "eval13a",
       "--tokenize", "13a", cwd=tmp_path)
    report = json.loads(next((tmp_path / "eval13a").glob("test.*.json")).read_text(encoding="utf-8"))
    assert "|tok:13a|" in report["bleu_signature"]


def test_japanese_to_english(tmp_path: Path) -> None:
    ja_en = [(x, e) for e, x in pairs("ja", 400)]
    test = [(x, e) for e, x in pairs("ja", 40, seed=2)]
    write_text_corpus(tmp_path / "data", "ja", "en", {"train": ja_en, "valid": [(x, e) for e, x in pairs("ja", 30, 1)],
                                                     "test": test})
    config = write_config(tmp_path, "ja_en", {"src_lang": "ja", "tgt_lang": "en"})
    mt("prepare", str(config), cwd=tmp_path)
    run = tmp_path / "runs" / "ja_en"
    report = json.loads((run / "data" / "clean_report.json").read_text(encoding="utf-8"))["pairs"]["ja-en"]
    assert report["kept"] == 400 and all(r["changed"] == 0 for r in report["round_trip"].values())
    mt("train", str(config), cwd=tmp_path)
    ckpt = run / "checkpoints" / "best.pt"
    (tmp_path / "in.ja").write_text("\n".join(x for x, _ in test) + "\n", encoding="utf-8")
    mt("translate", "-c", str(ckpt), "-i", "in.ja", "-o", "out.en", cwd=tmp_path)
    assert len((tmp_path / "out.en").read_text(encoding="utf-8").split("\n")[:-1]) == len(test)
    mt("evaluate", "-c", str(ckpt), "--split", "test", "--out-dir", "eval", cwd=tmp_path)
    report = json.loads(next((tmp_path / "eval").glob("test.*.json")).read_text(encoding="utf-8"))
    assert "|tok:13a|" in report["bleu_signature"]  # English target

    # Japanese as the scored language (--hyp/--ref: the language is the reference file's suffix).
    (tmp_path / "hyp.ja").write_text("\n".join(x for x, _ in test[::-1]) + "\n", encoding="utf-8")
    (tmp_path / "ref.ja").write_text("\n".join(x for x, _ in test) + "\n", encoding="utf-8")
    proc = mt("evaluate", "--hyp", "hyp.ja", "--ref", "ref.ja", "--out-dir", "evalja", cwd=tmp_path)
    report = json.loads((tmp_path / "evalja" / "hyp.ja.json").read_text(encoding="utf-8"))
    if is_available("ja-mecab"):
        assert "|tok:ja-mecab" in report["bleu_signature"]
    else:  # the documented fallback, and a message naming the extra
        assert "|tok:char|" in report["bleu_signature"] and "pip install -e '.[ja]'" in proc.stderr


def test_long_lines_train_validate_and_translate(tmp_path: Path) -> None:
    """5,000+ character lines (one 'word', and many words) in every split: dropped from training
    with a reason, truncated in validation/test/`translate --no-segment` with a counted warning
    (`mt translate` breaks them into pieces, with its warning), never a crash."""
    word = "Supercalifragilistic" * 260  # one 5,200-character "word"
    many = " ".join(["a dog runs in the park"] * 220)  # 5,000+ characters, 1,300 words
    medium = " ".join(["the cat eats"] * 60)  # ~180 words: under max_len, over max_positions
    train = pairs("de", 300) + [(word, word), (many, "Ein Hund."), (medium, medium)]
    valid = pairs("de", 20, seed=1) + [(many, many), (word, "Wort")]
    test = pairs("de", 20, seed=2) + [(word, word)]
    write_text_corpus(tmp_path / "data", "en", "de", {"train": train, "valid": valid, "test": test})
    config = write_config(tmp_path, "long", {"src_lang": "en", "tgt_lang": "de", "max_len": 600},
                          {"model": {"max_positions": 128}, "train": {"valid_max_sentences": 0}})
    out = mt("prepare", str(config), cwd=tmp_path).stdout
    run = tmp_path / "runs" / "long"
    report = json.loads((run / "data" / "clean_report.json").read_text(encoding="utf-8"))["pairs"]["en-de"]
    assert report["kept"] == 300, out
    assert report["dropped"]["too_long"] == 2 and report["dropped"]["over_max_positions"] == 1, report
    assert report["truncated"] == {"valid": 2, "test": 1}, report

    train_out = mt("train", str(config), cwd=tmp_path)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["kind"] == "valid" and "bleu" in r for r in metrics) >= 2  # validated, long lines included
    assert (run / "checkpoints" / "last.pt").is_file(), train_out.stdout

    (tmp_path / "in.en").write_text(f"{word}\nA dog runs.\n{many}\n", encoding="utf-8")
    proc = mt("translate", "-c", str(run / "checkpoints" / "last.pt"), "-i", "in.en", "-o", "out.de", cwd=tmp_path)
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").split("\n")[:-1]) == 3
    assert "2 sentences longer than 127 pieces" in proc.stderr  # segmenting: broken into pieces, never cut
    proc = mt("translate", "-c", str(run / "checkpoints" / "last.pt"), "-i", "in.en", "-o", "out.de", "--no-segment",
              cwd=tmp_path)
    assert "2 of 3 source lines" in proc.stderr  # lines whole: cut at the limit
