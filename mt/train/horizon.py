"""How many updates a run will make, and the schedule keys given as a share of it.

`train.warmup`, `train.valid_every` and `train.save_every` take a number of updates or a share of
the run, `"5%"`. The run's length is its first limit: `max_updates`, `max_epochs` × updates per
epoch, or the updates `train.time_budget` allows at this machine's speed. A budget's count is
estimated once per session, after `SPEED_UPDATES` updates, from the seconds per update since the
first update of the session (which carries one-time costs: allocation, kernel choice, the bf16
probe); time spent validating in between counts, as it does against the budget. The resolved
values and the estimate are logged, and kept in last.pt so that a resumed run keeps them.

The plan follows the run: every `REPLAN_EVERY` of the budget the speed is measured again over the
last `REPLAN_WINDOW` of it (this session's updates only), and when the budget then allows more
than `REPLAN_TOLERANCE` more or fewer updates than planned, the plan moves and a log line says
by how much and why. A first estimate taken while kernels were cold (a GPU's first hundred
updates, a compile), a machine that slows when other work starts, or a resumed session on
another machine: each is corrected within a twentieth of the budget. What moves: the estimate,
valid_every and save_every as shares of it, and a share of warmup that has not yet been
reached (a finished warmup stays finished). The learning rate's end needs no re-plan: the
schedule anneals by the share of the budget spent (mt/train/optim.py), so it reaches its floor
when the budget ends, whatever the speed.

Before the estimate: a share of warmup ramps with a provisional length of at least
`SPEED_UPDATES` updates (never a faster ramp than that), and shares of valid_every / save_every
do not fire yet. A value in updates that cannot fit the run (a warmup longer than it, an
interval past its end) gets one warning line naming the estimate: a recipe tuned on a fast CPU
must say so on a slow one rather than silently never reach its peak learning rate.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from mt.config import TrainConfig
from mt.config_checks import SHARE_KEYS, parse_share

SPEED_UPDATES = 20  # a session's speed is measured over its updates 2..SPEED_UPDATES
REPLAN_EVERY = 0.05  # of the budget: how often the speed is measured again
# of the budget: the recent stretch whose speed a re-plan believes (about one validation in it)
REPLAN_WINDOW = 0.25
REPLAN_TOLERANCE = 0.05  # the plan moves when the budget allows this much more or fewer updates
REPLAN_MIN_UPDATES = 5  # a window with fewer updates than this is too short to measure

# What a value in updates that does not fit the run means, and what to write instead.
_TOO_LONG = {
    "warmup": ("the learning rate never reaches its peak", "warmup: 5%"),
    "valid_every": ("validation runs only at epoch ends and when training ends", "valid_every: 25%"),
    "save_every": ("no periodic checkpoint is written before the end", "save_every: 10%"),
}


class RunHorizon:
    """The run's length in updates and warmup / valid_every / save_every in updates.

    Call `observe` before each update with the update count and the training seconds so far;
    it returns the log lines of the moment the values are resolved (once), else [].
    """

    def __init__(self, t: TrainConfig, *, budget: float, epoch_updates: int, saved: dict[str, Any]) -> None:
        """budget: seconds (0 = none); epoch_updates: max_epochs × updates per epoch (0 = none);
        saved: what `saved()` returned in an earlier session ({} = nothing resolved yet)."""
        self.budget = budget
        self.shares = {key: parse_share(f"train.{key}", getattr(t, key)) for key in SHARE_KEYS}
        self.given = {key: getattr(t, key) for key in SHARE_KEYS}
        limits = [n for n in (t.max_updates, epoch_updates) if n > 0]
        self.known = min(limits) if limits else 0  # updates fixed by the config, 0 = none
        self.why_known = "max_updates" if self.known == t.max_updates else f"max_epochs {t.max_epochs}"
        self.values: dict[str, int] = {}
        self.estimate = 0
        self.first: tuple[int, float] | None = None  # (update, elapsed) after the session's first update
        self.marks: deque[tuple[int, float]] = deque()  # (update, elapsed) of this session, the last window's
        self.next_replan = 0.0  # elapsed seconds of the next re-measurement (0: none planned yet)
        self.pending_lines: list[str] = []
        if saved.get("values"):
            self.values = {k: int(v) for k, v in saved["values"].items()}
            self.estimate = int(saved["estimate"])
        elif not budget:  # the length is known now
            self.pending_lines = self._resolve(self.known, self.why_known)

    @property
    def resolved(self) -> bool:
        return bool(self.values)

    def saved(self) -> dict[str, Any]:
        """What last.pt keeps ({} until resolved)."""
        return {"values": dict(self.values), "estimate": self.estimate} if self.values else {}

    def observe(self, update: int, session_updates: int, elapsed: float) -> list[str]:
        """Note the clock before update `update + 1`; `session_updates` of them were made in this
        session. Returns the log lines of the resolution, once."""
        lines, self.pending_lines = self.pending_lines, []
        if not self.budget:
            return lines
        if session_updates >= 1:
            self._mark(update, elapsed)
        if self.resolved:
            return lines + self._replan(update, elapsed)
        if session_updates == 1:
            self.first = (update, elapsed)
        elif session_updates >= SPEED_UPDATES and self.first is not None:
            seconds = (elapsed - self.first[1]) / (update - self.first[0])
            estimate = update + max(self.budget - elapsed, 0.0) / max(seconds, 1e-9)
            why = (f"the {_duration(self.budget)} budget at {seconds:.3g} s/update, measured over updates "
                   f"{self.first[0] + 1}-{update}")
            if self.known and self.known <= estimate:
                estimate, why = self.known, self.why_known
            lines += self._resolve(round(estimate), why)
            self.next_replan = elapsed + REPLAN_EVERY * self.budget
        return lines

    def _mark(self, update: int, elapsed: float) -> None:
        """Remember the clock before `update + 1`, forgetting what lies before the re-plan window."""
        self.marks.append((update, elapsed))
        while len(self.marks) > 2 and self.marks[1][1] <= elapsed - REPLAN_WINDOW * self.budget:
            self.marks.popleft()

    def _replan(self, update: int, elapsed: float) -> list[str]:
        """Every REPLAN_EVERY of the budget: the estimate from the recent speed; the log lines when
        the plan moved (and the values moved with it), else []."""
        if not self.next_replan:  # resolved in an earlier session: measure this one's speed first
            self.next_replan = elapsed + REPLAN_EVERY * self.budget
        if elapsed < self.next_replan or elapsed >= self.budget:
            return []
        self.next_replan = elapsed + REPLAN_EVERY * self.budget
        first_update, first_elapsed = self.marks[0]
        if update - first_update < REPLAN_MIN_UPDATES or elapsed <= first_elapsed:
            return []
        seconds = (elapsed - first_elapsed) / (update - first_update)
        estimate = round(update + (self.budget - elapsed) / seconds)
        why = f"{seconds:.3g} s/update over updates {first_update + 1}-{update}"
        if self.known and self.known <= estimate:
            estimate, why = self.known, self.why_known
        if abs(estimate - self.estimate) <= REPLAN_TOLERANCE * self.estimate:
            return []
        # a warmup already finished stays finished (no second ramp); one under way follows the plan
        frozen = {"warmup": self.values["warmup"]} if update >= self.values["warmup"] else {}
        return self._resolve(estimate, why, moved_from=self.estimate, frozen=frozen)

    def warmup(self, update: int, elapsed: float) -> int:
        """The warmup length (updates) for the next update; provisional until resolved."""
        if self.resolved:
            return self.values["warmup"]
        share = self.shares["warmup"]
        if share is None:
            return int(self.given["warmup"])
        if self.first is None or update <= self.first[0]:
            guess = math.inf  # no speed yet: the floor below
        else:
            seconds = (elapsed - self.first[1]) / (update - self.first[0])
            guess = share * (update + max(self.budget - elapsed, 0.0) / max(seconds, 1e-9))
        provisional = max(SPEED_UPDATES, guess) if math.isfinite(guess) else SPEED_UPDATES
        if self.known:
            provisional = min(provisional, max(1, round(share * self.known)))
        return int(provisional)

    def every(self, key: str) -> int:
        """valid_every / save_every in updates (0 = off, also while a share awaits its estimate)."""
        if self.resolved:
            return self.values[key]
        return 0 if self.shares[key] is not None else int(self.given[key])

    def describe(self, key: str) -> str:
        """A key as configured, for the plan line: '400 updates' or '5% of the run'."""
        share = self.shares[key]
        return f"{self.given[key]} updates" if share is None else f"{share * 100:.4g}% of the run"

    def _resolve(self, estimate: int, why: str, moved_from: int = 0,
                 frozen: dict[str, int] | None = None) -> list[str]:
        """Fix every key in updates for a run of `estimate` updates; the log lines that say so
        (`moved_from`: the estimate this one replaces, 0 for the first; `frozen`: keys kept as they
        are)."""
        frozen = frozen or {}
        warned = set() if not moved_from else {key for key in SHARE_KEYS if self.shares[key] is None
                                                 and self.estimate and int(self.given[key]) > self.estimate}
        self.estimate = estimate
        lines, parts = [], []
        for key in SHARE_KEYS:
            share = self.shares[key]
            if share is None:
                value = int(self.given[key])
                reason, instead = _TOO_LONG[key]
                if estimate and value > estimate and key not in warned:
                    lines.append(f"warning: train.{key}={value} updates is longer than "
                                 f"the ~{estimate:,} updates of this run ({why}): {reason}; "
                                 f"a share fits any machine, e.g. {instead}")
            elif key in frozen:
                value = frozen[key]
                parts.append(f"{key} {value:,} updates (done)")
            else:
                value = round(share * estimate)
                if key != "warmup" and share > 0:
                    value = max(value, 1)  # "every 0.01%" of a short run is every update, not never
                parts.append(f"{key} {share * 100:.4g}% = {value:,} updates")
            self.values[key] = value
        if moved_from:
            change = (estimate - moved_from) / moved_from * 100
            lines.insert(0, f"plan moved: ~{moved_from:,} -> ~{estimate:,} updates ({change:+.0f}%; {why})"
                         + (f"; {', '.join(parts)}" if parts else ""))
        elif parts or self.budget:
            lines.insert(0, f"run length: ~{estimate:,} updates ({why})"
                         + (f"; {', '.join(parts)}" if parts else ""))
        return lines


def plan_lines(t: TrainConfig, world_size: int, updates_per_epoch: int, horizon: RunHorizon) -> list[str]:
    """The opening lines of a session: batch size, epoch length, schedule."""
    lines = []
    if t.average_last > t.keep_checkpoints:
        lines.append(f"note: average_last={t.average_last} > keep_checkpoints={t.keep_checkpoints}: "
                     f"averaging at most {t.keep_checkpoints}")
    global_batch = t.max_tokens * t.accumulate * world_size
    lines.append(f"training: global batch ≤ {t.max_tokens} max_tokens × {t.accumulate} accumulate × "
                 f"{world_size} rank(s) = {global_batch} padded tokens per update; "
                 f"{updates_per_epoch} updates/epoch; "
                 f"schedule {t.schedule} (warmup {horizon.describe('warmup')}"
                 + (")" if t.schedule == "linear_decay" else f", cooldown over the last {t.cooldown:.0%})")
                 + (f"; batch widths padded to a multiple of {t.pad_multiple}" if t.pad_multiple > 1 else ""))
    return lines


def _duration(seconds: float) -> str:
    """1200.0 -> '20m', 90.0 -> '1m30s'."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"
