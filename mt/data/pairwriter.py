"""A resumable, append-only writer of a synthetic corpus folder (`mt backtranslate`, `mt distill`).

The folder holds the text-format pair files `train.{src_lang}` and `train.{tgt_lang}` (a corpus
`mt prepare` reads, e.g. through `data.synthetic`), `progress.json` while it is being written and
`manifest.json` once it is complete. Lines are appended in committed chunks: both files are
written, flushed and fsynced, then `progress.json` (lines done and the byte size of each file) is
replaced atomically. A run killed at any moment leaves a progress record that names a consistent
prefix of both files; the next run with the same settings (`identity`: model sha256s, decoding
settings, input file) cuts the files back to that prefix and carries on from the next input
line, so nothing is duplicated or lost, and with per-line seeded decoding the result is the
same bytes as an uninterrupted run. A line break inside a line (a JSONL or hub source holding
"\n") is written as a space, so line i of one file stays the pair of line i of the other; the
record keeps the lines written, and a resume refuses files whose line counts differ from it
(written by an older mt, or edited). Another identity is a one-line error (a different model or
setting must not be appended to a half-written corpus); a finished folder is left as it is.

This module owns the folder's layout: `SPLIT` names its pair files, and `mt.data.synthetic`
reads such a folder by it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mt.errors import MTError
from mt.textio import atomic_write, count_lines, one_line, remove_stale_temp_files

PROGRESS, MANIFEST = "progress.json", "manifest.json"
SPLIT = "train"  # the split name of a synthetic corpus folder (mt.data.synthetic reads it)


def _write_json(path: Path, obj: Any) -> None:
    with atomic_write(path) as f:
        f.write((json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MTError(f"{path}: unreadable ({e}); delete the folder to start again") from None
    if not isinstance(data, dict):
        raise MTError(f"{path}: not a progress record; delete the folder to start again")
    return data


def _first_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            return f"{key}: {a.get(key)!r} before, {b.get(key)!r} now"
    return ""


class PairWriter:
    """Appends line-aligned (source, target) chunks to `folder`, resumably (see the module docstring)."""

    def __init__(self, folder: Path, src_lang: str, tgt_lang: str, identity: dict[str, Any]) -> None:
        if src_lang == tgt_lang:
            raise MTError(f"{folder}: source and target language are both '{src_lang}'")
        self.folder = Path(folder)
        self.files = {"src": self.folder / f"{SPLIT}.{src_lang}", "tgt": self.folder / f"{SPLIT}.{tgt_lang}"}
        self.identity = json.loads(json.dumps(identity))  # as it reads back from JSON
        self.lines = 0
        self.written: int | None = 0  # lines in each file (None: a record from before mt counted them)
        self.counts: dict[str, int] = {}

    @property
    def complete(self) -> bool:
        """True when the folder holds a finished corpus with this identity (nothing to do)."""
        path = self.folder / MANIFEST
        return path.is_file() and _read_json(path).get("identity") == self.identity

    def start(self) -> int:
        """Open the folder for appending; returns the number of input lines already done (0 when new).
        MTError for a folder that holds other files, another run's progress or a finished corpus
        of another identity."""
        if self.folder.exists() and not self.folder.is_dir():
            raise MTError(f"{self.folder}: not a folder")
        progress = self.folder / PROGRESS
        if not progress.is_file():
            manifest = self.folder / MANIFEST
            if manifest.is_file():
                was = _read_json(manifest).get("identity", {})
                raise MTError(f"{self.folder}: holds a finished corpus made with other settings "
                              f"({_first_difference(was, self.identity)}); write to another folder")
            present = [p.name for p in self.files.values() if p.exists()]
            if present:
                raise MTError(f"{self.folder}: holds {', '.join(present)} but no {PROGRESS}; "
                              f"write to an empty or new folder")
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in self.files.values():
                path.write_bytes(b"")
            self._commit()
            return 0
        remove_stale_temp_files(self.folder)  # a progress record a kill cut short
        record = _read_json(progress)
        if record.get("identity") != self.identity:
            raise MTError(f"{self.folder}: was started with other settings "
                          f"({_first_difference(record.get('identity', {}), self.identity)}); "
                          f"resume with the same ones, or write to another folder")
        for side, path in self.files.items():
            size = int(record["bytes"][side])
            if not path.is_file() or path.stat().st_size < size:
                raise MTError(f"{path}: shorter than its progress record ({size} bytes); "
                              f"delete the folder to start again")
            with open(path, "r+b") as f:  # drop what a killed run wrote after its last commit
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
        self.lines, self.counts = int(record["lines"]), dict(record.get("counts", {}))
        self.written = int(record["written"]) if "written" in record else None
        if self.written is not None:
            for path in self.files.values():
                found = count_lines(path)
                if found != self.written:
                    raise MTError(f"{path}: {found} lines, its progress record says {self.written} "
                                  f"(a line break inside a line shifts the pairs); "
                                  f"delete the folder to start again")
        return self.lines

    def append(self, sources: Sequence[str], targets: Sequence[str], consumed: int,
               counts: dict[str, int] | None = None) -> None:
        """Commit one chunk: `sources[i]` and `targets[i]` as line-aligned lines, for `consumed` input lines
        (more than the lines written when some were skipped); `counts` are added to the record's."""
        if len(sources) != len(targets):
            raise ValueError(f"append: {len(sources)} sources vs {len(targets)} targets")
        joined = sum(one_line(line) != line for line in (*sources, *targets))
        for side, lines in (("src", sources), ("tgt", targets)):
            with open(self.files[side], "ab") as f:
                f.write("".join(one_line(line) + "\n" for line in lines).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
        if joined:
            counts = {**(counts or {}), "line_breaks_replaced": joined}
        self.lines += consumed
        if self.written is not None:
            self.written += len(sources)
        for key, n in (counts or {}).items():
            self.counts[key] = self.counts.get(key, 0) + n
        self._commit()

    def _commit(self) -> None:
        record = {"identity": self.identity, "lines": self.lines, "counts": self.counts,
                  "bytes": {s: p.stat().st_size for s, p in self.files.items()}}
        if self.written is not None:
            record = {**record, "written": self.written}
        _write_json(self.folder / PROGRESS, record)

    def finish(self, manifest: dict[str, Any]) -> Path:
        """Write `manifest.json` (with the identity, lines read and counts) and drop the progress record."""
        path = self.folder / MANIFEST
        _write_json(path, {**manifest, "identity": self.identity, "input_lines": self.lines,
                           "counts": self.counts, "files": {s: p.name for s, p in self.files.items()}})
        (self.folder / PROGRESS).unlink(missing_ok=True)
        return path
