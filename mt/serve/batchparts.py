"""The plain parts of `mt.serve.batcher`: the time a `Batcher` reads and waits with (real time
unless a test gives a fake clock, so the batcher's waiting rules can be tested step by step,
whatever the machine's speed), the refusal it raises and the stats it reports per batch."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """What the batcher reads the time from and waits with."""

    def now(self) -> float:
        """Seconds, monotonic."""

    def wait(self, cond: threading.Condition, timeout: float | None) -> object:
        """`cond.wait(timeout)`: called with `cond` held; returns when notified or `timeout` has passed."""


class RealClock:
    """Real time: exactly `time.monotonic` and `threading.Condition.wait` (no wrapper in between)."""

    now = staticmethod(time.monotonic)
    wait = staticmethod(threading.Condition.wait)


class QueueFull(Exception):
    """The queue has no room for a request's segments, or cannot finish them in time (answer 429,
    `Retry-After: retry_after` seconds)."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class BatchStats:
    """One decoded batch, for metrics: segments, source tokens (unpadded), seconds."""

    segments: int
    tokens: int
    seconds: float
