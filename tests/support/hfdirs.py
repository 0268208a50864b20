"""Tiny `transformers` Marian directories for tests, built here (no hub access): OPUS-MT's layout
(config.json, model.safetensors, source.spm, target.spm, vocab.json) with random weights, by
mt/deploy/tiny_marian.py, from the synthetic English-German pairs of `langdata`."""

from __future__ import annotations

from pathlib import Path

from mt.deploy.tiny_marian import train_spm, write_tiny_marian
from tests.support.langdata import pairs

LINES = pairs("de", 600, seed=3)
__all__ = ["LINES", "marian_dir", "train_spm"]


def marian_dir(root: Path, **shape: object) -> Path:
    """A saved tiny MarianMTModel directory with its tokenizer files (shape: write_tiny_marian's options)."""
    return write_tiny_marian(root, [s for s, _ in LINES], [t for _, t in LINES], **shape)  # type: ignore[arg-type]
