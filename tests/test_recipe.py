"""`mt train --data` (mt/train/recipe.py, recipe_run.py), one-file corpora and their held-out sets
(mt/data/holdout.py), and the paired bootstrap comparison of `mt evaluate` (mt/eval/compare.py)."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_evaluate import run_cli

from mt.config_load import config_from_dict, load_config
from mt.data.clean_rules import normalise
from mt.data.holdout import resolve_single_files, split_pairs
from mt.data.survey import CorpusSurvey
from mt.errors import MTError
from mt.train import recipe_run
from mt.train.recipe import Machine, choose

CPU = Machine("cpu", "test CPU", 110.0, "fp32")  # 88 GFLOP/s achieved: the demo's size and budget clear rung 1's margin


def corpus_of(pairs: int) -> CorpusSurvey:
    """A Multi30k-like corpus of `pairs` pairs (12 words a side, distinct words growing with it)."""
    return CorpusSurvey(pairs, 12 * pairs, 12 * pairs, int(40 * pairs**0.6), int(50 * pairs**0.6),
                        "Latin", "Latin", 0)


def chosen(pairs: int, budget_s: float) -> dict:
    r = choose(corpus_of(pairs), budget_s, CPU).config
    return {**r["tokenizer"], **r["model"], **r["train"]}


def test_the_rule_never_shrinks_vocabulary_or_model_as_the_corpus_or_budget_grows():
    sizes = [1_000, 3_000, 10_000, 30_000, 100_000, 1_000_000, 5_000_000]
    budgets = [300, 3600, 8 * 3600]
    grid = {(n, b): chosen(n, b) for n in sizes for b in budgets}
    for b in budgets:
        for small, large in zip(sizes, sizes[1:]):
            x, y = grid[small, b], grid[large, b]
            for key in ("vocab_size", "d_model", "encoder_layers", "d_ff", "heads", "max_tokens"):
                assert y[key] >= x[key], (key, small, large, b)
            assert y["dropout"] <= x["dropout"] and y["label_smoothing"] <= x["label_smoothing"], (small, large, b)
    for n in sizes:
        for short, long in zip(budgets, budgets[1:]):
            assert grid[n, long]["d_model"] >= grid[n, short]["d_model"], (n, short, long)
    # The ends the evidence is about: small data gets a small vocabulary and model and more
    # regularisation; the demo's size and budget get the demo's measured model and vocabulary.
    assert grid[1_000, 3600]["vocab_size"] < grid[30_000, 3600]["vocab_size"] and grid[1_000, 3600]["d_model"] == 128
    assert grid[1_000, 3600]["dropout"] == 0.3 and grid[1_000, 3600]["label_smoothing"] == 0.1
    # The key grid's best points at 4 minutes (docs/guides/own-corpus.md): d_model 128 up to 10k
    # pairs, dropout 0.3 at 1k pairs, 0.2 at 3k and 0.1 at 10k, label smoothing 0.1, and a
    # vocabulary of half the distinct words (2,838, 5,488 and 11,303 here), at most 5,000 at d_model
    # 128 (an output layer within half its matrix parameters; 8,000 lost to 4,500 at 10k pairs).
    four_minutes = [chosen(n, 240) for n in (1_000, 3_000, 10_000)]
    assert [c["vocab_size"] for c in four_minutes] == [3000, 5000, 5000]
    assert [c["d_model"] for c in four_minutes] == [128, 128, 128]
    assert [c["dropout"] for c in four_minutes] == [0.3, 0.2, 0.1]
    assert {c["label_smoothing"] for c in four_minutes} == {0.1}
    demo = chosen(29_000, 1200)
    assert (demo["vocab_size"], demo["d_model"], demo["d_ff"], demo["lr"]) == (8000, 192, 768, 2e-3)
    # 4.5M+ pairs ask for 32k pieces (Gowda & May); the CPU's 8 hours buy d_model 256, whose output
    # layer caps them at 14k; a GPU's buy a larger model and all 32k.
    assert grid[5_000_000, 8 * 3600]["d_model"] == 256 and grid[5_000_000, 8 * 3600]["vocab_size"] == 14_000
    gpu = choose(corpus_of(5_000_000), 8 * 3600, Machine("cuda", "test GPU", 50_000.0, "bf16")).config
    assert gpu["model"]["d_model"] >= 512 and gpu["tokenizer"]["vocab_size"] == 32_000
    separate = choose(CorpusSurvey(10_000, 1, 1, 9_000, 9_000, "Latin", "Cyrillic", 0), 3600, CPU)
    assert separate.config["tokenizer"]["joint"] is False


def test_a_rung_is_climbed_only_past_its_margin_and_the_reason_names_the_near_miss():
    """Issue 54: a Zen 3 read 83 and 101 GFLOP/s a minute apart and chose two models. Near the
    boundary the smaller rung stays until the budget clears TOKENS_PER_PARAM by RUNG_MARGIN."""
    from mt.train.recipe import LADDER, RUNG_MARGIN, TOKENS_PER_PARAM, _per_param

    def at(gflops: float) -> Machine:
        return Machine("cpu", "test CPU", gflops, "fp32", step_gflops=gflops)

    boundary = next(g for g in range(30, 400) if _per_param(1, 1200, at(g)) >= TOKENS_PER_PARAM)
    assert _per_param(1, 1200, at(boundary)) >= TOKENS_PER_PARAM  # where the rule without a margin climbs
    for gflops in (boundary, boundary * 1.1):  # noise of 10% around the boundary: the same model
        recipe = choose(corpus_of(29_000), 1200, at(gflops))
        assert recipe.config["model"]["d_model"] == LADDER[0].d_model
        reason = recipe.reasons["model.d_model"]
        assert f"rung 1 (d_model {LADDER[1].d_model}) would see" in reason
        assert f"at {at(gflops).flops / 1e9:.0f} GFLOP/s" in reason
        assert f"under the {TOKENS_PER_PARAM * (1 + RUNG_MARGIN):.2f} it needs" in reason
    clear = boundary * (1 + RUNG_MARGIN) * 1.02
    assert choose(corpus_of(29_000), 1200, at(clear)).config["model"]["d_model"] == LADDER[1].d_model


def test_the_machine_is_measured_on_the_training_step_by_a_median() -> None:
    """measure_machine times the real step (forward, fused loss, backward, AdamW) of the demo-size
    rung: a positive figure in the recipe's FLOP count; `flops` believes it scaled to what whole
    runs sustain (STEP_SUSTAINED), and `describe` names both."""
    from mt.train.recipe import STEP_SUSTAINED, _StepTimer

    timer = _StepTimer("fp32")
    step = timer.gflops(timer.seconds(3))
    assert step > 0
    m = Machine("cpu", "x", 100.0, "fp32", step_gflops=step)
    assert m.flops == step * 1e9 * STEP_SUSTAINED
    assert f"training step {step:.0f} GFLOP/s (~{step * STEP_SUSTAINED:.0f} sustained)" in m.describe()


def test_a_slow_spell_of_the_machine_is_outvoted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared machine's speed swings by a third from one second to the next: the readings are
    interleaved rounds, so one slow round (the first here, 3x slower) does not set the figure, as
    it would were the step timed in one burst."""
    from mt.train import recipe

    rounds = iter([[0.3] * 3] + [[0.1] * 3] * (recipe.MEASURE_ROUNDS - 1))
    monkeypatch.setattr(recipe._StepTimer, "seconds", lambda self, steps: [0.1] * steps if steps == 2 else next(rounds))
    products = iter([[0.03] * 3] + [[0.01] * 3] * (recipe.MEASURE_ROUNDS - 1))
    monkeypatch.setattr(recipe, "_product_seconds", lambda a, b, readings: next(products))
    m = recipe.measure_machine(threads=1)
    fast = recipe._StepTimer("fp32").flops / 0.1 / 1e9
    assert m.step_gflops == pytest.approx(fast) and m.gflops == pytest.approx(2 * recipe.PRODUCT_N**3 / 0.01 / 1e9)
    assert next(rounds, None) is None  # every round was read


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_precision_set_by_the_user_is_the_one_timed(monkeypatch: pytest.MonkeyPatch, precision: str) -> None:
    """`--set train.precision=fp32` on a machine where auto would pick bf16 (or bf16 where it would
    pick fp32) trains in that precision: the step is timed in it, not in auto's choice."""
    from mt.train import recipe

    auto = "fp32" if precision == "bf16" else "bf16"
    monkeypatch.setattr(recipe, "bf16_feature", lambda device: "AVX-512 BF16" if auto == "bf16" else None)
    monkeypatch.setattr(recipe, "matmul_speedup", lambda: 2.0)
    timed: list[str] = []
    monkeypatch.setattr(recipe._StepTimer, "seconds", lambda self, steps: timed.append(self.precision) or [0.1] * steps)
    monkeypatch.setattr(recipe, "_product_seconds", lambda a, b, readings: [0.01] * readings)
    assert recipe.measure_machine(threads=1).precision == auto
    timed.clear()
    m = recipe.measure_machine(threads=1, precision=precision)
    assert m.precision == precision and set(timed) == {precision}


def test_split_holds_out_seeded_sets_that_share_no_sentence_with_train():
    pairs = [(f"Sentence {i} here.", f"Satz {i} hier.") for i in range(3000)]
    pairs += [(f"sentence {i} HERE", f"Anderer Satz {i}") for i in range(0, 3000, 7)]  # normalised duplicates
    pairs += pairs[:50]  # exact duplicates
    twins = [p for i in range(600) for p in ((f"S {i}.", f"T {i}."), (f"s {i}", f"t {i}!"))]  # every pair has a twin
    for case in (pairs, twins):
        split = split_pairs(case, seed=3)
        assert len(split.valid) == len(split.test) == max(100, round(0.05 * len(case)))
        held_src = {normalise(s) for s, _ in split.valid + split.test}
        held_tgt = {normalise(t) for _, t in split.valid + split.test}
        assert len(held_src) == len(held_tgt) == len(split.valid) + len(split.test)
        assert not any(normalise(s) in held_src or normalise(t) in held_tgt for s, t in split.train)
        assert len(split.train) + len(split.valid) + len(split.test) + split.removed == len(case)
    assert split.removed == 200  # each held-out twin's other half left training
    assert split_pairs(pairs, seed=3) == split_pairs(pairs, seed=3)
    assert split_pairs(pairs, seed=3).test != split_pairs(pairs, seed=4).test
    with pytest.raises(MTError, match="too few to hold out"):
        split_pairs(pairs[:499], seed=1)


@pytest.fixture(scope="module")
def corpus_tsv(mirror_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 Multi30k pairs as one TSV file: a corpus as a user has it."""
    with gzip.open(mirror_dir / "train.en.gz", "rt", encoding="utf-8") as en, \
            gzip.open(mirror_dir / "train.de.gz", "rt", encoding="utf-8") as de:
        lines = [f"{s.rstrip(chr(10))}\t{t.rstrip(chr(10))}" for s, t, _ in zip(en, de, range(600))]
    path = tmp_path_factory.mktemp("own") / "corpus.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_train_from_a_corpus_file_writes_a_config_that_reproduces_the_run(corpus_tsv, tmp_path, monkeypatch, capsys):
    # The machine as the recipe's other CLI tests give it (tests/test_recipe_scripts.py): each call
    # would otherwise time MEASURE_ROUNDS rounds of real steps and products (issue 54's noise), which
    # none of this test's checks read; measure_machine has its own tests above, and
    # tests/test_bench_scripts.py's gpu_check runs `mt train --data` with the real measurement.
    monkeypatch.setattr(recipe_run, "measure_machine", lambda threads, precision: CPU)
    args = ["train", "--data", corpus_tsv, "--src-lang", "en", "--tgt-lang", "de", "--budget", "10m",
            "--set", f"run_root={tmp_path}", "--set", "model.dropout=0.05", "--set", "train.max_updates=2",
            "--set", "train.valid_bleu=false", "--set", "train.threads=1", "--set", "train.precision=fp32",
            "--set", "train.average_last=0"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--dry-run")
    assert code == 0, err
    written = tmp_path / "corpus_en_de" / "recipe.yaml"
    text = written.read_text(encoding="utf-8")
    assert "dropout: 0.05  # set by --set" in text and "model.dropout = 0.05  (set by --set)" in out
    # 600 less the held-out 2 x 100; half as many pieces as distinct words, in steps of 500, at least 1,000
    vocab = re.search(r"vocab_size: (\d+)  # 400 pairs, ([\d,]+) distinct words", text)
    assert vocab, text
    assert int(vocab[1]) == max(1000, round(int(vocab[2].replace(",", "")) / 2 / 500) * 500)
    assert not (tmp_path / "corpus_en_de" / "checkpoints").exists()  # --dry-run trains nothing
    split = json.loads((tmp_path / "corpus_en_de" / "corpus" / "en-de" / "split.json").read_text())
    assert (split["train"], split["val"], split["test"], split["removed_overlapping_train_pairs"]) == (400, 100, 100, 0)

    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "training it now" in out and "outlook" in out
    stored = config_from_dict(yaml.safe_load((tmp_path / "corpus_en_de" / "config.yaml").read_text()))
    again = resolve_single_files(load_config(written))  # what `mt train recipe.yaml` runs
    assert stored == replace(again, train=replace(again.train, pad_multiple=stored.train.pad_multiple))
    assert stored.model.dropout == 0.05 and stored.data.test_splits == ("test",)
    trained = written.read_text(encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, *args)  # again: the finished run's recipe is left as it was
    assert code == 2 and "already holds a training run" in err and written.read_text(encoding="utf-8") == trained


@pytest.mark.parametrize("case, message", [
    ("empty", "holds no sentence pairs"),
    ("one_language", "found no de side"),
    ("budget", "--budget: must be a duration above 0"),
    ("too_small", "too few to hold out"),
])
def test_bad_corpus_or_budget_is_one_line(case, message, tmp_path, monkeypatch, capsys):
    data = tmp_path / "c.tsv"
    data.write_text("hello\tHallo\n" * 20 if case == "too_small" else "", encoding="utf-8")
    budget = "0" if case == "budget" else "5m"
    if case == "one_language":
        data = tmp_path / "c.en"
        data.write_text("hello\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "train", "--data", data, "--src-lang", "en", "--tgt-lang", "de",
                             "--budget", budget, "--dry-run", "--set", f"run_root={tmp_path / 'runs'}")
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_data_clean_reads_one_tsv_file(corpus_tsv, tmp_path, monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "data", "clean", corpus_tsv, "-o", tmp_path / "out",
                             "--src-lang", "en", "--tgt-lang", "de")
    assert code == 0, err
    assert len((tmp_path / "out" / "train.de").read_text(encoding="utf-8").splitlines()) > 550


def test_evaluate_compares_systems_with_paired_bootstrap(tmp_path, monkeypatch, capsys):
    refs = [f"the {w} sat on the mat number {i}" for i, w in enumerate(["cat", "dog", "man", "bird"] * 30)]
    good = list(refs)
    good[::10] = [r.replace("the mat", "a mat") for r in refs[::10]]
    bad = [r.replace("sat on", "near").replace("number", "no") for r in refs]
    files = {}
    for name, lines in (("ref", refs), ("bad", bad), ("good", good)):
        files[name] = tmp_path / f"{name}.en"
        files[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "--hyp", files["bad"], "--hyp", files["good"],
                             "--hyp", files["bad"], "--ref", files["ref"], "--out-dir", tmp_path / "eval")
    assert code == 0, err
    report = json.loads((tmp_path / "eval" / "comparison.json").read_text())
    base, better, same = report["systems"]
    assert base["p_value"] is None and better["p_value"] < 0.05 and same["p_value"] == 1.0
    assert better["bleu"] > base["bleu"] and better["ci"] > 0 and "bs:1000" in report["bleu_signature"]
    monkeypatch.chdir(tmp_path / "eval")  # the default --out-dir, eval/, is relative to here
    code, _, err = run_cli(monkeypatch, capsys, "evaluate", "--hyp", files["bad"], "--hyp", tmp_path / "nope",
                           "--ref", files["ref"])
    assert code == 2 and "Traceback" not in err and "nope: file not found" in err
    assert not (tmp_path / "eval" / "eval").exists()  # nothing scored before the missing file was found
