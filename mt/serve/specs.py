"""What `mt serve -c` names: one model per `-c`, an ensemble's checkpoints joined by commas.
A value that names an existing file or folder is that one model, commas and all (a checkpoint
named `run,v2.pt` is served as it is). Plain paths, no heavy imports: `mt serve` checks them
before the serve extra is even imported."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mt.errors import MTError

Spec = tuple[Path, ...]  # one model: a checkpoint, an ensemble's checkpoints, or an export directory


def parse_specs(values: Sequence[Path | str]) -> tuple[Spec, ...]:
    """`-c` values as models: each value one model, its comma-separated paths an ensemble (unless
    the whole value is an existing path)."""
    specs = []
    for value in values:
        if "," in str(value) and Path(value).exists():
            specs.append((Path(value),))
            continue
        parts = [part.strip() for part in str(value).split(",")]
        if not all(parts):
            raise MTError(f"-c {value}: an empty path in the comma list (an ensemble is -c A.pt,B.pt)")
        specs.append(tuple(Path(part) for part in parts))
    return tuple(specs)


def spec_name(spec: Spec) -> str:
    """How logs and errors name a model: its `-c` value."""
    return ",".join(str(path) for path in spec)
