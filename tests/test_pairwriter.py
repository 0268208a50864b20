"""The synthetic corpus writer (`mt.data.pairwriter.PairWriter`) keeps its two files line-aligned
whatever the lines hold (issue 45, item 5: a JSONL or hub source with "\\n" inside a line shifted
every later pair, and `mt prepare` noticed only at the end), and a resume refuses a folder whose
files are out of step with their progress record instead of appending to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.data.pairwriter import PairWriter
from mt.errors import MTError


def test_line_breaks_inside_lines_keep_the_files_aligned(tmp_path: Path) -> None:
    writer = PairWriter(tmp_path / "out", "en", "de", {"model": "m"})
    assert writer.start() == 0
    writer.append(["one\ntwo", "three\r\nfour", "five\r"], ["eins", "zwei\u2028drei", "vier\n"], 3)
    writer.append(["six"], ["sechs"], 1)
    writer.finish({"command": "test"})
    src = (tmp_path / "out" / "train.en").read_text(encoding="utf-8").split("\n")[:-1]
    tgt = (tmp_path / "out" / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    assert src == ["one two", "three four", "five ", "six"]
    assert tgt == ["eins", "zwei\u2028drei", "vier ", "sechs"]  # U+2028 is not a line break to mt's readers
    assert writer.counts["line_breaks_replaced"] == 4


def test_a_resume_refuses_files_out_of_step_with_their_record(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    writer = PairWriter(folder, "en", "de", {"model": "m"})
    writer.start()
    writer.append(["a b", "c d"], ["x y", "z w"], 2)
    src = folder / "train.en"
    src.write_bytes(src.read_bytes().replace(b"a b", b"a\nb"))  # as an older mt wrote it: same size
    with pytest.raises(MTError, match=r"train.en: 3 lines, its progress record says 2"):
        PairWriter(folder, "en", "de", {"model": "m"}).start()
    src.write_bytes(src.read_bytes().replace(b"a\nb", b"a b"))
    resumed = PairWriter(folder, "en", "de", {"model": "m"})
    assert resumed.start() == 2
    resumed.append(["e"], ["f"], 1)
    assert [line for line in (folder / "train.de").read_text().split("\n") if line] == ["x y", "z w", "f"]
    assert [line for line in src.read_text().split("\n") if line] == ["a b", "c d", "e"]
