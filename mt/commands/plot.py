"""`mt plot`: a run's learning curves (and, with --attention, one sentence's cross-attention) as
PNG files in <run>/plots (mt.eval.plot's work; it logs what it wrote)."""

from __future__ import annotations

from pathlib import Path

from mt.eval.plot import plot_run


def plot_command(run_dir: Path, *, attention: bool, sentence: str | None, layer: int, checkpoint: Path | None) -> None:
    """`mt plot RUN_DIR`: write the run's plots (attention: of `checkpoint`, default best.pt)."""
    plot_run(run_dir, attention=attention, sentence=sentence, layer=layer, checkpoint=checkpoint)
