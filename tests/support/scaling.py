"""How a cost grows, measured without a deadline: the same call at two sizes in one run, so a
slow machine slows both alike. A linear cost grows by the size factor, a quadratic one by its
square; `assert_linear` sits between them (issue 54: never `took < 0.5 s`). Times are this
thread's CPU time, not the wall clock: on a busy machine a longer call is preempted more often
than a short one, which on the wall clock alone made linear work look x17 over x8."""

from __future__ import annotations

import time
from collections.abc import Callable


def fastest(run: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of `repeats` calls, in seconds of this thread's CPU time (noise only adds time)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        run()
        best = min(best, time.thread_time() - started)
    return best


def growth(call_at: Callable[[int], object], n: int, factor: int = 8) -> float:
    """time(call_at(factor * n)) / time(call_at(n)), each the fastest of 3, taken in turn twice."""
    small = large = float("inf")
    for _ in range(2):  # in turn: a slow spell cannot fall on one size only
        small = min(small, fastest(lambda: call_at(n)))
        large = min(large, fastest(lambda: call_at(factor * n)))
    return large / max(small, 1e-6)


def assert_linear(call_at: Callable[[int], object], n: int, factor: int = 8, what: str = "") -> None:
    """call_at(size) costs O(size) from `n` to `factor * n`: it grows by less than factor² / 4
    (16 for 8: linear is ~8, quadratic ~64). Pick `n` where a call takes a millisecond or more."""
    ratio = growth(call_at, n, factor)
    assert ratio < factor * factor / 4, (f"{what or 'cost'}: x{ratio:.1f} from {n:,} to {factor * n:,} "
                                         f"(linear ~x{factor}, quadratic ~x{factor * factor})")


def assert_flat(call_at: Callable[[int], object], n: int, factor: int = 8, what: str = "") -> None:
    """call_at(size) costs about the same at `n` and `factor * n` (work stops at a bound): it grows
    by less than half the size factor."""
    ratio = growth(call_at, n, factor)
    assert ratio < factor / 2, f"{what or 'cost'}: x{ratio:.1f} from {n:,} to {factor * n:,} (bounded ~x1)"
