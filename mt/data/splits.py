"""Reading a prepared split: the memory-mapped token arrays `mt prepare` wrote (mt.data.prepare).

`load_split(run_dir, split)` maps `data/<split>.{src,tgt}.{ids,offsets}` of a run directory as
an `EncodedSplit` of two `TokenArray`s; nothing is read into memory but the offsets.
`prepared_pairs(run_dir)` lists the language pairs the manifest records (sizes, tags, split names).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mt.data.encode import IDS_DTYPE, OFFSETS_DTYPE, split_path
from mt.errors import MTError

MANIFEST = "manifest.json"  # written last by prepare: its presence marks a complete cache


class TokenArray:
    """Variable-length token sequences stored flat: `ids` (int32 memmap) and `offsets` (int64, N+1).

    Sequence i is `ids[offsets[i]:offsets[i+1]]`.
    """

    def __init__(self, ids_path: Path, offsets_path: Path) -> None:
        for p in (ids_path, offsets_path):
            if not p.is_file():
                raise MTError(f"{p}: missing from the prepared data; run `mt prepare` again")
        # (N+1,) int64, small: kept in RAM
        self.offsets: np.ndarray = np.fromfile(offsets_path, dtype=OFFSETS_DTYPE)
        n_ids = ids_path.stat().st_size // IDS_DTYPE.itemsize
        # np.memmap cannot map an empty file; an empty split has no ids to map.
        self.ids: np.ndarray = (np.memmap(ids_path, dtype=IDS_DTYPE, mode="r") if n_ids
                                else np.zeros(0, dtype=IDS_DTYPE))  # (total_tokens,) int32
        if len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != n_ids:
            raise MTError(f"{offsets_path}: does not match {ids_path.name} (corrupt cache); "
                          f"run `mt prepare --force`")

    @classmethod
    def from_sequences(cls, seqs: list[list[int]]) -> TokenArray:
        """An in-memory TokenArray holding `seqs` (e.g. one epoch's sampled segmentation)."""
        out = cls.__new__(cls)
        lengths = np.fromiter(map(len, seqs), dtype=OFFSETS_DTYPE, count=len(seqs))
        out.offsets = np.zeros(len(seqs) + 1, dtype=OFFSETS_DTYPE)
        np.cumsum(lengths, out=out.offsets[1:])
        out.ids = np.fromiter(itertools.chain.from_iterable(seqs), dtype=IDS_DTYPE,
                              count=int(out.offsets[-1]))
        return out

    def to_lists(self) -> list[list[int]]:
        """Every sequence as a list of ints."""
        flat, bounds = self.ids.tolist(), self.offsets.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        """(N,) int64 number of tokens of each sequence."""
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        """(L_i,) int32 ids of sequence i (a view into the memmap)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences")
        i %= len(self)
        return self.ids[self.offsets[i]:self.offsets[i + 1]]


@dataclass(frozen=True)
class EncodedSplit:
    """One prepared split: aligned source and target sequences (same length N)."""

    src: TokenArray
    tgt: TokenArray

    def __len__(self) -> int:
        return len(self.src)


def _manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "data" / MANIFEST
    if not path.is_file():
        raise MTError(f"{run_dir}: data not prepared (no data/{MANIFEST}); run `mt prepare` first")
    return json.loads(path.read_text(encoding="utf-8"))


def prepared_pairs(run_dir: Path) -> list[dict[str, Any]]:
    """The manifest's `pairs` of a prepared run, in the order of `data.pairs`: each pair's name,
    languages, tag id (None without target tags), `train_sentences` (its share of the training
    split, which holds the pairs one after the other) and the prepared name of each of its splits."""
    return list(_manifest(run_dir).get("pairs", []))


def prepared_synthetic(run_dir: Path) -> dict[str, Any] | None:
    """The manifest's `synthetic` record (sentences after the real pairs, tag id or None,
    corpora; mt.data.synthetic), None when the run has no synthetic data."""
    return _manifest(run_dir).get("synthetic")


def load_split(run_dir: Path, split: str) -> EncodedSplit:
    """Memory-map a prepared split of a run directory. MTError if it was not prepared."""
    data_dir = Path(run_dir) / "data"
    splits = _manifest(run_dir).get("splits", {})
    if split not in splits:
        raise MTError(f"{run_dir}: split '{split}' was not prepared "
                      f"(prepared: {', '.join(splits) or 'none'})")
    src, tgt = (TokenArray(split_path(data_dir, split, s, "ids"), split_path(data_dir, split, s, "offsets"))
                for s in ("src", "tgt"))
    if len(src) != len(tgt):
        raise MTError(f"{data_dir}: split '{split}' has {len(src)} source but {len(tgt)} target sequences "
                      f"(corrupt cache)")
    return EncodedSplit(src, tgt)
