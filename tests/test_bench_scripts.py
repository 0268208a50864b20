"""The benchmark scripts run end to end on minimal settings (their figures are not checked here:
speed is measured by running them on a quiet machine, never by timed unit tests)."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_bench_model_runs_fp32_and_its_bf16_branch_on_any_cpu() -> None:
    """fp32 and bf16 with the peers (nn.Transformer, and Marian when transformers is installed):
    --force times bf16 whether or not this CPU has native bf16, so the branch that AMX machines take
    by themselves is exercised on AVX2-only machines too."""
    out = run("bench/bench_model.py", "--config", "configs/tiny.yaml", "--steps", "1", "--warmup", "0", "--threads", "1",
              "--precision", "fp32", "bf16", "--force")
    rows = [line.split() for line in out.splitlines()]
    models = ("nn.Transformer", "mt") + (("Marian",) if importlib.util.find_spec("transformers") else ())
    assert {(r[0], r[1], r[2]) for r in rows if len(r) >= 4 and r[1] in ("fp32", "bf16")} == {
        (m, p, mode) for m in models for p in ("fp32", "bf16") for mode in ("train", "forward")}
    assert "tgt tok/s" in out and "mt training step bf16 / fp32:" in out
    assert "fp32: " in out and "widths padded to a multiple of 1:" in out  # fp32 batches are not padded
    # bf16 is timed on the trainer's padded batches (train.pad_multiple auto), after a warm-up pass
    assert "bf16: " in out and "widths padded to a multiple of 4:" in out


def test_bench_model_profile_parts_and_ceiling() -> None:
    """--profile prints the per-part table of mt's step (its shares sum to the whole) and the MFU
    ceiling its replayed matrix products set."""
    out = run("bench/bench_model.py", "--config", "configs/tiny.yaml", "--steps", "2", "--warmup", "0", "--threads", "1",
              "--precision", "fp32", "--no-reference", "--rounds", "1", "--profile")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "training step, per part" in line)
    table = [line for line in lines[start + 2:start + 14] if line.startswith("  ") and line.endswith("%")]
    assert {"matrix products", "LayerNorm", "outside operators"} <= {line[2:64].split(" (")[0].strip() for line in table}
    assert sum(float(line.split()[-1].rstrip("%")) for line in table) == pytest.approx(100, abs=0.6)
    assert any(line.startswith("mt fp32 matrix products (") and "alone on operands from memory" in line for line in lines)
    assert any(line.startswith("mt fp32 MFU ceiling") for line in lines)


@pytest.mark.requires("onednn packed linear")  # without it bench_loss times MKL in both fused rows
def test_bench_loss_runs_every_route() -> None:
    out = run("bench/bench_loss.py", "--targets", "40", "--vocab", "300", "--d-model", "16", "--rounds", "2",
              "--warmup", "0", "--threads", "1")
    rows = [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ") and "ms" not in line]
    assert rows == ["fused, MKL products", "fused, oneDNN packed", "unfused (autograd)"]
    assert "CPU: " in out and "no oneDNN packed linear" not in out


@pytest.mark.requires("ctranslate2")
def test_bench_translate_runs(multi30k_dir: Path) -> None:
    out = run("bench/bench_translate.py", "--config", "configs/tiny.yaml", "--data", str(multi30k_dir), "--limit", "4",
              "--no-hf", "--out-len", "3", "--threads", "1", "--ensemble", "2")
    assert "cache speed-up" in out and "(identical output)" in out
    assert out.count("translate_lines / search alone x") == 2 and "same text)" in out and "TEXT DIFFERS" not in out
    assert "mt ensemble of 2" in out and "ensemble of 2 at x" in out
    assert "CTranslate2 fp32" in out and "CTranslate2 int8" in out


@pytest.mark.requires("ctranslate2")
def test_bench_translate_checkpoint_mode_reports_bleu(multi30k_dir: Path, tmp_path: Path) -> None:
    """-c CKPT: native, CTranslate2 fp32 and int8 rows each with a BLEU figure (random tiny model)."""
    import gzip

    import torch

    from mt.data.tokenizer import train_sentencepiece
    from mt.model.checkpoint import inference_state, save_checkpoint
    from mt.model.transformer import Transformer
    from tests.conftest import tiny_config_at

    cfg = tiny_config_at(multi30k_dir, tmp_path / "runs")
    lines = {lang: gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:2000]
             for lang in ("en", "de")}
    tok = train_sentencepiece(lines["en"], lines["de"], dataclasses.replace(cfg.tokenizer, vocab_size=300, byte_fallback=False))
    torch.manual_seed(0)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint).eval()
    ckpt = tmp_path / "ckpt.pt"
    save_checkpoint(ckpt, inference_state(cfg, tok, model, update=1, epoch=0))
    out = run("bench/bench_translate.py", "--checkpoint", str(ckpt), "--data", str(multi30k_dir), "--limit", "3",
              "--no-uncached", "--no-bf16", "--threads", "1")
    rows = {(r[0], " ".join(r[1:-6])): r[-1] for r in (line.split() for line in out.splitlines()) if len(r) >= 8}
    for search in ("greedy", "beam"):
        for impl in ("mt (cached)", "CTranslate2 fp32, mt batches", "CTranslate2 fp32, own batching",
                     "CTranslate2 int8, mt batches", "CTranslate2 int8, own batching"):
            key = next(k for k in rows if k[0] == search and k[1].endswith(impl))
            float(rows[key])  # a BLEU figure, not "-"


def test_bench_latency_runs_interleaved_variants(multi30k_dir: Path, tmp_path: Path) -> None:
    """One sentence at a time in worker processes: this tree, torch's thread count, a baseline checkout."""
    import gzip

    import torch

    from mt.data.tokenizer import train_sentencepiece
    from mt.model.checkpoint import inference_state, save_checkpoint
    from mt.model.transformer import Transformer
    from tests.conftest import tiny_config_at

    cfg = tiny_config_at(multi30k_dir, tmp_path / "runs")
    lines = {lang: gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:1000]
             for lang in ("en", "de")}
    tok = train_sentencepiece(lines["en"], lines["de"], dataclasses.replace(cfg.tokenizer, vocab_size=300, byte_fallback=False))
    torch.manual_seed(0)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint).eval()
    ckpt = tmp_path / "ckpt.pt"
    save_checkpoint(ckpt, inference_state(cfg, tok, model, update=1, epoch=0))
    out = run("bench/bench_latency.py", "-c", str(ckpt), "--data", str(multi30k_dir), "--limit", "2", "--skip", "1",
              "--beams", "1,2", "--torch-threads", "--baseline", str(ROOT))
    rows = [line.split() for line in out.splitlines() if line.startswith(("greedy", "beam 2"))]
    assert len(rows) == 6 and all(float(r[-3 if "same" in r else -1]) > 0 for r in rows)
    assert out.count("same text") == 4 and "TEXT DIFFERS" not in out


def test_bench_prepare_runs(multi30k_dir: Path, tmp_path: Path) -> None:
    out = run("bench/bench_prepare.py", "--pairs", "3000", "--workers", "1", "--sample-size", "3000", "--vocab-size", "500",
              "--data", str(multi30k_dir), "--workdir", str(tmp_path))
    assert "pairs/s" in out and "first update after" in out


def test_fuzz_translate_runs() -> None:
    out = run("stress/fuzz_translate.py", "--lines", "30")
    assert "lines in 30, lines out 30: OK" in out and "invalid UTF-8 at line 31" in out


def test_bench_translate_stream_runs() -> None:
    out = run("bench/bench_translate_stream.py", "--lines", "50", "200")
    assert "200 OK" in out and "peak RSS MiB" in out


def test_sweep_runs_trials_shares_prepared_data_and_continues_after_a_stop(multi30k_dir: Path,
                                                                            tmp_path: Path) -> None:
    """Two real tiny trials: each trains, the second reuses the first's prepared corpus, the table
    ranks them by selected val BLEU, and a second invocation runs only the trial not yet done."""
    import json

    import yaml

    trials = tmp_path / "trials.yaml"
    spec = {"config": str(ROOT / "configs" / "tiny.yaml"), "budget": "10m",
            "common": {"run_root": str(tmp_path / "runs"), "data.path": str(multi30k_dir),
                       "train.max_updates": 30, "train.valid_every": 15, "train.save_every": 10,
                       "train.average_last": 2},
            "trials": [{"name": "base"}, {"name": "lr1e-3", "set": {"train.lr": 1e-3}}]}
    trials.write_text(yaml.safe_dump(spec))
    out = tmp_path / "sweep"
    run("experiments/sweep.py", str(trials), "--out", str(out), "--only", "base")
    first = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [r["name"] for r in first] == ["base"] and first[0]["updates"] == 30
    log = run("experiments/sweep.py", str(trials), "--out", str(out))  # continues: only lr1e-3 runs now
    assert "trial base" not in log and f"{tmp_path / 'runs' / 'sweep_lr1e-3'} is up to date" in log
    results = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert [r["name"] for r in results] == ["base", "lr1e-3"] and results[0] == first[0]
    assert results[1]["set"] == {"train.lr": 1e-3}
    for r in results:
        assert r["selected_bleu"] == max(r["best_bleu"], r["averaged_bleu"] or -1.0)
        assert r["best_update"] in (15, 30)
    saved = yaml.safe_load((tmp_path / "runs" / "sweep_lr1e-3" / "config.yaml").read_text())
    assert saved["train"]["lr"] == 1e-3 and saved["name"] == "sweep_lr1e-3"
    table = out.with_suffix(".md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| base") or line.startswith("| lr1e-3")]
    scores = [float(row.split("|")[3]) for row in rows]
    assert len(rows) == 2 and scores == sorted(scores, reverse=True)


def test_sweep_refuses_a_malformed_trials_file(tmp_path: Path) -> None:
    trials = tmp_path / "trials.yaml"
    trials.write_text("config: configs/tiny.yaml\ntrials:\n  - name: a\n  - name: a\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "experiments" / "sweep.py"), str(trials), "--out",
                           str(tmp_path / "s")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "unique `name`" in proc.stderr and "Traceback" not in proc.stderr
    trials.write_text("config: configs/tiny.yaml\ntrials:\n  - name: a+b\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "experiments" / "sweep.py"), str(trials), "--out",
                           str(tmp_path / "s")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "letters, digits" in proc.stderr


def tiny_checkpoint_and_source(tmp_path: Path, lines: int, words: int) -> tuple[Path, Path]:
    """A random tiny checkpoint and `lines` synthetic source lines of ~`words` words (gzipped)."""
    import gzip

    from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt")
    src = tmp_path / "src.en.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in synthetic_sentences(lines, words))
    return ckpt, src


def test_bench_serve_runs(tmp_path: Path) -> None:
    """bench_serve.py end to end on a random tiny checkpoint: every request of every level answered
    (200, one translation each), the batched and unbatched servers both measured, the table printed.
    The raw-socket client here; the httpx client drives the two-model and reload run below."""
    client = "raw"
    import json

    ckpt, src = tiny_checkpoint_and_source(tmp_path, 6, 3)
    out = run("bench/bench_serve.py", "-c", str(ckpt), "--src", str(src), "-n", "6", "--concurrency", "1", "4",
              "--beams", "1", "--cap-s", "120", "--client", client, "--offline-chunks", "1", "4",
              "--out", str(tmp_path / "report.json"))
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    levels = report["native"]["levels"] + report["native"]["unbatched_c32"]
    assert [row["concurrency"] for row in levels] == [1, 4, 32]
    assert all(row["requests"] == 6 and row["errors"] == 0 and row["batches"] >= 1 for row in levels)
    assert report["client"] == client and "| native | 1 | 4 |" in out
    chunked = report["native"]["offline_chunked_seg_per_s"]
    assert list(chunked) == ["beam 1, chunks of 1", "beam 1, chunks of 4"] and all(v > 0 for v in chunked.values())


def test_bench_serve_two_models_and_a_reload(tmp_path: Path) -> None:
    """bench_serve.py's operator runs on random tiny checkpoints: an en->de and a de->en model in one
    server, each answering its own pair's requests; then a reload under load with no failed request.
    Through the httpx client (`--client httpx`), the one a Python user of the API would write."""
    import json

    from mt.deploy.tiny import write_random_checkpoint
    ckpt, src = tiny_checkpoint_and_source(tmp_path, 8, 4)
    reverse = write_random_checkpoint(tmp_path / "de-en.pt", seed=2, src_lang="de", tgt_lang="en")
    out = run("bench/bench_serve.py", "-c", str(ckpt), "--src", str(src), "-n", "8", "--concurrency", "4", "--beams", "1",
              "--operator-only", "--second", str(reverse), "--second-src", str(src), "--reload-seconds", "4",
              "--client", "httpx", "--out", str(tmp_path / "report.json"))
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    two = report["two_models"]
    assert two["requests"] == 16 and two["errors"] == 0 and two["models"] == ["en-de", "de-en"]
    assert two["en-de"]["requests"] == two["de-en"]["requests"] == 8
    reload = report["reload"]
    assert reload["errors"] == 0 and reload["requests"] > 0 and reload["models_seen"] == 1 and reload["reload_s"] > 0
    assert "native" not in report and "reload under load" in out and report["client"] == "httpx"


def test_bench_complete_types_references_one_keystroke_a_request(tmp_path: Path) -> None:
    """bench_complete.py on a random tiny checkpoint: two short references typed by one and by two
    clients, every keystroke answered (200, the prefix kept), the table and the JSON written."""
    import gzip
    import json

    from mt.deploy.tiny import write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    for lang, lines in (("en", ["ab cd", "xy zw"]), ("de", ["äb cd", "xyz"])):
        with gzip.open(tmp_path / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
    out = run("bench/bench_complete.py", "-c", str(ckpt), "--mirror", str(tmp_path), "--sentences", "2",
              "--clients", "1", "2", "--alternatives", "1", "--out", str(tmp_path / "report.json"))
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert [(r["clients"], r["keystrokes"], r["errors"]) for r in report["levels"]] == [(1, 8, 0), (2, 8, 0)]
    assert report["levels"][0]["target_p95_ms"] == 50 and report["cpu"] and "| 1 | 8 | 0 |" in out


def test_bench_beam_steps_counts_every_step(tmp_path: Path) -> None:
    """bench_beam_steps.py on a random tiny checkpoint: a table per call size; calls of one line
    have every step at one live sentence, calls of 4 show their full steps and their tail."""
    ckpt, src = tiny_checkpoint_and_source(tmp_path, 8, 5)
    out = run("bench/bench_beam_steps.py", "-c", str(ckpt), "--src", str(src), "-n", "8", "--beam", "3",
              "--chunks", "1", "4", "--bin", "2")
    ones, fours = out.split("calls of 1:")[1].split("calls of 4:")
    assert [line.split(" | ")[0] for line in ones.splitlines() if line.startswith("| ") and "---" not in line] == [
        "| live sentences", "| 1"]
    rows = [line.split(" | ")[0] for line in fours.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| live sentences" and rows[-1] == "| 4" and set(rows[1:-1]) <= {"| 1-2", "| 3-3"}
    assert "CPU: " in out


@pytest.mark.requires("lxml", "srt", "webvtt", "docx", "odf")
def test_bench_documents_runs() -> None:
    out = run("bench/bench_documents.py", "--units", "20")
    assert [line.split()[0] for line in out.splitlines()[:7]] == ["docx", "odt", "srt", "vtt", "pptx", "odp", "epub"]
    assert "CPU: " in out


@pytest.mark.requires("lxml", "pptx", "ebooklib")
def test_bench_documents_against_txt_runs(tmp_path: Path) -> None:
    """bench_documents.py -c: a deck and a book against their paragraphs as .txt, one ratio each."""
    ckpt, _ = tiny_checkpoint_and_source(tmp_path, 2, 3)
    out = run("bench/bench_documents.py", "-c", str(ckpt), "--slides", "2", "--pages", "1", "--repeat", "2")
    assert [line.split()[0] for line in out.splitlines()[:2]] == ["pptx", "epub"] and out.count("ratio ") == 2


def test_bench_serve_paragraph_mode_and_bench_segment_run(tmp_path: Path, mirror_dir: Path) -> None:
    """bench_serve.py --paragraphs (the same sentences one per request and as paragraphs, nothing
    failed) and bench_segment.py (its table for every language) on minimal settings."""
    import json

    ckpt, src = tiny_checkpoint_and_source(tmp_path, 12, 3)
    run("bench/bench_serve.py", "-c", str(ckpt), "--src", str(src), "-n", "12", "--paragraphs", "--concurrency", "4",
        "--beams", "1", "--out", str(tmp_path / "report.json"))
    [row] = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["paragraphs"]
    assert row["errors"] == 0 and row["sentences_per_s_paragraphs"] > 0 and row["ratio"] > 0
    out = run("bench/bench_segment.py", "--mirror", str(mirror_dir), "--paragraphs", "20")
    assert all(f"| {lang}" in out for lang in ("en", "de", "fr", "zh", "ja", "ar", "ru", "cs")) and "sentencex:" in out


def test_recipe_grid_trials_and_table(tmp_path: Path) -> None:
    """exp_recipe_grid.py: every combination of the axes once, the update count of each model
    size, vocabularies as multiples of the recipe's (rounded to 500), and a table per corpus,
    best test BLEU first (no training: the trials' plan and the results file only)."""
    import argparse
    import json

    from scripts.experiments import exp_recipe_grid as grid
    a = argparse.Namespace(models=[128, 192], dropout=[0.1, 0.3], smoothing=[0.1], vocab_scale=[1.0, 2.0],
                           updates={128: 1500, 192: 840})
    trials = grid.trials(a, 2500)
    assert len(trials) == len({t["name"] for t in trials}) == 8
    assert {(t["d_model"], t["updates"]) for t in trials} == {(128, 1500), (192, 840)}
    assert {t["vocab"] for t in trials} == {2500, 5000}
    one = next(t for t in trials if t["name"] == "d192_do0.3_ls0.1_v5000")
    assert {"model.heads=4", "model.d_ff=768", "train.max_updates=840", "tokenizer.vocab_size=5000"} <= set(one["set"])
    rows = [{**{k: v for k, v in t.items() if k != "set"}, "corpus": c, "test_bleu": b, "best_valid_bleu": b,
             "checkpoint": "best.pt"} for c, t, b in (("ende_10000", trials[0], 20.0), ("ende_3000", trials[1], 12.5),
                                                      ("ende_3000", trials[2], 14.0))]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    grid.write_table(tmp_path / "results.jsonl", tmp_path / "results.md")
    table = (tmp_path / "results.md").read_text(encoding="utf-8")
    assert table.index("ende_3000") < table.index("ende_10000") and table.index("14.00") < table.index("12.50")


def test_exp_glossary_runs_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """exp_glossary.py end to end on a handful of sentences: terms are found, the unconstrained
    outputs lack them (0% by construction), the sentences without one come out byte-identical."""
    import gzip
    import json

    from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    latin = [" ".join(w for w in line.split() if w.isascii()) or "house" for line in synthetic_sentences(40, 3)]
    for lang, lines in (("en", latin[:6]), ("de", [f"{line} gartenhaus" for line in latin[6:12]])):
        with gzip.open(mirror / f"tiny_test.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    run("experiments/exp_glossary.py", "-c", str(ckpt), "--mirror", str(mirror), "--split", "tiny_test",
        "--beam", "2", "--threads", "1", "--out", str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert report["sentences"] == 6 and report["term_sentences"] >= 1
    assert report["term_success"]["unconstrained"] == 0.0
    assert report["term_success"]["constrained"] >= 50.0
    assert report["without_terms"]["identical"] == report["without_terms"]["sentences"]
    assert "| term success (%) | 0.00 |" in (tmp_path / "out" / "results.md").read_text(encoding="utf-8")
    terms = (tmp_path / "out" / "terms.tsv").read_text(encoding="utf-8").splitlines()
    assert len(terms) == report["term_sentences"] and all(len(row.split("\t")) == 3 for row in terms)


def tiny_mirror(tmp_path: Path, lines: list[str]) -> tuple[Path, Path]:
    """(a tiny random checkpoint, a mirror folder whose split tiny_test holds `lines` on both sides)."""
    import gzip

    from mt.deploy.tiny import write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for lang in ("en", "de"):
        with gzip.open(mirror / f"tiny_test.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return ckpt, mirror


def test_exp_robust_input_runs_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """exp_robust_input.py end to end on a handful of sentences: every span back once with protection
    on, and no line where nothing applies changed."""
    import json

    lines = ["A man rides a bike.", "Two dogs play in the snow.", "3 boys stand on a pier.", "A woman reads."]
    ckpt, mirror = tiny_mirror(tmp_path, lines)
    run("experiments/exp_robust_input.py", "-c", str(ckpt), "--mirror", str(mirror), "--split", "tiny_test",
        "--beam", "1", "--strings", "12", "--case-sentences", "2", "--out", str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert report["spans"]["strings"] == 12 and report["spans"]["on"]["kept_exactly_once_pct"] == 100.0
    assert report["identity"]["something_applies"] == 1 and report["identity"]["changed_where_nothing_applies"] == 0
    assert "| upper |" in (tmp_path / "out" / "results.md").read_text(encoding="utf-8")


def test_exp_completion_runs_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """exp_completion.py (issue 73) end to end on a handful of sentences: every position replayed,
    every prefix cut inside a word continued by the model's own output, keystrokes counted."""
    import json

    lines = ["a man rides a bike", "two dogs play in the snow", "a woman reads"]
    ckpt, mirror = tiny_mirror(tmp_path, lines)
    run("experiments/exp_completion.py", "-c", str(ckpt), "--mirror", str(mirror), "--split", "tiny_test",
        "--beam", "1", "--alternatives", "3", "--keystroke-sentences", "1", "--out", str(tmp_path / "out"),
        "--paired-prefill")
    report = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert report["words"]["positions"] == 14 and report["words"]["cut"] == 11
    paired = report["prefill"]  # the keystrokes again, with and without mt.decode.prefill
    assert paired["completions"] == paired["equal_outputs"] == report["keystrokes"]["completions"]
    assert report["words"]["cut_spelled_pct"] == 100.0
    assert report["keystrokes"]["keys"] <= report["keystrokes"]["characters"] == len(lines[0])
    assert "keystrokes saved" in (tmp_path / "out" / "results.md").read_text(encoding="utf-8")


def test_exp_glossary_company_terms_runs_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """exp_glossary.py --terms/--rewrite (issue 65) end to end on a handful of sentences: the
    sentences holding a term are chosen, their references rewritten, each way of keeping a term
    reported, and the sentences without a term come out byte-identical."""
    import gzip
    import json

    from mt.deploy.tiny import write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    sources = ["the cat sat", "two cats ran", "no term here", "a dog"]
    refs = ["die katze sass", "zwei katzen liefen", "kein wort", "ein hund"]
    for lang, lines in (("en", sources), ("de", refs)):
        with gzip.open(mirror / f"tiny_test.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    (tmp_path / "terms.tsv").write_text("cat\tmieze|miezen\n", encoding="utf-8")
    (tmp_path / "rewrite.tsv").write_text("mieze\tkatze\tmieze\nmieze\tkatzen\tmiezen\n", encoding="utf-8")
    run("experiments/exp_glossary.py", "-c", str(ckpt), "--mirror", str(mirror), "--splits", "tiny_test",
        "--terms", str(tmp_path / "terms.tsv"), "--rewrite", str(tmp_path / "rewrite.tsv"), "--beam", "2",
        "--threads", "1", "--out", str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert report["sentences"] == 2 and report["plain"]["term_success"]["terms"] == 2
    assert all(report[way]["term_success"]["rate"] == 100.0 for way in ("off", "avoid", "place", "both", "alone"))
    assert (report["without_terms"]["sentences"], report["without_terms"]["identical"]) == (2, 2)
    rewritten = (tmp_path / "out" / "ref.rewritten").read_text(encoding="utf-8").splitlines()
    assert rewritten == ["die mieze sass", "zwei miezen liefen"]
    assert "| place |" in (tmp_path / "out" / "results.md").read_text(encoding="utf-8")


def test_gpu_check_runs_every_stage_on_the_cpu(multi30k_dir: Path, tmp_path: Path) -> None:
    """scripts/bench/gpu_check.sh with its tiny override (GPU_CHECK_TINY=1: CPU, tiny model, 8 s of
    training): every stage ends well and the report holds the bench rows (mt eager and compiled),
    the loop-over-step ratio and a BLEU."""
    import json
    import os

    out = tmp_path / "out"
    env = {**os.environ, "GPU_CHECK_TINY": "1", "DATA": str(multi30k_dir), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "scripts/bench/gpu_check.sh"), str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["stages"] == {"bench": "ok", "evaluate": "ok", "loop": "ok", "train": "ok"}, proc.stdout[-3000:]
    assert {r["model"] for r in report["bench"]["rows"]} == {"mt", "mt compiled"}
    assert 0 < report["loop"]["loop_over_step"] and report["test_2016_flickr_bleu"] is not None
    table = (out / "gpu_check.md").read_text()
    assert "| loop / bare step |" in table and "| BLEU test_2016_flickr after the budget |" in table


def test_exp_loop_guard_runs_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """exp_loop_guard.py end to end on a handful of sentences: a guard row per setting, and the
    retry section (off and on, timed) for each --retry-splits set."""
    import gzip
    import json

    from mt.deploy.tiny import write_random_checkpoint
    ckpt = write_random_checkpoint(tmp_path / "tiny.pt", seed=1)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    lines = ["A man rides a bike.", "Two dogs play in the snow.", "A woman reads."]
    for split in ("tiny_val", "tiny_test"):
        for lang in ("en", "de"):
            with gzip.open(mirror / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
    run("experiments/exp_loop_guard.py", "-c", str(ckpt), "--mirror", str(mirror), "--split", "tiny_val",
        "--ngram", "3", "--penalty", "--retry-splits", "tiny_test", "--rounds", "2", "--out", str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert [row["no_repeat_ngram_size"] for row in report["rows"]] == [0, 3]
    [retry] = report["retry"]["sets"]
    assert retry["split"] == "tiny_test" and 0 <= retry["changed"] <= 3 and retry["seconds_on"] > 0
    assert 0 <= report["retry"]["odd_loops_on"] <= 40
    assert "| on | tiny_test |" in (tmp_path / "out" / "results.md").read_text(encoding="utf-8")
