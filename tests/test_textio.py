"""mt.textio: line splitting on b"\\n" only, CRLF, a UTF-8 byte-order mark, gzip."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from mt.textio import decode_line, iter_stream, read_lines

BOM = "\ufeff"


@pytest.mark.parametrize("gz", [False, True])
def test_bom_removed_from_first_line_only(tmp_path: Path, gz: bool) -> None:
    data = (BOM + "第一行，你好！\r\n" + BOM + "second\nthird").encode("utf-8")
    path = tmp_path / ("f.txt.gz" if gz else "f.txt")
    path.write_bytes(gzip.compress(data) if gz else data)
    # The first line's BOM is a file marker; one later in the file is text and is kept.
    assert read_lines(path) == ["第一行，你好！", BOM + "second", "third"]


def test_stdin_and_interactive_lines_lose_the_bom() -> None:
    stream = io.BytesIO((BOM + "a\r\nb\n").encode("utf-8"))
    assert list(iter_stream(stream, "<stdin>")) == ["a", "b"]
    assert decode_line((BOM + "x\n").encode("utf-8"), "<stdin>", 1) == "x"  # mt translate's TTY path


def test_only_newline_ends_a_line(tmp_path: Path) -> None:
    odd = "a\rb\u2028c\x0bd\x0ce\x1cf\u0085g"
    (tmp_path / "f.txt").write_bytes((odd + "\r\n" + "z\n").encode("utf-8"))
    assert read_lines(tmp_path / "f.txt") == [odd, "z"]
