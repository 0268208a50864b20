"""Property tests (hypothesis): whatever bytes or text a user feeds in, the answer is a result or
an MTError, never another exception.

Covered: the config loader (`--set` strings), the corpus readers (text, TSV, JSONL, plain and
gzip) and the line contract of translation: one output line per input line, in order, for any
text (in-process with a tiny random-weight model, plus a few runs of the real CLI).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mt.config import Config, DataConfig
from mt.config_load import config_to_dict, load_config
from mt.data.corpus import read_split
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
    """What the readers must return for valid UTF-8: split on b'\\n' only, one trailing CR per line
    dropped, a UTF-8 byte-order mark at the very start removed."""
    if not data:
        return []
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
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


# --------------------------------------------------------------------------- config overrides

def _keys() -> list[str]:
    """Every `section.key` of the config (and the top-level scalars)."""
    keys = []
    for f in dataclasses.fields(Config):
        if dataclasses.is_dataclass(f.type) or f.name in ("data", "tokenizer", "model", "train", "decode"):
            section = typing.get_type_hints(Config)[f.name]
            keys += [f"{f.name}.{g.name}" for g in dataclasses.fields(section)]
        else:
            keys.append(f.name)
    return keys


KEYS = _keys()
# "[" * 1000 nests deeper than the recursion limit (PyYAML's composer raises RecursionError from ~500
# levels), so it still needs the override parser's RecursionError -> MTError; PyYAML's scanner is
# quadratic in the depth, and at 2000 each draw cost ~2 s. (tests/test_robust.py checks 5000 once.)
VALUES = st.one_of(
    st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from([".nan", ".inf", "-.inf", "nan", "inf", "1e400", "-0", "0", "1", "-1", "[]", "[0.9, 1.5]",
                     "[0.9]", "{}", "{a: 1}", "null", "~", "true", "no", "..", ".", "a/b", "2020-01-01", "!!binary AA==",
                     "!!python/object:os.system x", "9" * 5000, "[" * 1000, "&a [*a]", "'", "\"", "20m", "-5", "1h-3m"]),
    TEXT,
)
OVERRIDE = st.one_of(
    st.tuples(st.sampled_from(KEYS), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
    TEXT,  # anything at all, '=' or not
    st.tuples(TEXT, VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "prop.yaml"
    path.write_text("model: {d_model: 64, heads: 4}\n", encoding="utf-8")
    return path


@SETTINGS
@given(overrides=st.lists(OVERRIDE, max_size=4))
@example(overrides=["model.heads=0"])
@example(overrides=["train.log_every=0"])
@example(overrides=["train.lr=nan"])
@example(overrides=["model.max_positions=" + "9" * 5000])
def test_set_overrides_give_a_config_or_an_mt_error(config_file: Path, overrides: list[str]) -> None:
    try:
        cfg = load_config(config_file, overrides)
    except MTError as e:
        assert "\n" not in str(e), "an MTError message is one line"
        return
    # what was accepted is sane: no NaN/inf anywhere, a run directory inside run_root
    for section in config_to_dict(cfg).values():
        for value in (section.values() if isinstance(section, dict) else [section]):
            for v in (value if isinstance(value, list) else [value]):
                assert not (isinstance(v, float) and not math.isfinite(v)), (overrides, v)
    assert cfg.run_dir.parent == Path(cfg.run_root) and cfg.name not in ("", ".", "..")


# --------------------------------------------------------------------------- the translate line contract

REPO = Path(__file__).resolve().parents[1]
# what users paste: control characters and NUL, separators, combining marks, emoji, RTL, CJK ...
LINE = st.one_of(
    st.just(""),
    st.text(st.sampled_from(" \t\u3000\u00a0\u200b\x0b\x0c"), min_size=1, max_size=5),  # whitespace only
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n"), max_size=60),
    st.text(st.sampled_from("abc αβγ абв 中文 🙂 e\u0301 \u202e\x00\x01\r\x85\u2028\ufeff"), max_size=40),
    st.integers(1, 2_000).map(lambda n: ("Grüße 中文 abc " * 200)[:n]),  # long lines (10,000 in the example)
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object, object]:
    """(checkpoint, model, tokenizer, decode settings) of a random-weight model (mt/deploy/tiny.py)."""
    from mt.deploy.tiny import write_random_checkpoint
    from mt.model.checkpoint import load_for_inference
    path = write_random_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny.pt")
    model, tokenizer, cfg = load_for_inference(path, "cpu")
    return path, model, tokenizer, cfg.decode


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(LINE, max_size=12), beam=st.sampled_from([1, 2]))
@example(lines=["", "   ", "\x00", "a" * 10_000, "中文 \u2028 text"], beam=1)
def test_translate_gives_one_line_per_input_line(tiny_model: tuple, lines: list[str], beam: int) -> None:
    import dataclasses as dc

    from mt.decode.translate import translate_lines

    _, model, tokenizer, decode = tiny_model
    out = translate_lines(model, tokenizer, lines, dc.replace(decode, search=dc.replace(decode.search, beam=beam)), device="cpu")
    assert len(out) == len(lines)
    assert all("\n" not in text for text in out)
    assert all(text == "" for text, line in zip(out, lines) if not line.strip())
    # in order: each output is what that line alone translates to (checked for two of them)
    for i in {0, len(lines) // 2} & set(range(len(lines))):
        assert out[i] == translate_lines(model, tokenizer, [lines[i]], dc.replace(decode, search=dc.replace(decode.search, beam=beam)), device="cpu")[0]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(LINE.map(lambda t: t.encode("utf-8")) | st.sampled_from(
    [b"\xed\xa0\x80 lone surrogate", b"\xff\xfe", b"ok \xc3"]), min_size=1, max_size=6))
def test_translate_cli_line_contract(tiny_model: tuple, lines: list[bytes]) -> None:
    """The real CLI: one output line per input line, or (invalid UTF-8) exit 2, one line naming the line."""
    path = tiny_model[0]
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.txt", Path(tmp) / "out.txt"
        src.write_bytes(b"".join(line + b"\n" for line in lines))
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", str(path), "-i", str(src), "-o", str(out),
                               "--device", "cpu"], capture_output=True, text=True, env=env, timeout=300, check=False)
        bad = [i for i, line in enumerate(lines, start=1) if not _valid_utf8(line)]
        if bad:
            assert proc.returncode == 2 and not out.exists(), proc.stderr
            messages = proc.stderr.strip().splitlines()
            assert len(messages) == 1 and f"line {bad[0]}: invalid UTF-8" in messages[0], proc.stderr
        else:
            assert proc.returncode == 0, proc.stderr
            assert out.read_bytes().count(b"\n") == len(lines)


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
