"""The cleaning stage inside `mt prepare` (clean.enabled): the prepared training split is the kept
pairs, the report and the dropped file name every drop, the stage is part of the cache key, it
stops at clean.max_drop, and a config without it prepares as before."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import tiny_config_at
from mt.data.prepare import _shaping_config, prepare
from mt.data.splits import load_split
from mt.errors import MTError

pytestmark = pytest.mark.requires("py3langid")
N = 400
SETTINGS = [f"data.train_limit={N + 40}", "data.test_splits=[]", "tokenizer.vocab_size=400", "clean.enabled=true",
            "clean.dropped_file=true"]


def noisy_copy(multi30k_dir: Path, dest: Path) -> Path:
    """Multi30k's first N training pairs, then 10 copies, 10 French targets, 10 duplicates and 10
    fragments; val as is."""
    en, de, fr = (gzip.decompress((multi30k_dir / f"train.{lang}.gz").read_bytes()).decode().splitlines()[:N + 10]
                  for lang in ("en", "de", "fr"))
    src, tgt = en[:N], de[:N]
    src += en[N:N + 10]
    tgt += en[N:N + 10]  # copies
    src += en[:10]
    tgt += fr[:10]  # wrong language
    src += en[10:20]
    tgt += de[10:20]  # duplicates
    src += en[20:30]
    tgt += [t.split()[0] for t in de[20:30]]  # fragments
    dest.mkdir()
    (dest / "train.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (dest / "train.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    for lang in ("en", "de"):
        (dest / f"val.{lang}.gz").write_bytes((multi30k_dir / f"val.{lang}.gz").read_bytes())
    return dest


@pytest.fixture(scope="module")
def noisy_dir(mirror_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return noisy_copy(mirror_dir, tmp_path_factory.mktemp("noisy") / "corpus")


def test_prepare_trains_on_the_kept_pairs_and_reports_every_rule(noisy_dir: Path, tmp_path: Path) -> None:
    cfg = tiny_config_at(noisy_dir, tmp_path / "runs", SETTINGS)
    prepare(cfg)
    report = json.loads((cfg.run_dir / "data" / "clean_report.json").read_text())
    clean = report["clean"]["en-de"]
    assert clean["read"] == N + 40 and clean["dropped"].get("copy") == 10 and clean["dropped"].get("langid") == 10
    assert clean["dropped"].get("duplicate") == 10 and clean["dropped"].get("length", 0) >= 8
    assert clean["kept"] <= N and report["clean"]["settings"]["enabled"] is True
    assert set(clean["examples"]) == set(clean["dropped"])
    pieces = report["pairs"]["en-de"]  # the limits in subword pieces, after the stage
    assert pieces["read"] == clean["kept"] and len(load_split(cfg.run_dir, "train")) == pieces["kept"]
    dropped = (cfg.run_dir / "clean_dropped.en-de.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(dropped) == sum(clean["dropped"].values()) and not (cfg.run_dir / ".clean.tmp").exists()


def test_cleaning_is_part_of_the_cache_key(noisy_dir: Path, tmp_path: Path, reports) -> None:
    cfg = tiny_config_at(noisy_dir, tmp_path / "runs", SETTINGS)
    off = tiny_config_at(noisy_dir, tmp_path / "runs", SETTINGS[:-2])
    assert "clean" not in _shaping_config(off) and "clean" in _shaping_config(cfg)  # off: the key of before
    prepare(cfg)
    reports()
    prepare(cfg)
    assert "up to date" in reports()
    prepare(tiny_config_at(noisy_dir, tmp_path / "runs", [*SETTINGS, "clean.rules=[copy]"]))
    assert "up to date" not in reports()
    assert len(load_split(cfg.run_dir, "train")) > N


def test_prepare_stops_when_cleaning_would_drop_too_much(noisy_dir: Path, tmp_path: Path) -> None:
    cfg = tiny_config_at(noisy_dir, tmp_path / "runs", [*SETTINGS, "clean.max_drop=0.05"])
    with pytest.raises(MTError, match=r"would drop \d+\.\d% of 440 pairs.*rule '(copy|langid|duplicate|length)'"):
        prepare(cfg)
    assert not (cfg.run_dir / "data" / "manifest.json").exists() and not (cfg.run_dir / ".clean.tmp").exists()
