"""What training reports: log lines, metrics.jsonl, a progress bar, TensorBoard, a phase profile.

Only rank 0 reports; other ranks get a `TrainLog` with `enabled=False` whose methods do nothing.
`metrics.jsonl` gets one JSON object per event with at least `kind` (train | valid | averaged),
`update`, `epoch` and `wall` (training seconds so far), plus the event's figures (loss, nll, ppl,
lr, tok_s, grad_norm; bleu, chrf for validations).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


class TrainLog:
    """Plain log (stdout + train.log), JSON metrics, optional tqdm bar and TensorBoard writer."""

    def __init__(self, run_dir: Path, *, enabled: bool, total_updates: int, start_update: int) -> None:
        self.enabled = enabled
        self.bar = None
        self.tb = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = open(run_dir / "train.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        # a record torn by a kill -9 or a full disk would glue itself to the next one: cut it first
        torn = cut_torn_last_line(run_dir / "metrics.jsonl")
        self.metrics_file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        if sys.stdout.isatty():  # a bar in a file or pipe is noise: plain lines only there
            from tqdm import tqdm

            self.bar = tqdm(total=total_updates or None, initial=start_update, unit="upd",
                            dynamic_ncols=True, mininterval=0.5, leave=False)
        if torn:
            self.info(f"metrics.jsonl: removed an incomplete last record ({torn} bytes; an interrupted write)")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def info(self, message: str) -> None:
        """A line on stdout (above the bar) and in train.log."""
        if not self.enabled:
            return
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def metrics(self, record: dict[str, Any]) -> None:
        """Append one event to metrics.jsonl (and TensorBoard)."""
        if not self.enabled:
            return
        self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()
        if self.tb is not None:
            kind, step = record.get("kind", "train"), record.get("update", 0)
            for key, value in record.items():
                if key not in ("kind", "update", "epoch") and isinstance(value, (int, float)):
                    self.tb.add_scalar(f"{kind}/{key}", value, step)

    def step(self, *, loss: float, lr: float, tok_s: float, left_s: float | None) -> None:
        """Advance the bar by one update and show the running figures."""
        if self.bar is None:
            return
        post = {"loss": f"{loss:.3f}", "lr": f"{lr:.2e}", "tok/s": f"{tok_s:.0f}"}
        if left_s is not None:
            post["left"] = f"{int(left_s) // 60}:{int(left_s) % 60:02d}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        self.log_file.close()
        self.metrics_file.close()


class PhaseTimer:
    """Seconds spent per phase of training (host time; on CUDA a phase ends at its next sync)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._last = self.last_mark = time.perf_counter()

    def mark(self) -> None:
        """Start timing from now (time since the last mark/lap is dropped)."""
        self._last = self.last_mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        """Charge the time since the last mark/lap to `phase`."""
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def summary(self) -> str:
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(f"{k} {v:.1f}s ({100 * v / total:.0f}%)" for k, v in self.seconds.items())


def cut_torn_last_line(path: Path) -> int:
    """Truncate an append-only lines file after its last newline; returns the bytes removed.

    Writers append whole lines ending in a newline, so a final line without one is a write cut
    short (kill -9, power loss, a full disk). Missing files are left alone (0).
    """
    if not path.is_file():
        return 0
    with path.open("rb+") as f:
        size = f.seek(0, 2)
        end = size
        while end > 0:  # search backwards, a block at a time, for the last newline
            start = max(0, end - (1 << 16))
            f.seek(start)
            found = f.read(end - start).rfind(b"\n")
            if found >= 0:
                end = start + found + 1
                break
            end = start
        if end < size:
            f.truncate(end)
        return size - end
