"""`mt average`: the weights of several checkpoints of one run averaged into one checkpoint
(mt.model.checkpoint's work)."""

from __future__ import annotations

from pathlib import Path

from mt.model.checkpoint import average_checkpoints


def average_command(checkpoints: list[Path], output: Path) -> None:
    """`mt average CKPT... -o OUT`: write the mean of their weights to OUT."""
    average_checkpoints(checkpoints, output)
