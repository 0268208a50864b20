"""Property tests (hypothesis): whatever bytes or text a user feeds in, the answer is a result or
an MTError, never another exception.

Covered: the corpus readers (text, TSV, JSONL, plain and gzip).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mt.config import DataConfig
from mt.corpus import read_split
from mt.errors import MTError

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text a user might have: any code point but lone surrogates (those cannot be written as UTF-8),
# with line breaks, tabs, CR, NUL and the Unicode separators mixed in often.
TEXT = st.text(st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from("\n\r\t\x00\u2028\u0085 ")),
               max_size=200)
# ... and bytes that are not text at all, or almost text: valid UTF-8 with a bad byte spliced in.
BYTES = st.one_of(st.binary(max_size=200),
                  st.tuples(TEXT, st.binary(min_size=1, max_size=3), TEXT).map(
                      lambda t: t[0].encode("utf-8") + t[1] + t[2].encode("utf-8")))
# JSON values of every shape, and records that almost have the right keys
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=8)
RECORD = st.one_of(
    JSON,
    st.fixed_dictionaries({"src": JSON, "tgt": JSON}),
    st.fixed_dictionaries({"translation": st.one_of(JSON, st.fixed_dictionaries({"en": JSON, "de": JSON}))}),
)


def _read(fmt: str, files: dict[str, bytes], gz: bool) -> tuple[list[str], list[str]] | None:
    """read_split over `files` (name -> bytes) in a fresh folder: the pairs, or None on MTError."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            path = Path(tmp) / (name + (".gz" if gz else ""))
            path.write_bytes(gzip.compress(data) if gz else data)
        try:
            src, tgt = read_split(DataConfig(format=fmt, path=tmp), "train")
        except MTError as e:
            assert "\n" not in str(e), "an MTError message is one line"
            return None
    assert len(src) == len(tgt)
    assert all(isinstance(s, str) and "\n" not in s for s in src + tgt)
    return src, tgt


def _lines(data: bytes) -> list[str]:
    """What the readers must return for valid UTF-8: split on b'\\n' only, one trailing CR per line dropped."""
    if not data:
        return []
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts = [p[:-1] if p.endswith(b"\r") else p for p in parts[:-1]]
    else:
        parts = [p[:-1] if p.endswith(b"\r") else p for p in parts[:-1]] + [parts[-1]]
    return [p.decode("utf-8") for p in parts]


@SETTINGS
@given(src=st.one_of(BYTES, TEXT.map(str.encode)), tgt=st.one_of(BYTES, TEXT.map(str.encode)), gz=st.booleans())
def test_text_reader_gives_pairs_or_mt_error(src: bytes, tgt: bytes, gz: bool) -> None:
    got = _read("text", {"train.en": src, "train.de": tgt}, gz)
    try:
        expected = (_lines(src), _lines(tgt))
    except UnicodeDecodeError:
        assert got is None, "invalid UTF-8 must be refused"
        return
    if len(expected[0]) != len(expected[1]):
        assert got is None, "different line counts must be refused"
    else:
        assert got == expected


@SETTINGS
@given(data=st.one_of(BYTES, st.lists(st.tuples(TEXT, TEXT), max_size=5).map(
    lambda rows: "".join(f"{s}\t{t}\n" for s, t in rows).encode())), gz=st.booleans())
def test_tsv_reader_gives_pairs_or_mt_error(data: bytes, gz: bool) -> None:
    got = _read("tsv", {"train.tsv": data}, gz)
    try:
        lines = _lines(data)
    except UnicodeDecodeError:
        assert got is None
        return
    if all(line.count("\t") == 1 for line in lines):
        assert got == ([line.split("\t")[0] for line in lines], [line.split("\t")[1] for line in lines])
    else:
        assert got is None


@SETTINGS
@given(rows=st.lists(st.one_of(RECORD.map(lambda r: json.dumps(r, ensure_ascii=False)),
                               RECORD.map(json.dumps), TEXT), max_size=5),
       junk=st.one_of(st.just(b""), BYTES), gz=st.booleans())
@example(rows=['{"src": "\\ud800", "tgt": "x"}'], junk=b"", gz=False)  # a lone surrogate via a JSON escape
@example(rows=["[" * 10_000 + "]" * 10_000], junk=b"", gz=False)  # nesting deeper than the recursion limit
@example(rows=['{"src": "a", "tgt": "b"}'], junk=b"\xff", gz=True)
def test_jsonl_reader_gives_pairs_or_mt_error(rows: list[str], junk: bytes, gz: bool) -> None:
    data = "".join(row.replace("\n", " ") + "\n" for row in rows).encode("utf-8", "surrogatepass") + junk
    got = _read("jsonl", {"train.jsonl": data}, gz)
    if got is not None:
        for text in got[0] + got[1]:
            text.encode("utf-8")  # no lone surrogates get through to the tokenizer


@pytest.mark.parametrize("fmt, name", [("text", "train.en"), ("tsv", "train.tsv"), ("jsonl", "train.jsonl")])
def test_truncated_gzip_is_an_mt_error(fmt: str, name: str) -> None:
    line = '{"src": "a", "tgt": "b"}' if fmt == "jsonl" else "a\tb"
    whole = gzip.compress("".join(f"{line}\n" for _ in range(1000)).encode())
    files = {name: whole[: len(whole) // 2]}
    if fmt == "text":
        files["train.de"] = gzip.compress(b"x\n" * 1000)
    with tempfile.TemporaryDirectory() as tmp:
        for n, data in files.items():
            (Path(tmp) / (n + ".gz")).write_bytes(data)
        with pytest.raises(MTError, match="cannot read"):
            read_split(DataConfig(format=fmt, path=tmp), "train")
