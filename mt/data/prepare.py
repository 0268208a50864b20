"""The prepare stage: train sentencepiece, encode every split into memory-mapped token arrays.

Layout in `cfg.run_dir` (see ARCHITECTURE.md): `config.yaml`, `spm.model` (or `spm.src.model` +
`spm.tgt.model`), and in `data/`: `<split>.{src,tgt}.ids` (int32, little-endian, all sentences
concatenated, no BOS/EOS), `<split>.{src,tgt}.offsets` (int64, N+1), `clean_report.json`, and
`manifest.json`, written last: a cache without a manifest, or whose fingerprint differs from the
inputs + config, is rebuilt. The corpus is streamed in chunks (`mt.data.encode`, in
`tokenizer.workers` processes): memory is bounded by the tokenizer sample and a few chunks in
flight, not by the corpus size.

Lengths are subword pieces. The training split is cleaned after encoding (`data.max_len`,
`data.max_len_ratio`, and `model.max_positions`: the source + EOS and BOS + target must fit);
validation and test pairs are kept whole but cut to `model.max_positions - 1` pieces a side,
so that validation loss never meets a sequence the model cannot encode. Every split's target
side is checked for `decode(encode(line)) == line`; the counts (and a few examples) of pairs
dropped, truncated and changed go to `clean_report.json`, with a warning when they are many.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mt.config import Config, DataConfig
from mt.config_load import config_to_yaml, save_config
from mt.data import corpus
from mt.data.encode import encode_split, split_path, worker_pool
from mt.data.splits import MANIFEST
from mt.data.tokenizer import (
    JOINT_MODEL,
    SRC_MODEL,
    TGT_MODEL,
    Tokenizer,
    reservoir_sample,
    train_sentencepiece,
)
from mt.errors import MTError, MTWarning
from mt.textio import atomic_write

log = logging.getLogger(__name__)  # stage reports; the CLI shows them, a server may not

CACHE_VERSION = 2  # 2: cleaning counts pieces, max_positions filter and truncation, byte fallback
CLEAN_REPORT = "clean_report.json"
DROP_WARNING = 0.05  # warn when cleaning drops more than this fraction of the training pairs
ROUND_TRIP_WARNING = 0.001  # warn when more target lines than this fraction change in the tokenizer
# The tokenizer's training sample is drawn before any tokenizer exists, so it is filtered by
# characters: empty pairs, and lines that could exceed the 4192 UTF-8 bytes sentencepiece trains
# on (1048 characters of up to 4 bytes; it would skip them anyway). No ratio rule: a misaligned
# pair is still good text to learn pieces from.
SAMPLE_LIMITS = corpus.CleanLimits(max_len=4192 // 4, max_len_ratio=0)


# --------------------------------------------------------------------------- fingerprint


def _data_for_fingerprint(cfg: Config) -> dict[str, Any]:
    tok = asdict(cfg.tokenizer)
    for key in ("workers", "sampling_alpha", "sampling_nbest"):
        tok.pop(key)  # processes do not change the cache, and sampling happens per epoch in training
    data = json.loads(json.dumps(asdict(cfg.data)))
    data.pop("pair_temperature")  # sampling, not the cache
    if not data["pairs"]:
        data.pop("pairs")  # a bilingual cache keeps the fingerprint it had before data.pairs existed
    return {"data": data, "tokenizer": tok, "seed": cfg.train.seed,
            "max_positions": cfg.model.max_positions, "cache_version": CACHE_VERSION}


def _fingerprint(cfg: Config, splits: list[str], reused: Tokenizer | None = None) -> tuple[str, dict[str, Any]]:
    """sha256 over the input files (path, size, mtime) of `splits` and the config that shapes the
    cache, plus the sha256 of a `reused` tokenizer's model bytes (fine-tuning)."""
    inputs = {}
    for split in splits:
        inputs[split] = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
                         for p in corpus.split_files(cfg.data, split)]
    payload = {"inputs": inputs, **_data_for_fingerprint(cfg)}
    if reused is not None:
        payload["reused_tokenizer"] = _tokenizer_sha256(reused)
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return digest, payload


def _tokenizer_sha256(tokenizer: Tokenizer) -> str:
    """sha256 over a tokenizer's model bytes (source, then target when separate)."""
    h = hashlib.sha256()
    for side, data in sorted(tokenizer.model_bytes().items()):
        h.update(side.encode() + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _is_up_to_date(data_dir: Path, digest: str) -> bool:
    path = data_dir / MANIFEST
    if not path.is_file():
        return False
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    if manifest.get("fingerprint") != digest:
        return False
    run_dir = data_dir.parent
    models = [JOINT_MODEL] if manifest.get("joint") else [SRC_MODEL, TGT_MODEL]
    needed = [run_dir / m for m in models] + [split_path(data_dir, s, side, kind) for s in manifest.get("splits", {})
                                              for side in ("src", "tgt") for kind in ("ids", "offsets")]
    return all(p.is_file() for p in needed)


# --------------------------------------------------------------------------- the stage


def _train_pairs(data: DataConfig) -> Iterator[tuple[str, str]]:
    pairs = corpus.iter_split(data, data.train_split)
    return itertools.islice(pairs, data.train_limit) if data.train_limit > 0 else pairs


def _empty_after_cleaning(data: DataConfig, report: corpus.CleanReport) -> MTError:
    return MTError(f"training split '{data.train_split}' in {data.path}: no sentence pairs left after cleaning "
                   f"({report.summary()})")


def _install(staging: Path, run_dir: Path, data_dir: Path, joint: bool) -> None:
    """Move the staged files into place; the caller writes the manifest afterwards."""
    (data_dir / MANIFEST).unlink(missing_ok=True)  # from here until the new manifest the cache reads as incomplete
    stale = [run_dir / m for m in ((SRC_MODEL, TGT_MODEL) if joint else (JOINT_MODEL,))]
    stale += [p for p in data_dir.glob("*") if p.suffix in (".ids", ".offsets")]
    for p in stale:
        p.unlink(missing_ok=True)
    for p in sorted(staging.iterdir()):
        dest = (data_dir if p.suffix in (".ids", ".offsets", ".json") else run_dir) / p.name
        p.replace(dest)


def _write_json(path: Path, obj: Any) -> None:
    with atomic_write(path) as f:
        f.write((json.dumps(obj, indent=2) + "\n").encode("utf-8"))


def _refresh_config(cfg: Config, run_dir: Path) -> None:
    """Rewrite run_dir/config.yaml when settings outside the fingerprint (e.g. train.*) changed."""
    text = config_to_yaml(cfg).encode("utf-8")
    current = run_dir / "config.yaml"
    if not (current.is_file() and current.read_bytes() == text):
        with atomic_write(current) as f:
            f.write(text)


def _splits_to_prepare(data: DataConfig) -> tuple[list[str], list[str]]:
    """(splits to encode: train, valid and the test splits found, in that order; test splits skipped).

    Missing train/valid files are an error; a test split without files is skipped with a note.
    """
    for split in (data.train_split, data.valid_split):
        corpus.split_files(data, split)  # MTError naming the missing file
        if not corpus.split_available(data, split):
            raise MTError(f"split '{split}': not found in {data.hub_name or data.path}")
    tests = []
    for split in data.test_splits:
        if corpus.split_available(data, split):
            tests.append(split)
        else:
            log.info(f"prepare: test split '{split}' not found in {data.path}; skipped")
    splits = list(dict.fromkeys([data.train_split, data.valid_split, *tests]))
    return splits, [s for s in data.test_splits if s not in tests]


def _train_tokenizer(cfg: Config, staging: Path) -> Tokenizer:
    """Pass 1: train sentencepiece on a bounded, seeded sample of cleaned training pairs and save
    its model file(s) into `staging`."""
    data, tok_cfg = cfg.data, cfg.tokenizer
    report = corpus.CleanReport()
    sample = reservoir_sample(corpus.clean_pairs(_train_pairs(data), SAMPLE_LIMITS, report),
                              tok_cfg.sample_size, cfg.train.seed)
    if report.kept == 0:
        raise _empty_after_cleaning(data, report)
    t0 = time.perf_counter()
    tokenizer = train_sentencepiece([s for s, _ in sample], [t for _, t in sample], tok_cfg)
    del sample
    log.info(f"prepare: trained {tok_cfg.type} sentencepiece ({'joint' if tokenizer.joint else 'separate'}, "
          f"vocab {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size}) on {min(report.kept, tok_cfg.sample_size)} "
          f"sampled pairs in {time.perf_counter() - t0:.1f}s")
    tokenizer.save(staging)
    return tokenizer


@dataclass(frozen=True)
class _EncodeResult:
    """What pass 2 reports for the manifest and clean_report.json."""

    stats: dict[str, dict[str, int]]  # split -> {"sentences", "src_tokens", "tgt_tokens"}
    clean_report: dict[str, Any]  # the training split's counts and cleaning settings
    seconds: float
    pairs_per_second: float


def _warn_about(split: str, stats: dict[str, int], report: corpus.CleanReport | None, examples: list[str],
               max_positions: int) -> None:
    """MTWarnings for many dropped pairs, truncated pairs and target lines the tokenizer changes."""
    if report is not None and report.dropped_fraction() > DROP_WARNING:
        warnings.warn(f"cleaning dropped {100 * report.dropped_fraction():.1f}% of the '{split}' pairs "
                      f"({report.summary()}); see data/{CLEAN_REPORT}", MTWarning, stacklevel=3)
    if stats["truncated"]:
        warnings.warn(f"{stats['truncated']} '{split}' pairs are longer than model.max_positions={max_positions} "
                      f"pieces and were cut to {max_positions - 1} (validation loss sees the cut pairs)",
                      MTWarning, stacklevel=3)
    if stats["round_trip_changed"] > ROUND_TRIP_WARNING * max(stats["sentences"], 1):
        warnings.warn(f"{stats['round_trip_changed']} of {stats['sentences']} '{split}' target lines do not come back "
                      f"unchanged from the tokenizer, e.g. {examples[0]!r}; see data/{CLEAN_REPORT}",
                      MTWarning, stacklevel=3)


def _encode_splits(cfg: Config, splits: list[str], tokenizer: Tokenizer, staging: Path) -> _EncodeResult:
    """Pass 2: encode every split into `staging`, streamed, in `tokenizer.workers` processes
    (cleaning the training split, truncating the others to the model's length)."""
    data, workers, max_positions = cfg.data, cfg.tokenizer.workers, cfg.model.max_positions
    t0 = time.perf_counter()
    stats: dict[str, dict[str, int]] = {}
    clean_report: dict[str, Any] = {}
    truncated: dict[str, int] = {}
    round_trip: dict[str, dict[str, Any]] = {}
    pool = worker_pool(tokenizer, workers)
    try:
        for split in splits:
            is_train = split == data.train_split
            pairs = _train_pairs(data) if is_train else corpus.iter_split(data, split)
            clean = corpus.CleanLimits.from_config(data, max_positions) if is_train else None
            stats[split], rep, examples = encode_split(pairs, clean, max_positions - 1, tokenizer, pool, workers,
                                                        staging, split)
            s = stats[split]
            if is_train:
                if rep.kept == 0:
                    raise _empty_after_cleaning(data, rep)
                clean_report = {"split": split, **rep.to_dict(), "length_unit": "pieces", "max_len": data.max_len,
                                "max_len_ratio": data.max_len_ratio, "max_positions": max_positions,
                                "train_limit": data.train_limit}
            else:
                truncated[split] = s["truncated"]
            round_trip[split] = {"lines": s["sentences"], "changed": s["round_trip_changed"], "examples": examples}
            dropped = f"; {rep.summary()}" if is_train else ""
            cut = f"; {s['truncated']} truncated to {max_positions - 1} pieces" if s["truncated"] else ""
            log.info(f"  {split}: {s['sentences']} sentences, {s['src_tokens']} src / {s['tgt_tokens']} tgt tokens"
                  f"{dropped}{cut}")
            _warn_about(split, s, rep if is_train else None, examples, max_positions)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    clean_report.update(truncated=truncated, round_trip=round_trip)
    seconds = time.perf_counter() - t0
    total = sum(s["sentences"] for s in stats.values())
    rate = total / seconds if seconds > 0 else float("inf")
    log.info(f"prepare: encoded {total} sentence pairs in {seconds:.1f}s ({rate:,.0f} pairs/s, {workers} worker(s))")
    return _EncodeResult(stats, clean_report, seconds, rate)


def prepare(cfg: Config, *, force: bool = False, tokenizer: Tokenizer | None = None) -> Path:
    """Train the tokenizer and encode train (cleaned), valid and test splits into `cfg.run_dir`.

    With `tokenizer` (fine-tuning, `train.init_from`: the init checkpoint's, which
    `mt.train.init_from.prepare_tokenizer` reads) no sentencepiece model is trained: that one is
    saved into the run byte for byte and encodes every split.

    A no-op ("up to date"; only config.yaml is refreshed if other sections changed) when the
    manifest fingerprint matches the inputs and config, unless `force`. Missing train/valid files
    are an error; a test split without files is skipped with a note. Everything is built in a
    staging folder and moved into place; the manifest is written last. A config with `data.pairs`
    is prepared by `mt.data.pairs.prepare_pairs` (`prepare_run` picks the right one).
    """
    if cfg.data.pairs:  # that module builds on this one's helpers: it is the one that dispatches
        raise MTError("prepare: a config with data.pairs is prepared by mt.data.pairs.prepare_run")
    run_dir, data_dir = cfg.run_dir, cfg.run_dir / "data"
    if cfg.train.init_from and tokenizer is None:
        raise MTError(f"prepare: train.init_from '{cfg.train.init_from}' is set: pass its tokenizer "
                      f"(mt.train.init_from.prepare_tokenizer)")
    splits, skipped = _splits_to_prepare(cfg.data)
    digest, payload = _fingerprint(cfg, splits, tokenizer)
    if not force and _is_up_to_date(data_dir, digest):
        _refresh_config(cfg, run_dir)
        log.info(f"prepare: {run_dir} is up to date")
        return run_dir

    start = time.perf_counter()
    data_dir.mkdir(parents=True, exist_ok=True)
    staging = run_dir / ".prepare.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        if tokenizer is None:
            tokenizer = _train_tokenizer(cfg, staging)
        else:
            tokenizer.save(staging)
            log.info(f"prepare: reusing the tokenizer of {cfg.train.init_from} ({'joint' if tokenizer.joint else 'separate'}, "
                     f"vocab {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size}); no sentencepiece training")
        encoded = _encode_splits(cfg, splits, tokenizer, staging)
        _write_json(staging / CLEAN_REPORT, encoded.clean_report)
        save_config(cfg, staging / "config.yaml")
        _install(staging, run_dir, data_dir, tokenizer.joint)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = {
        "fingerprint": digest, "cache_version": CACHE_VERSION, "joint": tokenizer.joint,
        "src_vocab_size": tokenizer.src_vocab_size, "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "splits": encoded.stats, "skipped_test_splits": skipped,
        "encode_seconds": round(encoded.seconds, 3), "pairs_per_second": round(encoded.pairs_per_second, 1),
        "total_seconds": round(time.perf_counter() - start, 3), "inputs": payload["inputs"],
    }
    if "reused_tokenizer" in payload:
        manifest["tokenizer_from"] = {"path": cfg.train.init_from, "sha256": payload["reused_tokenizer"]}
    _write_json(data_dir / MANIFEST, manifest)  # last: its presence marks the cache complete
    log.info(f"prepare: wrote {run_dir} in {manifest['total_seconds']:.1f}s")
    return run_dir
