"""`mt plot`: a run's learning curves (and, with --attention, one sentence's cross-attention) as
PNG files in <run>/plots (mt.eval.plot's work; it logs what it wrote). The attention plot's model
comes from `load_model`, on the CPU."""

from __future__ import annotations

from pathlib import Path

from mt.config import Config
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import NativeEngine
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.eval.plot import plot_run
from mt.model.transformer import Transformer


def _native_model(path: Path) -> tuple[Transformer, Tokenizer, Config]:
    """The checkpoint's Transformer (cross-attention is mt's own model's), tokenizer and config."""
    loaded = load_model([path], "cpu")
    if not isinstance(loaded.engine, NativeEngine):
        raise MTError(f"-c {path}: mt plot --attention runs mt's own model; give the .pt checkpoint, "
                      f"not an export")
    return loaded.engine.model, loaded.tokenizer, loaded.config


def plot_command(run_dir: Path, *, attention: bool, sentence: str | None, layer: int,
                 checkpoint: Path | None) -> None:
    """`mt plot RUN_DIR`: write the run's plots (attention: of `checkpoint`, default best.pt)."""
    plot_run(run_dir, attention=attention, sentence=sentence, layer=layer, checkpoint=checkpoint,
             load=_native_model)
