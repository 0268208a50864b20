"""Safe file I/O shared by every stage: UTF-8 lines with located errors, atomic writes, hashes.

Reading: `iter_lines` yields decoded lines of a text file (or .gz) without their terminator and
raises MTError naming the file and the line on invalid UTF-8. Lines end at b"\\n" only ("\\r\\n"
loses its "\\r" too; a lone "\\r", U+2028, form feeds ... stay inside the line), and a UTF-8
byte-order mark at the start of the first line (as Windows editors write) is removed.
`check_same_length` is the one check that two line-aligned files (source/reference,
hypotheses/reference) pair up.

Writing: `atomic_write` gives a temporary file in the target's folder that replaces the target
only once it is complete and fsynced, so an interrupted write never leaves a half file where a
good one was.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import secrets
import shutil
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mt.errors import MTError

UTF8_BOM = b"\xef\xbb\xbf"


def decode_line(raw: bytes, name: str, number: int) -> str:
    """One line's bytes, with or without '\\n' / '\\r\\n' -> text; MTError naming file and line on bad UTF-8.

    Line `number` 1 loses a leading UTF-8 byte-order mark.
    """
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if number == 1 and raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MTError(f"{name}: line {number}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


def iter_stream(stream: Iterable[bytes], name: str) -> Iterator[str]:
    """Decoded lines of an open binary stream (e.g. stdin); `name` is used in error messages."""
    for number, raw in enumerate(stream, start=1):
        yield decode_line(raw, name, number)


def iter_lines(path: Path) -> Iterator[str]:
    """Decoded lines of a UTF-8 text file, gzip-compressed when its name ends in .gz.

    Any readable path that is not a folder is read: a regular file, a named pipe, /dev/stdin,
    /dev/null or a shell's process substitution (`-i <(zcat corpus.gz)`, a /dev/fd path)."""
    if path.is_dir():
        raise MTError(f"{path}: is a folder, not a text file")
    if not path.exists():
        raise MTError(f"{path}: file not found")
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
            yield from iter_stream(f, str(path))
    except (OSError, EOFError, zlib.error) as e:
        raise MTError(f"{path}: cannot read ({e})") from None


def read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 text file (or .gz), without line terminators."""
    return list(iter_lines(path))


def check_same_length(a_path: Path | str, b_path: Path | str, a_len: int, b_len: int) -> None:
    """MTError naming both files when two line-aligned files have different line counts."""
    if a_len != b_len:
        raise MTError(f"line counts differ: {a_path} has {a_len} lines, {b_path} has {b_len}")


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (not possible on every OS/filesystem; then best effort)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path: Path) -> Iterator[BinaryIO]:
    """Open a hidden temporary file beside `path` for binary writing; on success it is fsynced and
    renamed over `path`, on any error it is removed and `path` is left as it was.

    An OSError while writing (a full disk, a quota, a read-only folder) becomes an MTError naming
    `path`: the previous file is intact, and the message says so.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MTError(f"{path}: cannot create its folder ({e.strerror or e})") from None
    # Same folder, so the rename is atomic; open(..., "xb") honours the umask, unlike mkstemp's 0600.
    # The name pattern is what `remove_stale_temp_files` cleans after a kill -9.
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        kept = "the previous file is unchanged" if path.exists() else "nothing was written"
        raise MTError(f"{path}: cannot write ({e.strerror or e}); {kept}") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # e.g. a folder that became read-only: the next start cleans it up
        pass


# `atomic_write`'s temporary files: .<target name>.<pid>.<8 hex>.tmp
_TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, owned by someone else
        return True
    return True


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Delete the temporary files of `atomic_write`s that were killed (kill -9, power loss) in
    `folder`: only names of that exact pattern whose writing process is gone. Returns them."""
    removed = []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        found = _TEMP_NAME.match(path.name)
        if found and path.is_file() and not _process_alive(int(found["pid"])):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def one_line(text: str) -> str:
    """`text` with each line break ("\n", "\r\n", "\r") replaced by a space: what one line of a
    line-aligned file may hold (a break inside would shift every later line against the other file)."""
    return _LINE_BREAK.sub(" ", text) if "\n" in text or "\r" in text else text


def count_lines(path: Path) -> int:
    """The number of b"\n" in the file (its lines, as `iter_lines` reads them, when it ends with one)."""
    with path.open("rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Write `lines` (each followed by '\\n') to `path` atomically."""
    with atomic_write(path) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install_dir(tmp: Path, out_dir: Path) -> None:
    """Put the finished directory `tmp` (built beside `out_dir`) in place of `out_dir`, replacing an
    old one; readable by all (mkdtemp makes it 0700, and an exported model is meant to be shared)."""
    os.chmod(tmp, 0o755)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old.{os.getpid()}")
        out_dir.rename(old)
        tmp.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out_dir)
