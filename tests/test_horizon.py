"""Schedule keys as a share of the run (mt/train/horizon.py): parsing, resolution from a fake clock,
warnings for values in updates that cannot fit, and the trainer driven by a fake clock."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from test_train import copy_run

import mt.train.loop
import mt.train.step
import mt.train.validate
from mt.config import Config, TrainConfig
from mt.config_checks import parse_share
from mt.config_load import config_from_dict, load_config
from mt.errors import MTError
from mt.model.checkpoint import load_checkpoint
from mt.train.horizon import REPLAN_TOLERANCE, SPEED_UPDATES, RunHorizon

TINY_YAML = Path(__file__).resolve().parent.parent / "configs" / "tiny.yaml"


def _run(h: RunHorizon, seconds_per_update: float, updates: int, first_update_extra: float = 0.0) -> list[str]:
    """Drive `h` as the loop does: observe before each update, the clock advancing by a fixed time
    per update (the first update `first_update_extra` slower). Returns every line logged."""
    lines, elapsed = [], 0.0
    for update in range(updates):
        lines += h.observe(update, update, elapsed)
        elapsed += seconds_per_update + (first_update_extra if update == 0 else 0.0)
    return lines


def test_parse_share() -> None:
    assert parse_share("train.warmup", "5%") == pytest.approx(0.05)
    assert parse_share("train.warmup", " 12.5 % ") == pytest.approx(0.125)
    assert parse_share("train.warmup", "0%") == 0.0
    assert parse_share("train.warmup", 400) is None
    with pytest.raises(MTError, match=r"'train.warmup': expected a number of updates or a share of the run like '5%', got '5'"):
        parse_share("train.warmup", "5")
    with pytest.raises(MTError, match="at most 100%"):
        parse_share("train.valid_every", "150%")


def test_budget_shares_resolve_from_the_speed_after_the_first_update() -> None:
    """200 s budget at 2 s/update (the first update 30 s slower, one-time costs): the estimate
    ignores the first update, so ~ 20 + (200 - 70) / 2 = 85 updates; shares of that, logged once."""
    t = TrainConfig(time_budget="200s", warmup="10%", valid_every="25%", save_every="10%")
    h = RunHorizon(t, budget=200.0, epoch_updates=0, saved={})
    assert not h.resolved and h.every("valid_every") == 0 and h.every("save_every") == 0
    lines = _run(h, 2.0, SPEED_UPDATES + 1, first_update_extra=30.0)
    # clock before update 21: 32 + 19 * 2 = 70 s; speed (70 - 32) / 19 = 2.0 s/update
    assert h.estimate == 20 + (200 - 70) // 2 == 85
    assert h.values == {"warmup": round(8.5), "valid_every": round(21.25), "save_every": round(8.5)}
    assert len(lines) == 1
    assert lines[0].startswith("run length: ~85 updates (the 3m20s budget at 2 s/update, measured over updates 2-20)")
    assert "warmup 10% = 8 updates, valid_every 25% = 21 updates, save_every 10% = 8 updates" in lines[0]
    assert _run(h, 2.0, 5) == []  # resolved once


def test_provisional_warmup_never_ramps_faster_than_speed_updates() -> None:
    """Before the estimate a share of warmup ramps over max(SPEED_UPDATES, share of the running estimate)."""
    h = RunHorizon(TrainConfig(time_budget="1000s", warmup="50%"), budget=1000.0, epoch_updates=0, saved={})
    assert h.warmup(0, 0.0) == SPEED_UPDATES  # no speed yet
    h.observe(1, 1, 1.0)  # after the first update
    assert h.warmup(1, 1.0) == SPEED_UPDATES
    # 1 s/update since: ~ 5 + 995 updates, half of it
    assert h.warmup(5, 5.0) == int(0.5 * (5 + 995))
    small = RunHorizon(TrainConfig(time_budget="1000s", warmup="1%"), budget=1000.0, epoch_updates=0, saved={})
    small.observe(1, 1, 1.0)
    assert small.warmup(5, 5.0) == SPEED_UPDATES  # 1% of ~1,000 = 10 < the floor


def test_max_updates_resolves_at_once_and_caps_a_budget_estimate() -> None:
    h = RunHorizon(TrainConfig(max_updates=200, warmup="5%", valid_every="50%"), budget=0.0, epoch_updates=0, saved={})
    assert h.resolved and h.values == {"warmup": 10, "valid_every": 100, "save_every": 0}
    assert h.observe(0, 0, 0.0) == ["run length: ~200 updates (max_updates); warmup 5% = 10 updates, "
                                     "valid_every 50% = 100 updates"]
    # a 1 h budget at 1 s/update allows ~3,600 updates, but max_updates ends the run first
    capped = RunHorizon(TrainConfig(max_updates=300, time_budget="1h", warmup="10%"), budget=3600.0,
                        epoch_updates=0, saved={})
    _run(capped, 1.0, SPEED_UPDATES + 1)
    assert capped.estimate == 300 and capped.values["warmup"] == 30


def test_max_epochs_is_a_limit_too() -> None:
    h = RunHorizon(TrainConfig(max_epochs=4, warmup="25%"), budget=0.0, epoch_updates=4 * 50, saved={})
    assert h.values["warmup"] == 50
    assert "max_epochs 4" in h.observe(0, 0, 0.0)[0]


def test_updates_that_cannot_fit_the_budget_warn_once_with_the_estimate() -> None:
    """The issue's case: warmup 400 on a CPU where a 5-minute budget allows ~324 updates."""
    t = TrainConfig(time_budget="5m", warmup=400, valid_every=1000, save_every=50)
    h = RunHorizon(t, budget=300.0, epoch_updates=0, saved={})
    lines = _run(h, 300 / 324, SPEED_UPDATES + 3)
    assert h.values == {"warmup": 400, "valid_every": 1000, "save_every": 50}  # values in updates are kept
    assert lines[0].startswith("run length: ~324 updates (the 5m budget at 0.926 s/update")
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 2
    assert warnings[0].startswith("warning: train.warmup=400 updates is longer than the ~324 updates of this run")
    assert "the learning rate never reaches its peak; a share fits any machine, e.g. warmup: 5%" in warnings[0]
    assert warnings[1].startswith("warning: train.valid_every=1000 updates")
    # without a budget the check runs at once against max_updates
    fixed = RunHorizon(TrainConfig(max_updates=100, warmup=400), budget=0.0, epoch_updates=0, saved={})
    assert fixed.observe(0, 0, 0.0)[0].startswith("warning: train.warmup=400 updates is longer than the ~100 updates")


def _run_budget(h: RunHorizon, seconds_at: Callable[[float], float], start: tuple[int, float] = (0, 0.0)
                ) -> tuple[int, list[str]]:
    """Drive `h` until its budget is spent, an update taking `seconds_at(elapsed)` seconds; from
    update and elapsed `start` (a resumed session). Returns (updates made by then, lines logged)."""
    lines, (update, elapsed), session = [], start, 0
    while elapsed < h.budget:
        lines += h.observe(update, session, elapsed)
        elapsed += seconds_at(elapsed)
        update, session = update + 1, session + 1
    return update, lines


def test_resolved_values_survive_a_resume_then_follow_the_new_session_speed() -> None:
    """A resumed session keeps the plan it was given, until it has measured its own speed: 4.5x
    slower after the resume at 100 s, the plan moves down within a twentieth of the budget, says so."""
    t = TrainConfig(time_budget="200s", warmup="10%", valid_every="25%")
    h = RunHorizon(t, budget=200.0, epoch_updates=0, saved={})
    _run(h, 2.0, SPEED_UPDATES + 1)
    resumed = RunHorizon(t, budget=200.0, epoch_updates=0, saved=h.saved())
    assert resumed.resolved and resumed.values == h.values and resumed.estimate == h.estimate == 100
    assert resumed.warmup(50, 100.0) == 10
    made, lines = _run_budget(resumed, lambda _: 9.0, start=(50, 100.0))
    assert made == 50 + math.ceil(100 / 9) == 62
    assert lines and all(line.startswith("plan moved: ~100 -> ~") for line in lines[:1])
    assert abs(resumed.estimate - made) <= 0.1 * made, (resumed.estimate, made, lines)
    assert resumed.values["warmup"] == 10  # finished before the resume: no second ramp
    assert resumed.values["valid_every"] == round(0.25 * resumed.estimate)


def test_the_plan_follows_a_machine_that_slows_down() -> None:
    """Issue 54's case: a 200 s budget, the machine 3x slower from 70 s on (two busy processes
    started). The first estimate believes updates 2-20 (~400 updates); the plan then moves, each
    move logged with its size, and ends within 10% of the updates really made."""
    h = RunHorizon(TrainConfig(time_budget="200s", warmup="6%", valid_every="25%"), budget=200.0,
                   epoch_updates=0, saved={})
    made, lines = _run_budget(h, lambda elapsed: 0.5 if elapsed < 70 else 1.5)
    assert lines[0].startswith("run length: ~400 updates")
    moves = [line for line in lines if line.startswith("plan moved:")]
    assert moves and all("%; " in line and "s/update over updates" in line for line in moves)
    assert made == 140 + math.ceil(130 / 1.5) == 227
    assert abs(h.estimate - made) <= 0.1 * made, (h.estimate, made, moves)
    assert h.values["warmup"] == 24  # 6% of the first plan: reached at update 24, before the slow-down


def test_the_plan_follows_a_slow_start() -> None:
    """Issue 53's GPU case: the first 100 updates 7x slower than the rest (kernels, compile). The
    first estimate is far too low; re-planning brings it to within 10%, and a share of warmup not
    yet reached moves with the plan."""
    h = RunHorizon(TrainConfig(time_budget="150s", warmup="50%"), budget=150.0, epoch_updates=0, saved={})
    updates = iter(range(10**6))
    made, lines = _run_budget(h, lambda _: 0.35 if next(updates) < 100 else 0.05)
    first = int(lines[0].split("~")[1].split(" ")[0].replace(",", ""))
    assert first < 0.25 * made
    assert abs(h.estimate - made) <= 0.1 * made, (h.estimate, made, lines)
    assert h.values["warmup"] > first // 2  # the ramp grew with the plan while it was under way


def test_a_steady_machine_keeps_its_plan() -> None:
    """Within REPLAN_TOLERANCE the plan holds still: no line, no change of interval."""
    h = RunHorizon(TrainConfig(time_budget="300s", warmup="5%", valid_every="10%"), budget=300.0, epoch_updates=0, saved={})
    jitter = iter([1.0, 1.04, 0.97, 1.02] * 1000)
    made, lines = _run_budget(h, lambda _: next(jitter))
    assert len(lines) == 1 and lines[0].startswith("run length:")
    assert abs(h.estimate - made) <= REPLAN_TOLERANCE * made


def test_config_accepts_shares_and_names_bad_ones(tmp_path: Path) -> None:
    cfg = load_config(TINY_YAML, ["train.warmup=5%", "train.valid_every=25%", "train.save_every=10%"])
    assert (cfg.train.warmup, cfg.train.valid_every, cfg.train.save_every) == ("5%", "25%", "10%")
    assert load_config(TINY_YAML, ["train.warmup=250"]).train.warmup == 250
    with pytest.raises(MTError, match=r"config key 'train.warmup': expected a number of updates or a share"):
        load_config(TINY_YAML, ["train.warmup=soon"])
    with pytest.raises(MTError, match=r"'train.save_every': a share of the run must be at most 100%"):
        load_config(TINY_YAML, ["train.save_every=101%"])
    with pytest.raises(MTError, match=r"'train.warmup': must be at least 0, got -5"):
        load_config(TINY_YAML, ["train.warmup=-5"])
    with pytest.raises(MTError, match=r"'train.warmup': expected int \| str, got 1.5"):
        load_config(TINY_YAML, ["train.warmup=1.5"])
    with pytest.raises(MTError, match="'train.valid_every': '25%' is a share of the run, which needs a limit"):
        config_from_dict({"name": "x", "train": {"valid_every": "25%"}})


class FakeClock:
    """Training seconds that pass only when an update runs: `seconds_per_update` each."""

    def __init__(self, seconds_per_update: float) -> None:
        self.now, self.step = 0.0, seconds_per_update

    def __call__(self) -> float:
        return self.now


def test_trainer_resolves_shares_of_a_time_budget_with_a_fake_clock(
        tmp_path: Path, tiny_run: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """5 s per update against a 500 s budget: 100 updates. warmup 10% = 10, valid_every 25% = 25,
    save_every 10% = 10; the learning rate follows the resolved warmup, validations and periodic
    checkpoints fall on the resolved intervals, last.pt keeps the values, train.log says it."""
    clock = FakeClock(5.0)
    monkeypatch.setattr(mt.train.loop, "CLOCK", clock)
    real_step = mt.train.step.UpdateStep.__call__

    def timed_step(self: mt.train.step.UpdateStep, chunk: list, *, scale: float) -> tuple:
        clock.now += clock.step
        return real_step(self, chunk, scale=scale)

    monkeypatch.setattr(mt.train.step.UpdateStep, "__call__", timed_step)
    cfg = copy_run(tiny_run, tmp_path, max_updates=0, time_budget="500s", warmup="10%", valid_every="25%",
                   save_every="10%", keep_checkpoints=100, valid_bleu=False, log_every=1, threads=1,
                   schedule="inverse_sqrt", cooldown=0.2)
    mt.train.loop.train(cfg)
    records = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    lr = {r["update"]: r["lr"] for r in records if r["kind"] == "train"}
    assert max(lr) == 100  # the budget ends the run
    peak = cfg.train.lr
    assert lr[5] == pytest.approx(peak * 5 / SPEED_UPDATES)  # provisional ramp
    assert lr[30] == pytest.approx(peak * math.sqrt(10 / 30))  # resolved warmup 10, before the cooldown
    valid = {r["update"] for r in records if r["kind"] == "valid"}
    assert {25, 50, 75, 100} <= valid
    periodic = sorted(int(p.stem.split("_")[1]) for p in (cfg.run_dir / "checkpoints").glob("update_*.pt"))
    assert [n for n in periodic if n > SPEED_UPDATES] == list(range(30, 101, 10))
    state = load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["training"]["state"]
    assert state["horizon"] == {"values": {"warmup": 10, "valid_every": 25, "save_every": 10}, "estimate": 100}
    log = (cfg.run_dir / "train.log").read_text()
    assert "run length: ~100 updates (the 8m20s budget at 5 s/update, measured over updates 2-20); warmup 10% = " \
           "10 updates, valid_every 25% = 25 updates, save_every 10% = 10 updates" in log
    assert "schedule inverse_sqrt (warmup 10% of the run" in log


def test_validation_is_bounded_to_its_share_of_the_session(
        tmp_path: Path, tiny_run: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: validation took a quarter of a GPU run. With train.valid_max_share 0.2, 1 s per
    update and 10 s per validation asked every 5 updates (2/3 of the time if all ran), validations
    are skipped while they hold 20% of the session: the share ends near the bound, the closing one
    still runs, and the log says so once, with the count at the end."""
    clock = FakeClock(1.0)
    monkeypatch.setattr(mt.train.loop, "CLOCK", clock)
    real_step, real_validate = mt.train.step.UpdateStep.__call__, mt.train.validate.Validator.__call__

    def timed_step(self: mt.train.step.UpdateStep, chunk: list, *, scale: float) -> tuple:
        clock.now += clock.step
        return real_step(self, chunk, scale=scale)

    def slow_validation(self: mt.train.validate.Validator, model: object) -> dict:
        clock.now += 10.0
        return real_validate(self, model)

    monkeypatch.setattr(mt.train.step.UpdateStep, "__call__", timed_step)
    monkeypatch.setattr(mt.train.validate.Validator, "__call__", slow_validation)
    cfg = copy_run(tiny_run, tmp_path, max_updates=100, valid_every=5, valid_max_share=0.2, valid_bleu=False,
                   valid_epoch_end=False, threads=1)
    mt.train.loop.train(cfg)
    records = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r["update"] for r in records if r["kind"] == "valid"]
    assert valid[0] == 5 and valid[-1] == 100  # the first, and the closing one
    assert 4 <= len(valid) <= 7, valid  # 20% of ~100 + 10n s: 10n <= 0.2 (100 + 10n) -> n <= 2.5, plus the closing one
    log = (cfg.run_dir / "train.log").read_text()
    assert log.count("validation skipped from update") == 1 and "(train.valid_max_share 20.0%)" in log
    skipped = int(log.split(" validation(s) skipped to keep validation under 20.0%")[0].rsplit(" ", 1)[1])
    assert skipped + len(valid) in (20, 21)  # 20 asked; the closing one runs when update 100's was skipped
