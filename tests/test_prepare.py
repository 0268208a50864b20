"""mt.data.prepare: the cache files, memmap reload, no-op re-runs, invalidation, cleaning, failure safety."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_config_at
from mt.config import Config
from mt.config_load import load_config
from mt.data.corpus import read_split
from mt.data.encode import IDS_DTYPE, OFFSETS_DTYPE
from mt.data.prepare import prepare
from mt.data.splits import load_split
from mt.data.tokenizer import Tokenizer
from mt.errors import MTError

SPLIT_SIZES = {"train": 2000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000, "test_2017_mscoco": 461}


def _data_copy(multi30k_dir: Path, tmp_path: Path, splits: tuple[str, ...] = ("train", "val")) -> Path:
    """A private copy of some Multi30k files, safe to touch or edit."""
    dest = tmp_path / "corpus"
    dest.mkdir()
    for split in splits:
        for lang in ("en", "de"):
            shutil.copy2(multi30k_dir / f"{split}.{lang}.gz", dest)
    return dest


def _mtimes(run_dir: Path) -> dict[str, int]:
    return {str(p.relative_to(run_dir)): p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}


def test_tiny_run_files_and_manifest(tiny_run: Config) -> None:
    run_dir = tiny_run.run_dir
    assert (run_dir / "spm.model").is_file() and not (run_dir / "spm.src.model").exists()
    assert load_config(run_dir / "config.yaml") == tiny_run
    manifest = json.loads((run_dir / "data" / "manifest.json").read_text())
    assert {s: v["sentences"] for s, v in manifest["splits"].items()} == SPLIT_SIZES
    assert manifest["cache_version"] == 3 and len(manifest["fingerprint"]) == 64
    # A bilingual run is one pair without a tag: its splits keep their own names.
    tests = {s: s for s in SPLIT_SIZES if s.startswith("test")}
    assert manifest["pairs"] == [{"name": "en-de", "src_lang": "en", "tgt_lang": "de", "tag": None, "train_sentences": 2000,
                                  "valid_split": "val", "test_splits": tests, "skipped_test_splits": []}]
    assert not (run_dir / ".prepare.tmp").exists()
    for split, n in SPLIT_SIZES.items():
        for side in ("src", "tgt"):
            offsets = np.fromfile(run_dir / "data" / f"{split}.{side}.offsets", dtype=OFFSETS_DTYPE)
            ids_bytes = (run_dir / "data" / f"{split}.{side}.ids").stat().st_size
            assert len(offsets) == n + 1 and offsets[0] == 0 and np.all(np.diff(offsets) >= 0)
            assert offsets[-1] * IDS_DTYPE.itemsize == ids_bytes
            assert manifest["splits"][split][f"{side}_tokens"] == offsets[-1]
    report = json.loads((run_dir / "data" / "clean_report.json").read_text())
    assert report["length_unit"] == "pieces" and report["train_limit"] == 2000 and list(report["pairs"]) == ["en-de"]
    pair = report["pairs"]["en-de"]
    assert pair["split"] == "train" and pair["read"] == 2000 and pair["kept"] == 2000
    assert sum(pair["dropped"].values()) == 0 and set(pair["truncated"]) == set(tests) | {"val"}


def test_memmap_equals_fresh_encoding(tiny_run: Config) -> None:
    tok = Tokenizer.from_files(tiny_run.run_dir)
    src, tgt = read_split(tiny_run.data, "val")
    split = load_split(tiny_run.run_dir, "val")
    assert isinstance(split.src.ids, np.memmap) and split.src.ids.dtype == np.int32
    assert len(split) == len(split.tgt) == 1014
    fresh_src, fresh_tgt = tok.encode_src([s.strip() for s in src]), tok.encode_tgt([t.strip() for t in tgt])
    assert [split.src[i].tolist() for i in range(len(split))] == fresh_src
    assert [split.tgt[i].tolist() for i in range(len(split))] == fresh_tgt
    assert split.tgt.lengths().tolist() == [len(x) for x in fresh_tgt]
    assert split.src[-1].tolist() == fresh_src[-1]
    with pytest.raises(IndexError):
        split.src[1014]
    # The training split holds the first train_limit pairs, in corpus order.
    train_src, _ = read_split(tiny_run.data, "train")
    assert load_split(tiny_run.run_dir, "train").src[1999].tolist() == tok.encode_src([train_src[1999].strip()])[0]


def test_load_split_errors(tiny_run: Config, tmp_path: Path) -> None:
    with pytest.raises(MTError, match="split 'nope' was not prepared"):
        load_split(tiny_run.run_dir, "nope")
    with pytest.raises(MTError, match="data not prepared"):
        load_split(tmp_path, "train")


def test_rerun_is_noop_and_inputs_or_config_invalidate(multi30k_dir: Path, tmp_path: Path,
                                                       reports: Callable[[], str]) -> None:
    data = _data_copy(multi30k_dir, tmp_path)
    cfg = tiny_config_at(data, tmp_path / "runs", ["data.test_splits=[test_2016_flickr]", "data.train_limit=500"])
    prepare(cfg)
    out = reports()
    assert "test split 'test_2016_flickr' not found" in out and "skipped" in out
    before = _mtimes(cfg.run_dir)

    prepare(cfg)
    assert "is up to date" in reports()
    assert _mtimes(cfg.run_dir) == before

    # More workers do not change the output, so they do not invalidate the cache either.
    more = tiny_config_at(data, tmp_path / "runs", ["data.test_splits=[test_2016_flickr]", "data.train_limit=500",
                                                     "tokenizer.workers=2", "train.lr=0.01"])
    prepare(more)
    assert "is up to date" in reports()
    assert load_config(cfg.run_dir / "config.yaml") == more  # the resolved config is refreshed all the same
    prepare(cfg)
    assert "is up to date" in reports()
    assert {k: v for k, v in _mtimes(cfg.run_dir).items() if k != "config.yaml"} == \
        {k: v for k, v in before.items() if k != "config.yaml"}

    st = (data / "val.de.gz").stat()
    os.utime(data / "val.de.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    prepare(cfg)
    assert "is up to date" not in reports()
    after_touch = _mtimes(cfg.run_dir)
    assert after_touch["data/manifest.json"] != before["data/manifest.json"]
    # Same content, so the same tokenizer and cache bytes.
    assert Tokenizer.from_files(cfg.run_dir).model_bytes()["src"] == (cfg.run_dir / "spm.model").read_bytes()

    smaller = tiny_config_at(data, tmp_path / "runs", ["data.test_splits=[test_2016_flickr]", "data.train_limit=500",
                                                       "tokenizer.vocab_size=400"])
    prepare(smaller)
    assert "is up to date" not in reports()
    assert Tokenizer.from_files(cfg.run_dir).src_vocab_size == 400
    assert load_config(cfg.run_dir / "config.yaml").tokenizer.vocab_size == 400
    assert int(load_split(cfg.run_dir, "train").src.ids.max()) < 400

    prepare(smaller, force=True)
    assert "is up to date" not in reports()


def test_two_workers_write_identical_cache(multi30k_dir: Path, tmp_path: Path) -> None:
    data = _data_copy(multi30k_dir, tmp_path)
    base = ["data.test_splits=[]", "data.train_limit=3000", "tokenizer.vocab_size=500"]
    one = prepare(tiny_config_at(data, tmp_path / "one", base))
    two = prepare(tiny_config_at(data, tmp_path / "two", [*base, "tokenizer.workers=2"]))
    for name in ["spm.model"] + [f"data/{s}.{side}.{k}" for s in ("train", "val")
                                 for side in ("src", "tgt") for k in ("ids", "offsets")]:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def _synthetic(tmp_path: Path) -> Path:
    """150 clean pairs plus 3 empty, 2 too long (> 40 words, and pieces) and 1 badly proportioned (10:1) pair."""
    en = "the a dog cat man woman runs jumps red blue small big".split()
    de = "der die hund katze mann frau rennt springt rot blau klein gross".split()
    src, tgt = [], []
    for i in range(150):
        n = 3 + i % 6
        src.append(" ".join(en[(i * 7 + j * 5) % len(en)] for j in range(n)))
        tgt.append(" ".join(de[(i * 5 + j * 7) % len(de)] for j in range(n + i % 2)))
    bad = [("", "hund"), ("   ", "\t"), ("dog", " "), (" ".join(["dog"] * 41), "hund"),
           ("dog", " ".join(["hund"] * 50)), ("dog", "der hund rennt und springt und rennt und springt weg")]
    for k, (s, t) in enumerate(bad):
        src.insert(20 * k + 5, s)
        tgt.insert(20 * k + 5, t)
    root = tmp_path / "synthetic"
    root.mkdir()
    (root / "train.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (root / "train.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    (root / "val.en").write_text("the dog\n\n", encoding="utf-8")  # an empty val line is kept: test sets stay whole
    (root / "val.de").write_text("der hund\n  \n", encoding="utf-8")
    return root


def test_clean_report_counts(tmp_path: Path) -> None:
    root = _synthetic(tmp_path)
    cfg = tiny_config_at(root, tmp_path / "runs", ["data.train_limit=0", "data.max_len=40", "data.test_splits=[]",
                                                   "tokenizer.vocab_size=50", "tokenizer.byte_fallback=false"])
    prepare(cfg)
    full = json.loads((cfg.run_dir / "data" / "clean_report.json").read_text())
    report = full["pairs"]["en-de"]
    assert report["read"] == 156 and report["kept"] == 150
    assert report["dropped"] == {"empty": 3, "too_long": 2, "ratio": 1, "over_max_positions": 0}
    assert full["length_unit"] == "pieces" and report["round_trip"]["val"] == {"lines": 2, "changed": 0, "examples": []}
    assert len(load_split(cfg.run_dir, "train")) == 150
    val = load_split(cfg.run_dir, "val")
    assert len(val) == 2 and val.src.lengths()[1] == 0 and val.tgt.lengths()[1] == 0


def test_empty_after_cleaning(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    for lang in ("en", "de"):
        (root / f"train.{lang}").write_text("\n  \n", encoding="utf-8")
        (root / f"val.{lang}").write_text("x\n", encoding="utf-8")
    cfg = tiny_config_at(root, tmp_path / "runs", ["data.test_splits=[]"])
    with pytest.raises(MTError) as e:
        prepare(cfg)
    assert str(e.value) == (f"training split 'train' in {root}: no sentence pairs left after cleaning "
                            "(kept 0 of 2 (dropped: empty 2, too_long 0, ratio 0, over_max_positions 0))")


def test_missing_valid_split_is_an_error(multi30k_dir: Path, tmp_path: Path) -> None:
    data = _data_copy(multi30k_dir, tmp_path, splits=("train",))
    with pytest.raises(MTError, match=r"split 'val': missing file .*val\.en \(or val\.en\.gz\)"):
        prepare(tiny_config_at(data, tmp_path / "runs"))


def test_failed_prepare_keeps_the_previous_cache(multi30k_dir: Path, tmp_path: Path) -> None:
    data = _data_copy(multi30k_dir, tmp_path)
    cfg = tiny_config_at(data, tmp_path / "runs", ["data.test_splits=[]", "data.train_limit=300",
                                                   "tokenizer.vocab_size=400"])
    prepare(cfg)
    before = _mtimes(cfg.run_dir)
    # Break the validation split: one line fewer on the German side. The error comes mid-encoding.
    lines = gzip.decompress((data / "val.de.gz").read_bytes()).splitlines(keepends=True)
    (data / "val.de.gz").write_bytes(gzip.compress(b"".join(lines[:-1])))
    with pytest.raises(MTError, match=r"line counts differ: .*val\.en\.gz has 1014 lines, .*val\.de\.gz has 1013"):
        prepare(cfg)
    assert _mtimes(cfg.run_dir) == before  # the old, complete cache is untouched
    assert not (cfg.run_dir / ".prepare.tmp").exists()
    assert len(load_split(cfg.run_dir, "val")) == 1014
