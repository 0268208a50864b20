"""Bad values and bad moments a user can meet outside training itself (issue 14).

The standard everywhere: one line on stderr naming the thing and the problem, a non-zero exit,
no traceback, nothing already written lost.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import mt
import mt.textio
from mt.device import resolve_device
from mt.errors import Interrupted, MTError, MTWarning
from mt.eval.plot import read_metrics
from mt.model.checkpoint import load_checkpoint, save_checkpoint
from mt.textio import remove_stale_temp_files, write_lines_atomic
from mt.train.log import TrainLog, cut_torn_last_line
from mt.train.state import StopSignal

REPO = Path(__file__).resolve().parents[1]


def run_mt(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    """`python -m mt ARGS` with this checkout first on the path."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "mt", *args], check=False, capture_output=True, text=True, input=stdin,
                          env=full_env, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code != 0, exactly one line on stderr, no traceback, and the line names each needle."""
    assert proc.returncode != 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# --------------------------------------------------------------------------- devices


def test_cuda_index_beyond_the_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1", local_rank=0) == torch.device("cuda", 1)
    assert resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(MTError, match=r"device 'cuda:7': no CUDA device 7 .*2 visible"):
        resolve_device("cuda:7", local_rank=0)
    with pytest.raises(MTError, match="no CUDA device 2"):
        resolve_device("cuda", local_rank=2)  # a torchrun rank without its GPU


@pytest.mark.parametrize("name, problem", [("mps", "MPS"), ("cuda:0", "CUDA is not available"),
                                           ("xpu", "expected auto, cpu"), ("gpu", "expected auto, cpu")])
def test_unavailable_or_unknown_devices(monkeypatch: pytest.MonkeyPatch, name: str, problem: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(MTError, match=problem):
        resolve_device(name, local_rank=0)
    assert resolve_device("auto", local_rank=0) == torch.device("cpu")


# Devices this machine lacks, whatever it has: the CUDA index one past its last GPU (cuda:0 without
# CUDA), and mps except on a Mac that has it.
MISSING_DEVICES = [f"cuda:{torch.cuda.device_count()}"] + ([] if torch.backends.mps.is_available() else ["mps"])


@pytest.mark.parametrize("device", MISSING_DEVICES)
def test_translate_on_a_missing_device_is_one_line(tmp_path: Path, device: str) -> None:
    proc = run_mt("translate", "-c", str(tmp_path / "none.pt"), "--device", device, stdin="a\n")
    assert_one_line_error(proc, f"device '{device}'")


# --------------------------------------------------------------------------- torch version


@pytest.mark.parametrize("version", ["2.1.0", "2.5.1+cpu", "1.13.1", "nonsense"])
def test_old_torch_is_one_clear_message(version: str) -> None:
    with pytest.raises(MTError, match=rf"mt needs torch >= 2\.6, found {re.escape(version)}"):
        mt.check_torch(version)


@pytest.mark.parametrize("version", ["2.6.0", "2.13.0+cpu", "2.7.0a0+git1234", "3.0"])
def test_new_enough_torch_passes(version: str) -> None:
    mt.check_torch(version)


def test_installed_torch_meets_the_minimum_and_pyproject_agrees() -> None:
    mt.check_torch()
    need = ".".join(map(str, mt.TORCH_MIN))
    assert f'"torch>={need}"' in (REPO / "pyproject.toml").read_text()


# --------------------------------------------------------------------------- the test suite itself


def test_a_data_test_without_data_fails_unless_offline_is_asked_for(tmp_path: Path) -> None:
    """`make test` without Multi30k must not go green by skipping; MT_TESTS_OFFLINE=1 allows it."""
    target = "tests/test_corpus.py::test_multi30k_val_read"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MT_DATA_MIRROR": str(tmp_path / "no-mirror")}
    env.pop("MT_TESTS_OFFLINE", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target]
    strict = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert strict.returncode == 1, strict.stdout
    assert "Multi30k not found" in strict.stdout and "MT_TESTS_OFFLINE=1" in strict.stdout
    offline = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=300,
                             env={**env, "MT_TESTS_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stdout
    assert "1 skipped" in offline.stdout


def _outcome(check: Callable[[], object]) -> tuple[str, str]:
    """('failed' | 'skipped' | 'passed', message) of calling `check` as a test would."""
    try:
        check()
    except pytest.fail.Exception as e:
        return "failed", str(e)
    except pytest.skip.Exception as e:
        return "skipped", str(e)
    return "passed", ""


def test_a_missing_requirement_fails_unless_offline_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` installs every extra the project declares: a test needing one that is missing
    FAILS naming what to install (conftest `require` and the `requires` marker), and only the
    offline subset (MT_TESTS_OFFLINE=1) skips it."""
    from types import SimpleNamespace

    import conftest

    missing = "mt_tests_no_such_module"
    marked = SimpleNamespace(iter_markers=lambda name: [pytest.mark.requires("json", missing).mark]
                             if name == "requires" else [])
    monkeypatch.setitem(conftest.NEEDS, "a tool", (lambda: False, "install the tool"))
    checks = [lambda: conftest.require(missing), lambda: conftest.pytest_runtest_setup(marked),
              lambda: conftest.require("a tool")]
    monkeypatch.delenv(conftest.OFFLINE_ENV, raising=False)
    assert conftest.require("json") is json
    results = [_outcome(check) for check in checks]
    assert [kind for kind, _ in results] == ["failed"] * 3, results
    assert f"'{missing}' missing" in results[0][1] and "make install-dev" in results[0][1]
    assert results[1] == results[0] and "broken install" in results[0][1]
    assert "a tool missing: install the tool" in results[2][1]
    monkeypatch.setenv(conftest.OFFLINE_ENV, "0")  # what `make test` sets: not the offline subset
    assert [_outcome(check)[0] for check in checks] == ["failed"] * 3
    monkeypatch.setenv(conftest.OFFLINE_ENV, "1")
    results = [_outcome(check) for check in checks]
    assert [kind for kind, _ in results] == ["skipped"] * 3, results
    assert all("MT_TESTS_OFFLINE=1: offline subset" in message for _, message in results)


# Test files of other branches still to be moved to `require` when they are merged (issue 34): empty
# this once they are.
SKIPS_TO_MOVE: set[str] = set()


def test_no_test_file_skips_by_itself() -> None:
    """Skipping is conftest's decision (`require`, the Multi30k fixtures), never a test file's own
    `importorskip` / `skipif` / `skip`: those would skip in `make test` too."""
    needles = ("importor" + "skip(", "mark." + "skipif(", "pytest." + "skip(")
    offenders = {p.name: [n for n in needles if n in p.read_text(encoding="utf-8")]
                 for p in sorted((REPO / "tests").glob("test_*.py")) if p.name not in SKIPS_TO_MOVE}
    assert {name: found for name, found in offenders.items() if found} == {}


# --------------------------------------------------------------------------- full disks, killed writes


class _FillingDisk(io.FileIO):
    """A file whose writes fail with ENOSPC once `room` bytes were written (a disk filling up)."""

    room = 0

    def write(self, data: Any) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return super().write(data)


def full_disk_after(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Every file mt.textio.atomic_write opens from now on runs out of space after `room` bytes."""
    monkeypatch.setattr(_FillingDisk, "room", room)
    monkeypatch.setattr(mt.textio, "open", lambda path, mode: _FillingDisk(path, mode.replace("b", "")),
                        raising=False)


@pytest.mark.parametrize("room", [0, 100, 5000])
def test_full_disk_while_saving_a_checkpoint_is_one_line_and_keeps_the_previous(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    path = tmp_path / "checkpoints" / "last.pt"
    save_checkpoint(path, {"model": torch.arange(4.0)})
    before = path.read_bytes()
    full_disk_after(monkeypatch, room)
    with pytest.raises(MTError) as e:
        save_checkpoint(path, {"model": torch.zeros(100_000)})
    assert str(e.value) == f"{path}: cannot write (No space left on device); the previous file is unchanged"
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]  # no temp file left behind


def test_full_disk_for_a_new_file_says_nothing_was_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_disk_after(monkeypatch, 10)
    with pytest.raises(MTError, match="cannot write .No space left on device.; nothing was written"):
        write_lines_atomic(tmp_path / "out.txt", ["a line longer than ten bytes"])
    assert list(tmp_path.iterdir()) == []


def test_stale_temp_files_of_killed_writers_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    stale = [tmp_path / f".last.pt.{dead}.0123abcd.tmp", tmp_path / f".update_6.pt.{dead}.deadbeef.tmp"]
    kept = [tmp_path / f".last.pt.{os.getpid()}.0123abcd.tmp",  # a writer still alive (this process)
            tmp_path / f".last.pt.{dead}.xyz.tmp", tmp_path / "notes.tmp", tmp_path / "last.pt"]
    for p in stale + kept:
        p.write_bytes(b"x")
    assert sorted(remove_stale_temp_files(tmp_path)) == sorted(stale)
    assert sorted(tmp_path.iterdir()) == sorted(kept)
    assert remove_stale_temp_files(tmp_path / "missing") == []


# --------------------------------------------------------------------------- torn metrics.jsonl

RECORDS = [{"kind": "train", "update": 1, "epoch": 1, "wall": 1.0, "loss": 5.0},
           {"kind": "valid", "update": 1, "epoch": 1, "wall": 2.0, "loss": 4.5, "bleu": 1.0}]
WHOLE = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()


@pytest.mark.parametrize("tail", [b'{"kind": "train", "upd', b'{"kind": "x\xc3', b"\x00\x00\x00"])
def test_a_torn_last_metrics_line_is_skipped_with_a_warning(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(WHOLE + tail)
    with pytest.warns(MTWarning, match=r"line 3: incomplete \(an interrupted write\); skipped"):
        assert read_metrics(path) == RECORDS


def test_a_bad_metrics_line_before_the_last_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"kind": "tr\n' + WHOLE)
    with pytest.raises(MTError, match="line 1: not valid JSON"):
        read_metrics(path)


def test_plot_reads_a_run_whose_last_metrics_line_is_torn(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(WHOLE + b'{"kind": "valid", "bl')
    proc = run_mt("plot", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "incomplete (an interrupted write); skipped" in proc.stderr and "Traceback" not in proc.stderr
    assert (run / "plots" / "curves.png").is_file()


@pytest.mark.parametrize("content, kept", [(WHOLE + b'{"kind": "tr', WHOLE), (WHOLE, WHOLE), (b"", b""),
                                           (b'{"no newline at all": 1}', b""), (b"x" * 200_000 + b"\n" + b"y" * 70_000,
                                                                               b"x" * 200_000 + b"\n")])
def test_cut_torn_last_line(tmp_path: Path, content: bytes, kept: bytes) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(content)
    assert cut_torn_last_line(path) == len(content) - len(kept)
    assert path.read_bytes() == kept
    assert cut_torn_last_line(tmp_path / "missing.jsonl") == 0


def test_a_resumed_run_repairs_a_torn_metrics_file(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(WHOLE + b'{"kind": "train", "upd')
    log = TrainLog(tmp_path, enabled=True, total_updates=0)
    log.metrics({"kind": "train", "update": 2, "epoch": 1, "wall": 3.0, "loss": 4.0})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [*RECORDS, {"kind": "train", "update": 2, "epoch": 1,
                                                                "wall": 3.0, "loss": 4.0}]
    assert "removed an incomplete last record" in (tmp_path / "train.log").read_text()


# --------------------------------------------------------------------------- checkpoints of the wrong shape


@pytest.mark.parametrize("key, value", [
    ("tokenizer", [b"spm"]), ("tokenizer", {"src": "not bytes"}), ("tokenizer", {"src": b"x", "tgt": 3}),
    ("model", [torch.zeros(2)]), ("model", {"w": [1.0, 2.0]}), ("config", "name: x"), ("config", {"model": [1]}),
    ("src_vocab_size", "400"), ("tgt_vocab_size", -1), ("src_vocab_size", True), ("joint_vocab", "yes"),
    ("update", 2.5), ("epoch", None), ("training", []), ("averaged_from", "a.pt"),
])
def test_right_keys_wrong_types_is_not_an_mt_checkpoint(tmp_path: Path, random_ckpt: Path, key: str,
                                                        value: object) -> None:
    state = torch.load(random_ckpt, weights_only=True)
    state[key] = value
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    with pytest.raises(MTError, match=rf"checkpoint '{re.escape(str(bad))}': not an mt checkpoint \('{key}' is "):
        load_checkpoint(bad)


def test_translate_with_a_list_for_tokenizer_is_one_line(tmp_path: Path, random_ckpt: Path) -> None:
    state = torch.load(random_ckpt, weights_only=True)
    state["tokenizer"] = [state["tokenizer"]["src"]]
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    proc = run_mt("translate", "-c", str(bad), "--device", "cpu", stdin="hello\n")
    assert_one_line_error(proc, "not an mt checkpoint ('tokenizer' is list")


# --------------------------------------------------------------------------- signals


def test_first_signal_sets_the_flag_second_aborts() -> None:
    stop = StopSignal()
    stop.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM
        with pytest.raises(Interrupted) as e:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs at the next bytecode
        assert e.value.signum == signal.SIGINT
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_signal_aborts_with_128_plus_its_number(tmp_path: Path, random_ckpt: Path, sig: int,
                                                         code: int) -> None:
    """`mt train`: the first signal says it will save; the second aborts at once, exit 128 + signum,
    one line, no traceback; whatever was saved before stays readable."""
    data = tmp_path / "data"
    data.mkdir()
    from mt.deploy.tiny import synthetic_sentences
    for split, n in (("train", 3000), ("val", 20)):
        for lang, seed in (("en", 1), ("de", 2)):
            (data / f"{split}.{lang}").write_text("\n".join(synthetic_sentences(n, seed)) + "\n", encoding="utf-8")
    config = tmp_path / "sig.yaml"
    config.write_text(f"name: sig\nrun_root: {tmp_path / 'runs'}\ndata: {{path: {data}, test_splits: []}}\n"
                      "tokenizer: {vocab_size: 300, byte_fallback: false}\nmodel: {d_model: 64, heads: 2, encoder_layers: 2, "
                      "decoder_layers: 2, d_ff: 256}\ntrain: {max_tokens: 6000, max_updates: 100000, valid_every: 0,"
                      " valid_bleu: false, log_every: 1, threads: 1}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for attempt in range(3):  # the second signal must land before the first one's save ends: retry if late
        args = [sys.executable, "-m", "mt", "train", str(config), *(["--resume"] if attempt else [])]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:  # training has started
            if " update " in line and " | epoch " in line:
                break
        proc.send_signal(sig)
        for first in proc.stderr:  # earlier stderr lines (e.g. prepare's cleaning warning) come first
            if "received" in first:
                break
        assert f"{signal.Signals(sig).name} received" in first and "send it again to abort" in first
        proc.send_signal(sig)
        out, rest = proc.communicate(timeout=120)
        if proc.returncode != 0 or "stopped by signal" not in out:
            break
    assert proc.returncode == code, first + rest
    lines = rest.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in rest, rest
    assert f"second {signal.Signals(sig).name}" in lines[0] and "without saving" in lines[0]
    assert remove_stale_temp_files(tmp_path / "runs" / "sig" / "checkpoints") == []


def test_old_torch_through_the_cli_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    from mt.cli import main

    monkeypatch.setattr(metadata, "version", lambda name: "2.5.1")
    monkeypatch.setattr(sys, "argv", ["mt", "--help"])
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "mt: error: mt needs torch >= 2.6, found 2.5.1; install a newer torch (e.g. `make install` pins a tested one)"]


def test_an_os_error_in_a_command_is_one_line(tmp_path: Path) -> None:
    """An OSError no command turns into an MTError itself: here `plots` is a file, not a folder."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(WHOLE)
    (run / "plots").write_text("in the way")
    proc = run_mt("plot", str(run))
    assert_one_line_error(proc, "mt: error:", "plots: File exists")


# --------------------------------------------------------------------------- config values


def test_every_numeric_config_key_has_a_range() -> None:
    import dataclasses as dc
    import typing

    from mt.config import Config
    from mt.config_checks import RANGES

    numeric = set()

    def walk(prefix: str, cls: type) -> None:  # every section, and the sections inside one (decode.search)
        for f in dc.fields(cls):
            t = typing.get_type_hints(cls)[f.name]
            if dc.is_dataclass(t):
                walk(f"{prefix}{f.name}.", t)
            elif prefix and (t in (int, float, int | str)
                             or (typing.get_origin(t) is tuple and typing.get_args(t)[0] in (int, float))):
                numeric.add(f"{prefix}{f.name}")

    walk("", Config)
    assert numeric == set(RANGES)


@pytest.mark.parametrize("override, message", [
    ("model.heads=0", "'model.heads': must be positive (>= 1), got 0"),
    ("train.log_every=0", "'train.log_every': must be positive (>= 1), got 0"),
    ("train.lr=-1", "'train.lr': must be positive (> 0) and finite, got -1.0"),
    ("train.lr=nan", "'train.lr': must be positive (> 0) and finite, got nan"),
    ("train.lr=.inf", "'train.lr': must be positive (> 0) and finite, got inf"),
    ("train.eps=-1", "'train.eps': must be positive (> 0) and finite, got -1.0"),
    ("train.betas=[0.9,1.5]", "'train.betas': must be in [0, 1) and finite, got (0.9, 1.5)"),
    ("train.weight_decay=-1", "'train.weight_decay': must be at least 0 and finite, got -1.0"),
    ("decode.max_len_b=-100", "'decode.search.max_len_b': must be at least 0, got -100"),
    ("decode.alpha=nan", "'decode.search.alpha': must be at least 0 and finite, got nan"),
    ("model.dropout=1", "'model.dropout': must be in [0, 1) and finite, got 1.0"),
    ("tokenizer.character_coverage=0", "'tokenizer.character_coverage': must be in [0.98, 1] and finite, got 0.0"),
    ("tokenizer.src_character_coverage=0.5", "'tokenizer.src_character_coverage': must be 0 (as character_coverage) or in [0.98, 1]"),
    ("tokenizer.src_vocab_size=4000", "'tokenizer.src_vocab_size': sizes the source model of separate vocabularies"),
    ("train.time_budget=-5", "'train.time_budget': must be a duration >= 0 like '20m', got '-5'"),
    ("train.time_budget=nan", "'train.time_budget': must be a duration >= 0 like '20m', got 'nan'"),
    ("name=..", "'name': '..' names the run folder"),
    ("name=.hidden", "'name': '.hidden' names the run folder"),
    ("name=a/b", "'name': 'a/b' names the run folder"),
    ("name=a b", "'name': 'a b' names the run folder"),
    ("model.max_positions=" + "9" * 5000, "'model.max_positions': expected int, got '99999999999"),
    ("data.test_splits=" + "[" * 5000, "value nested too deeply"),
])
def test_bad_config_values_are_one_line_naming_key_and_range(override: str, message: str) -> None:
    from mt.config_load import load_config

    with pytest.raises(MTError) as e:
        load_config(REPO / "configs" / "tiny.yaml", [override])
    assert message in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


def test_bad_config_value_through_the_cli_is_one_line() -> None:
    proc = run_mt("train", str(REPO / "configs" / "tiny.yaml"), "--set", "model.heads=0")
    assert_one_line_error(proc, "'model.heads': must be positive (>= 1), got 0")
    assert proc.returncode == 2


@pytest.mark.parametrize("name", ["tiny", "multi30k_en_de", "run-2.b", "A_1"])
def test_good_names_pass(name: str) -> None:
    from mt.config_load import load_config

    assert load_config(REPO / "configs" / "tiny.yaml", [f"name={name}"]).name == name


# --------------------------------------------------------------------------- mt translate: streaming, flags


def _translate(ckpt: Path, src: Path, out: Path, *, n_best: int | None = None, alpha: float | None = None) -> None:
    from mt.commands.translate import translate_command
    from mt.decode.overrides import DecodeOverrides

    translate_command([ckpt], str(src), str(out), DecodeOverrides(alpha=alpha, n_best=n_best), device="cpu")


def test_translate_streams_in_chunks_with_the_same_output(tmp_path: Path, random_ckpt: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import mt.commands.translate
    from mt.decode.translate import translate_texts
    from mt.deploy.tiny import synthetic_sentences
    from mt.model.checkpoint import load_for_inference
    from mt.text.segment import segmenter_for
    lines = synthetic_sentences(23, seed=5)
    lines[4] = lines[11] = ""
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    model, tokenizer, cfg = load_for_inference(random_ckpt, "cpu")
    whole = translate_texts(model, tokenizer, lines, cfg.decode, device="cpu", segmenter=segmenter_for("en"))

    seen: list[int] = []
    real = mt.commands.translate.translate_texts  # the default path: each line split into sentences

    def counting(model: Any, tokenizer: Any, chunk: list[str], *args: Any, **kw: Any) -> list[str]:
        seen.append(len(chunk))
        return real(model, tokenizer, chunk, *args, **kw)

    monkeypatch.setattr(mt.commands.translate, "CHUNK_LINES", 5)
    monkeypatch.setattr(mt.commands.translate, "translate_texts", counting)
    _translate(random_ckpt, src, out)
    assert seen == [5, 5, 5, 5, 3]  # never more than a chunk in memory
    assert out.read_text(encoding="utf-8").split("\n") == [*whole, ""]

    # n-best numbering runs on across chunks
    monkeypatch.setattr(mt.commands.translate, "translate_texts", real)
    _translate(random_ckpt, src, out, n_best=1)
    assert [int(line.split(" ||| ")[0]) for line in out.read_text(encoding="utf-8").splitlines()] == list(range(23))


def test_a_bad_line_in_a_late_chunk_leaves_the_earlier_output_file(tmp_path: Path, random_ckpt: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import mt.commands.translate

    monkeypatch.setattr(mt.commands.translate, "CHUNK_LINES", 2)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    out.write_text("an earlier result\n")
    src.write_bytes(b"a b\nc d\ne f\ng h\nbad \xff byte\n")
    with pytest.raises(MTError, match=r"in.txt: line 5: invalid UTF-8"):
        _translate(random_ckpt, src, out)
    assert out.read_text() == "an earlier result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]


def test_config_n_best_gives_n_best_output(tmp_path: Path, random_ckpt: Path) -> None:
    state = torch.load(random_ckpt, weights_only=True)
    state["config"]["decode"]["search"].update(beam=3, n_best=3)
    ckpt = tmp_path / "nbest.pt"
    save_checkpoint(ckpt, state)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("a b c\nαβγ\n", encoding="utf-8")
    _translate(ckpt, src, out)
    ids = [line.split(" ||| ")[0] for line in out.read_text(encoding="utf-8").splitlines()]
    assert ids == ["0", "0", "0", "1", "1", "1"]


@pytest.mark.parametrize("alpha", ["nan", "inf", "-1"])
def test_translate_refuses_a_bad_alpha(random_ckpt: Path, alpha: str) -> None:
    proc = run_mt("translate", "-c", str(random_ckpt), "--device", "cpu", "--alpha", alpha, stdin="a\n")
    assert_one_line_error(proc, "--alpha: must be a finite number >= 0")


def test_full_disk_during_training_stops_with_one_line_and_last_pt_intact(
        tmp_path: Path, tiny_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_train import copy_run

    from mt.train.loop import train

    cfg = copy_run(tiny_run, tmp_path, max_updates=6, valid_every=0, valid_bleu=False, save_every=2,
                   keep_checkpoints=0, log_every=1000, threads=1)
    writes = {"last": 0}
    real_open = open

    def filling(path: Path, mode: str) -> Any:
        if Path(path).name.startswith(".last.pt."):
            writes["last"] += 1
            if writes["last"] == 2:  # the disk is full by the second last.pt
                monkeypatch.setattr(_FillingDisk, "room", 1000)
                return _FillingDisk(path, mode.replace("b", ""))
        return real_open(path, mode)

    monkeypatch.setattr(mt.textio, "open", filling, raising=False)
    last = cfg.run_dir / "checkpoints" / "last.pt"
    with pytest.raises(MTError) as e:
        train(cfg)
    assert str(e.value) == f"{last}: cannot write (No space left on device); the previous file is unchanged"
    assert load_checkpoint(last)["update"] == 2
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.pt"]
