"""The shared test helpers can fail: `tests.support.scaling` tells a quadratic cost from a linear one."""

from __future__ import annotations

import pytest

from tests.support.scaling import assert_flat, assert_linear


def _quadratic(n: int) -> int:
    text = "a" * n
    return sum(text.count("a", i) for i in range(0, n, 4))  # ~n/4 scans of up to n characters


def test_assert_linear_passes_linear_work_and_fails_quadratic_work() -> None:
    assert_linear(lambda n: sum(range(n)), 20_000)
    with pytest.raises(AssertionError, match=r"quadratic: x\d+\.\d from 2,000 to 16,000"):
        assert_linear(_quadratic, 2_000, what="quadratic")


def test_assert_flat_fails_work_that_grows() -> None:
    assert_flat(lambda n: sum(range(1000)), 1_000)
    with pytest.raises(AssertionError, match="bounded"):
        assert_flat(lambda n: bytes(n * 1000).count(b"\0"), 1_000)
