"""mt.config: YAML round trip, key/type/choice checks, --set overrides, durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.config import (
    CalibrationConfig,
    Config,
    DecodeConfig,
    ResourcesConfig,
    SearchConfig,
    TextConfig,
)
from mt.config_checks import parse_duration
from mt.config_load import config_from_dict, config_to_dict, load_config, save_config
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


def test_decode_is_split_by_concern_and_its_old_flat_keys_still_load(tmp_path: Path) -> None:
    """A config or checkpoint of before the sections (e168eae) wrote `decode.beam`, `decode.protect`,
    `decode.confidence`...: each lands in its section, and `--set` takes either spelling."""
    flat = {"beam": 3, "alpha": 0.8, "no_repeat_ngram_size": 2, "protect": ["urls"], "case": False,
            "confidence": [0.5] * 8, "confidence_min_pieces": 4, "confidence_min_distinct": 0.5,
            "max_tokens": 900, "precision": "bf16", "bleu_tokenize": "char"}
    decode = config_from_dict({"decode": flat}).decode
    assert decode == DecodeConfig(
        search=SearchConfig(beam=3, alpha=0.8, no_repeat_ngram_size=2),
        text=TextConfig(protect=("urls",), case=False),
        calibration=CalibrationConfig(weights=(0.5,) * 8, min_pieces=4, min_distinct=0.5),
        resources=ResourcesConfig(max_tokens=900, precision="bf16"), bleu_tokenize="char")
    assert config_to_dict(Config(decode=decode))["decode"]["search"]["beam"] == 3  # written in sections
    old = _write(tmp_path, "decode:\n  beam: 3\n  n_best: 2\n")
    assert load_config(old, ["decode.beam=4"]).decode.search.beam == 4  # the old spelling over an old file
    assert load_config(old, ["decode.search.beam=6", "decode.text.ending=false"]).decode == DecodeConfig(
        search=SearchConfig(beam=6, n_best=2), text=TextConfig(ending=False))
    with pytest.raises(MTError) as e:
        config_from_dict({"decode": {"beam": 3, "search": {"beam": 4}}})
    assert str(e.value) == "config key 'decode.beam': moved to decode.search.beam, which is given too; keep one"
    with pytest.raises(MTError, match=r"unknown config key 'decode.search.bema' \(did you mean 'beam'\?\)"):
        load_config(old, ["decode.search.bema=2"])
    with pytest.raises(MTError, match="config key 'decode.search.n_best': 3 exceeds decode.search.beam=2"):
        config_from_dict({"decode": {"beam": 2, "n_best": 3}})
    with pytest.raises(MTError, match="'decode.search.top_p': must be in"):
        load_config(old, ["decode.top_p=0"])


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
