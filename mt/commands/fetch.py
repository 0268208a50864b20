"""`mt data fetch`: the corpus name checked, then the download (or mirror copy) and its checks
(mt.data.fetch's work)."""

from __future__ import annotations

from pathlib import Path

from mt.errors import MTError


def fetch_command(corpus: str, dest: Path, mirror: Path | None) -> None:
    """`mt data fetch CORPUS`: Multi30k into `dest`, from `mirror` (or $MT_DATA_MIRROR) when given."""
    from mt.data.fetch import fetch_multi30k

    if corpus != "multi30k":
        raise MTError(f"corpus '{corpus}': unknown; supported: multi30k")
    fetch_multi30k(dest, mirror)
