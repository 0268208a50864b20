"""Training on real + synthetic pairs (data.synthetic, mt/data/synthetic.py): the <BT> tag on the
synthetic sources only, the per-epoch ratio (real side upsampled) as the sampler draws it and
the training log reports it, an honest cache key, and `mt translate` never writing the tag."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_evaluate import run_cli

from conftest import tiny_config_at
from mt.config import Config
from mt.data.corpus import read_split
from mt.data.prepare import prepare
from mt.data.splits import load_split, prepared_synthetic
from mt.data.synthetic import SYNTHETIC_TAG, epoch_mix
from mt.data.tokenizer import Tokenizer
from mt.train.distributed import DistInfo
from mt.train.epochs import TrainingData

pytestmark = pytest.mark.usefixtures("one_thread")
REAL, SYNTHETIC = 300, 450


@pytest.fixture(scope="module")
def synthetic_dir(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SYNTHETIC training pairs from further down Multi30k, in the folder layout mt backtranslate writes."""
    cfg = tiny_config_at(multi30k_dir, tmp_path_factory.mktemp("unused"))
    en, de = read_split(cfg.data, "train")
    folder = tmp_path_factory.mktemp("synthetic")
    (folder / "train.en").write_text("\n".join(en[5000:5000 + SYNTHETIC]) + "\n", encoding="utf-8")
    (folder / "train.de").write_text("\n".join(de[5000:5000 + SYNTHETIC]) + "\n", encoding="utf-8")
    return folder


def _config(multi30k_dir: Path, root: Path, synthetic_dir: Path, *more: str) -> Config:
    return tiny_config_at(multi30k_dir, root, [f"data.train_limit={REAL}", f"data.synthetic=[{synthetic_dir}]",
                                               "data.max_len_ratio=0", *more])


@pytest.fixture(scope="module")
def mixed_run(multi30k_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    cfg = _config(multi30k_dir, tmp_path_factory.mktemp("mixed"), synthetic_dir)
    prepare(cfg)
    return cfg


def test_tag_on_synthetic_sources_only(mixed_run):
    tokenizer = Tokenizer.from_files(mixed_run.run_dir)
    tag = tokenizer.control_id(SYNTHETIC_TAG)
    assert tag is not None and tag > 3
    record = prepared_synthetic(mixed_run.run_dir)
    assert record["sentences"] == SYNTHETIC and record["tag"] == tag
    split = load_split(mixed_run.run_dir, "train")
    assert len(split) == REAL + SYNTHETIC
    firsts = np.array([split.src[i][0] for i in range(len(split))])
    assert not (firsts[:REAL] == tag).any() and (firsts[REAL:] == tag).all()
    assert all(tag not in split.src[i][1:].tolist() for i in range(len(split)))
    assert tag not in split.tgt.to_lists()[0]
    # The tag is never text: a literal "<BT>" is ordinary pieces, and the tag decodes to nothing.
    assert tag not in tokenizer.encode_src([f"a {SYNTHETIC_TAG} b"])[0]
    assert tokenizer.decode_tgt([[tag]]) == [""]


@pytest.mark.parametrize(("ratio", "real", "synthetic"), [(0.0, REAL, SYNTHETIC), (1.0, SYNTHETIC, SYNTHETIC),
                                                           (0.5, 900, SYNTHETIC), (1.2, 375, SYNTHETIC),
                                                           (2.0, REAL, 600)])
def test_epoch_draws_the_ratio(mixed_run, ratio, real, synthetic):
    cfg = dataclasses.replace(mixed_run, data=dataclasses.replace(mixed_run.data, synthetic_ratio=ratio),
                              train=dataclasses.replace(mixed_run.train, pad_multiple=1))
    lines: list[str] = []
    data = TrainingData(cfg, cfg.run_dir, load_split(cfg.run_dir, "train"), Tokenizer.from_files(cfg.run_dir),
                        DistInfo(), lines.append)
    drawn = np.concatenate(data.epoch(1).batches)
    assert (drawn < REAL).sum() == real and (drawn >= REAL).sum() == synthetic
    assert np.isin(np.arange(REAL), drawn).all()  # upsampling keeps every real pair
    assert lines == [epoch_mix([REAL], SYNTHETIC, ratio, True).describe()]
    assert f"real {REAL} x{real / REAL:.2f} = {real}, synthetic {SYNTHETIC}" in lines[0]


def test_cache_key(mixed_run, synthetic_dir, multi30k_dir, reports):
    root = Path(mixed_run.run_root)
    prepare(_config(multi30k_dir, root, synthetic_dir, "data.synthetic_ratio=2"))
    assert "up to date" in reports()  # the ratio shapes epochs, not the cache
    untagged = _config(multi30k_dir, root, synthetic_dir, "data.synthetic_tag=false", "name=untagged")
    prepare(untagged)
    assert "up to date" not in reports()
    assert prepared_synthetic(untagged.run_dir)["tag"] is None
    assert Tokenizer.from_files(untagged.run_dir).control_id(SYNTHETIC_TAG) is None
    copy = synthetic_dir.parent / "copy"
    copy.mkdir()
    for lang in ("en", "de"):
        (copy / f"train.{lang}").write_bytes((synthetic_dir / f"train.{lang}").read_bytes())
    cfg = _config(multi30k_dir, root, copy, "name=grown")
    prepare(cfg)
    reports()
    for lang in ("en", "de"):  # more synthetic pairs in the same files: rebuilt
        with open(copy / f"train.{lang}", "a", encoding="utf-8") as f:
            f.write("ein Hund .\n" if lang == "de" else "a dog .\n")
    prepare(cfg)
    assert "up to date" not in reports() and prepared_synthetic(cfg.run_dir)["sentences"] == SYNTHETIC + 1


def test_train_logs_the_mix_and_translate_has_no_tag(mixed_run, synthetic_dir, multi30k_dir, tmp_path, monkeypatch,
                                                     capsys):
    config = Path(__file__).parents[1] / "configs" / "tiny.yaml"
    args = ["--set", f"data.path={multi30k_dir}", "--set", f"run_root={tmp_path / 'runs'}", "--set",
            f"data.train_limit={REAL}", "--set", f"data.synthetic=[{synthetic_dir}]", "--set", "data.synthetic_ratio=1",
            "--set", "train.max_updates=3", "--set", "train.valid_every=0", "--set", "train.valid_bleu=false",
            "--set", "train.warmup=1", "--set", "train.threads=1"]
    code, out, err = run_cli(monkeypatch, capsys, "train", config, *args)
    assert code == 0, err
    log = (tmp_path / "runs" / "tiny" / "train.log").read_text()
    assert f"synthetic data: real {REAL} x1.50 = 450, synthetic 450 x1.00 = 450 (tagged <BT>)" in log
    src = tmp_path / "in.en"
    src.write_text(f"two dogs run .\n{SYNTHETIC_TAG} a man\n\n", encoding="utf-8")
    ckpt = tmp_path / "runs" / "tiny" / "checkpoints" / "last.pt"
    # --protect none: a literal "<BT>" in a person's text is an `<x>` placeholder to protection, kept
    # verbatim; here the question is whether the model itself ever writes the tag.
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--beam", "2", "--protect", "none")
    assert code == 0, err
    assert len(out.split("\n")) == 4 and SYNTHETIC_TAG not in out


def test_bad_synthetic_folder_is_one_line(multi30k_dir, tmp_path, monkeypatch, capsys):
    config = Path(__file__).parents[1] / "configs" / "tiny.yaml"
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder, message in ((tmp_path / "nowhere", "not a folder"), (empty, "no train.en + train.de")):
        code, _, err = run_cli(monkeypatch, capsys, "prepare", config, "--set", f"data.path={multi30k_dir}",
                               "--set", f"run_root={tmp_path / 'r'}", "--set", f"data.synthetic=[{folder}]")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli(monkeypatch, capsys, "prepare", config, "--set", "data.synthetic_ratio=-1")
    assert code == 2 and "data.synthetic_ratio" in err


def test_subword_sampling_keeps_the_tag(mixed_run):
    """tokenizer.sampling_alpha resegments synthetic sources too, the <BT> tag kept in front."""
    cfg = dataclasses.replace(mixed_run, tokenizer=dataclasses.replace(mixed_run.tokenizer, sampling_alpha=0.1),
                              train=dataclasses.replace(mixed_run.train, pad_multiple=1))
    tokenizer = Tokenizer.from_files(cfg.run_dir)
    tag = tokenizer.control_id(SYNTHETIC_TAG)
    cached = load_split(cfg.run_dir, "train")
    data = TrainingData(cfg, cfg.run_dir, cached, tokenizer, DistInfo(), lambda _: None)
    sampled = data.epoch(1).split.src
    assert all(sampled[i][0] == tag for i in range(REAL, REAL + SYNTHETIC))
    assert not any(sampled[i][0] == tag for i in range(REAL))
    changed = sum(sampled[i].tolist() != cached.src[i].tolist() for i in range(REAL, REAL + SYNTHETIC))
    assert changed > SYNTHETIC // 4  # resampled, not kept canonical
