"""mt.config: YAML round trip, key/type/choice checks, --set overrides, durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.config import Config
from mt.config_checks import parse_duration
from mt.config_load import config_from_dict, load_config, save_config
from mt.errors import MTError

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["tiny.yaml", "multi30k_en_de.yaml"])
def test_round_trip_is_equal(tmp_path: Path, name: str) -> None:
    cfg = load_config(REPO / "configs" / name, ["train.lr=3e-4", "data.test_splits=[a, b]"])
    save_config(cfg, tmp_path / "saved.yaml")
    again = load_config(tmp_path / "saved.yaml")
    assert again == cfg
    assert again.data.test_splits == ("a", "b") and again.train.lr == 3e-4


def test_defaults_and_name_from_file(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "model:\n  d_model: 128\n"))
    assert cfg.name == "exp" and cfg.model.d_model == 128
    assert cfg.train == Config().train
    assert cfg.run_dir == Path("runs") / "exp"


def test_unknown_key_suggests_closest(tmp_path: Path) -> None:
    with pytest.raises(MTError) as e:
        load_config(_write(tmp_path, "data:\n  formt: text\n"))
    assert str(e.value) == "unknown config key 'data.formt' (did you mean 'format'?)"
    with pytest.raises(MTError, match=r"unknown config key 'trian' \(did you mean 'train'\?\)"):
        load_config(_write(tmp_path, "trian:\n  lr: 1.0\n"))


def test_wrong_type_names_key_type_and_value(tmp_path: Path) -> None:
    with pytest.raises(MTError) as e:
        load_config(_write(tmp_path, "model:\n  d_model: big\n"))
    assert str(e.value) == "config key 'model.d_model': expected int, got 'big'"
    with pytest.raises(MTError, match="config key 'tokenizer.joint': expected bool"):
        load_config(_write(tmp_path, "tokenizer:\n  joint: 1\n"))


def test_overrides_are_type_checked(tmp_path: Path) -> None:
    path = _write(tmp_path, "train:\n  lr: 0.001\n")
    cfg = load_config(path, ["train.lr=3e-4", "tokenizer.vocab_size=500", "name=123", "data.path=/x/y"])
    assert cfg.train.lr == 3e-4 and cfg.tokenizer.vocab_size == 500 and cfg.name == "123"
    assert cfg.data.path == "/x/y"
    with pytest.raises(MTError, match="config key 'tokenizer.vocab_size': expected int, got 'lots'"):
        load_config(path, ["tokenizer.vocab_size=lots"])
    with pytest.raises(MTError, match=r"unknown config key 'train.lrr' \(did you mean 'lr'\?\)"):
        load_config(path, ["train.lrr=1"])
    with pytest.raises(MTError, match="expected section.key=value"):
        load_config(path, ["train.lr"])


def test_choices_are_checked(tmp_path: Path) -> None:
    with pytest.raises(MTError) as e:
        load_config(_write(tmp_path, "data:\n  format: csv\n"))
    assert "config key 'data.format': expected one of text, tsv, jsonl, hub, saved, got 'csv'" == str(e.value)
    with pytest.raises(MTError, match="tokenizer.type"):
        config_from_dict({"tokenizer": {"type": "wordpiece"}})


def test_value_checks() -> None:
    with pytest.raises(MTError, match="not divisible by heads"):
        config_from_dict({"model": {"d_model": 100, "heads": 3}})
    with pytest.raises(MTError, match="'tokenizer.workers': must be positive"):
        config_from_dict({"tokenizer": {"workers": 0}})


def test_missing_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(MTError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(MTError, match="is not valid YAML"):
        load_config(_write(tmp_path, "data: [unclosed\n"))


@pytest.mark.parametrize("text,seconds", [("20m", 1200.0), ("1h30m", 5400.0), ("90s", 90.0), ("2.5m", 150.0),
                                           ("45", 45.0), ("", 0.0), ("1h", 3600.0)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["20 minutes", "m", "1x"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(MTError, match="expected a duration"):
        parse_duration(bad)
