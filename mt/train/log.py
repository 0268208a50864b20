"""What training reports: log lines, metrics.jsonl, a progress bar, TensorBoard, a phase profile.

Only rank 0 reports; other ranks get a `TrainLog` with `enabled=False` whose methods do nothing.
`metrics.jsonl` gets one JSON object per event with at least `kind` (train | valid | averaged),
`update`, `epoch` and `wall` (training seconds so far), plus the event's figures (loss, nll, ppl,
lr, tok_s, grad_norm; bleu, chrf for validations).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TrainLog:
    """Plain log (stdout + train.log), JSON metrics, optional tqdm bar and TensorBoard writer."""

    def __init__(self, run_dir: Path, *, enabled: bool, total_updates: int) -> None:
        self.enabled = enabled
        self.bar = None
        self.tb = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        # open for the whole run; close() closes them
        self.log_file = open(run_dir / "train.log", "a", encoding="utf-8")  # noqa: SIM115
        # a record torn by a kill -9 or a full disk would glue itself to the next one: cut it first
        torn = cut_torn_last_line(run_dir / "metrics.jsonl")
        self.metrics_file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        if sys.stdout.isatty():  # a bar in a file or pipe is noise: plain lines only there
            from tqdm import tqdm

            self.bar = tqdm(total=total_updates or None, unit="upd",
                            dynamic_ncols=True, mininterval=0.5, leave=False)
        if torn:
            self.info(f"metrics.jsonl: removed an incomplete last record "
                      f"({torn} bytes; an interrupted write)")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def resume_at(self, update: int) -> None:
        """Count updates from `update` (a resumed run) on the progress bar."""
        if self.bar is not None:
            self.bar.n = update

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

    def train(self, window: Window, *, update: int, epoch: int, wall: float, lr: float, gnorm: float,
              flops: tuple[float, float]) -> None:
        """A train line and record: the means over `window`, throughput from `flops` (per source,
        per target token, `Transformer.flops_per_token`)."""
        seconds = window.seconds()
        tok_s = window.tgt_tokens / seconds
        gflops = (window.src_tokens * flops[0] + window.tgt_tokens * flops[1]) / seconds / 1e9
        loss, nll = window.loss / window.tgt_tokens, window.nll / window.tgt_tokens
        record = {"kind": "train", "update": update, "epoch": epoch, "wall": round(wall, 2), "loss": loss,
                  "nll": nll, "ppl": math.exp(min(nll, 50.0)), "lr": lr, "grad_norm": gnorm,
                  "tok_s": round(tok_s, 1), "gflop_s": round(gflops, 2)}
        self.metrics(record)
        self.info(f"update {update} | epoch {epoch} | loss {loss:.3f} | nll {nll:.3f} "
                  f"| ppl {record['ppl']:.1f} | lr {lr:.2e} | gnorm {gnorm:.2f} | {tok_s:,.0f} tgt tok/s "
                  f"| ~{gflops:.1f} GFLOP/s "
                  f"| {_clock(wall)}")

    def validation(self, record: dict[str, Any], *, why: str, improved: bool, early: bool) -> None:
        """A validation: its record in metrics.jsonl and one line (BLEU/chrF when scored)."""
        self.metrics(record)
        scores = f" | BLEU {record['bleu']:.2f} | chrF {record['chrf']:.2f}" if "bleu" in record else ""
        if "pairs" in record:  # a multi-pair run: the figures above are means; each pair's too
            scores += " (mean) | " + " | ".join(
                f"{name} nll {r['nll']:.3f}" + (f" BLEU {r['bleu']:.2f}" if "bleu" in r else "")
                for name, r in record["pairs"].items())
        self.info(f"valid ({why}) update {record['update']} | loss {record['loss']:.3f} "
                  f"| nll {record['nll']:.3f} | ppl {record['ppl']:.2f}{scores}"
                  f"{' | new best' if improved else ''}"
                  f"{' | early stopping' if early else ''}")

    def session(self, seconds: float, *, tokens: float, timer: PhaseTimer, skipped: int,
                max_share: float) -> None:
        """A session's closing lines: the validations skipped to keep under `max_share`
        (train.valid_max_share), target tokens per second while training and overall, time per phase."""
        busy = max(seconds - timer.seconds.get("validation", 0.0), 1e-9)
        if skipped:
            self.info(f"{skipped} validation(s) skipped to keep validation under "
                      f"{max_share:.1%} of the session")
        self.info(f"session: {seconds:.0f}s, {tokens / busy:,.0f} target tokens/s "
                  f"while training ({tokens / max(seconds, 1e-9):,.0f} overall); "
                  f"time per phase: {timer.summary()}")

    def step(self, *, loss: float | None, lr: float, tok_s: float, left_s: float | None) -> None:
        """Advance the bar by one update and show the running figures (`loss`: the last logged one,
        None before the first log line; the loop reads the device only at log lines)."""
        if self.bar is None:
            return
        post = {"loss": "-" if loss is None else f"{loss:.3f}", "lr": f"{lr:.2e}", "tok/s": f"{tok_s:.0f}"}
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


@dataclass
class Window:
    """Training figures summed over the updates since the last train log line, and when it began."""

    loss: float = 0.0  # summed label-smoothed loss (over target tokens, all ranks), read at the log line
    nll: float = 0.0  # summed NLL, read at the log line
    tgt_tokens: float = 0.0
    src_tokens: float = 0.0
    updates: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, *, tgt_tokens: float, src_tokens: float) -> None:
        """One more update's token counts (its loss stays on the device until the log line)."""
        self.tgt_tokens += tgt_tokens
        self.src_tokens += src_tokens
        self.updates += 1

    def seconds(self) -> float:
        """Seconds since the window began (never 0)."""
        return max(1e-9, time.perf_counter() - self.start)

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` (e.g. a validation) out of the window's time, so tok/s counts training only."""
        self.start += seconds


class PhaseTimer:
    """Seconds spent per phase of training (host time; on CUDA a phase ends at its next sync)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._last = self._mark = time.perf_counter()

    def mark(self) -> None:
        """Start timing from now (time since the last mark/lap is dropped)."""
        self._last = self._mark = time.perf_counter()

    def since_mark(self) -> float:
        """Seconds since the last `mark` (laps in between included)."""
        return time.perf_counter() - self._mark

    def lap(self, phase: str) -> None:
        """Charge the time since the last mark/lap to `phase`."""
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def summary(self) -> str:
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(f"{k} {v:.1f}s ({100 * v / total:.0f}%)" for k, v in self.seconds.items())


def _clock(seconds: float) -> str:
    """h:mm:ss"""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


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
