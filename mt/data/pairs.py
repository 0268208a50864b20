"""Several language pairs in one model (`data.pairs`, Johnson et al. 2017): the prepare stage for them.

One joint sentencepiece model (or source + target models) is trained on a seeded sample of all
pairs' training data, with a control piece `<2lang>` per target language (mt.data.tokenizer). Every
source is encoded with its pair's tag id in front (`Tokenizer.for_target`), so the tag costs one
source position and is never split or confused with text. Layout in `run_dir/data`:

- `<data.train_split>.{src,tgt}.{ids,offsets}`: every pair's cleaned training data, concatenated in
  the order of `data.pairs` (the manifest's `pairs[i].train_sentences` give the boundaries that the
  temperature sampler of mt.data.batching needs);
- `<src>-<tgt>.<split>.*`: each pair's validation and test splits (e.g. `en-fr.val`), kept whole
  but cut to the model's length like the bilingual ones;
- `manifest.json` with `pairs`: name, languages, training sentences and the prepared name of each
  of its splits; `clean_report.json` with one cleaning report per pair.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mt.config import Config, DataConfig, PairConfig
from mt.config_load import save_config
from mt.data import corpus
from mt.data.encode import IDS_DTYPE, OFFSETS_DTYPE, encode_split, split_path, worker_pool
from mt.data.prepare import (
    CACHE_VERSION,
    CLEAN_REPORT,
    SAMPLE_LIMITS,
    _data_for_fingerprint,
    _empty_after_cleaning,
    _install,
    _is_up_to_date,
    _refresh_config,
    _splits_to_prepare,
    _train_pairs,
    _warn_about,
    _write_json,
    prepare,
)
from mt.data.splits import MANIFEST
from mt.data.tokenizer import Tokenizer, reservoir_sample, train_sentencepiece
from mt.errors import MTError

log = logging.getLogger(__name__)


def pair_name(pair: PairConfig) -> str:
    """`en-de`: how reports, labels and prepared files name a pair."""
    return f"{pair.src_lang}-{pair.tgt_lang}"


def pair_data(data: DataConfig, pair: PairConfig) -> DataConfig:
    """The bilingual DataConfig of one pair (its path, languages, format and splits; the cleaning
    settings of `data`), so every corpus reader works on it unchanged."""
    return dataclasses.replace(data, path=pair.path, src_lang=pair.src_lang, tgt_lang=pair.tgt_lang,
                               format=pair.format, hub_name=pair.hub_name, hub_config=pair.hub_config,
                               train_split=pair.train_split, valid_split=pair.valid_split,
                               test_splits=pair.test_splits, pairs=())


def prepared_split(pair: PairConfig, split: str) -> str:
    """The name a pair's validation or test split is prepared under: `en-de.val`."""
    return f"{pair_name(pair)}.{split}"


def target_langs(data: DataConfig) -> list[str]:
    """The target languages of `data.pairs`, in order of first appearance (one tag each)."""
    return list(dict.fromkeys(p.tgt_lang for p in data.pairs))


def pair_manifest(run_dir: Path) -> list[dict[str, Any]]:
    """The `pairs` entries of a prepared multi-pair run's manifest ([] for a bilingual run)."""
    path = Path(run_dir) / "data" / MANIFEST
    if not path.is_file():
        raise MTError(f"{run_dir}: data not prepared (no data/{MANIFEST}); run `mt prepare` first")
    return list(json.loads(path.read_text(encoding="utf-8")).get("pairs", []))


def _fingerprint(cfg: Config, splits: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
    """sha256 over every pair's input files (path, size, mtime) and the config that shapes the cache."""
    inputs: dict[str, list[list[Any]]] = {}
    for pair in cfg.data.pairs:
        data = pair_data(cfg.data, pair)
        for split in splits[pair_name(pair)]:
            inputs[prepared_split(pair, split)] = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
                                                   for p in corpus.split_files(data, split)]
    payload = {"inputs": inputs, **_data_for_fingerprint(cfg)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest(), payload


def _all_train_pairs(cfg: Config) -> Iterator[tuple[str, str]]:
    return itertools.chain.from_iterable(_train_pairs(pair_data(cfg.data, p)) for p in cfg.data.pairs)


def _train_tokenizer(cfg: Config, staging: Path) -> Tokenizer:
    """One tokenizer over a seeded sample of all pairs' training data, with a tag per target language."""
    report = corpus.CleanReport()
    sample = reservoir_sample(corpus.clean_pairs(_all_train_pairs(cfg), SAMPLE_LIMITS, report),
                              cfg.tokenizer.sample_size, cfg.train.seed)
    if report.kept == 0:
        raise MTError(f"data.pairs: no training sentence pairs left after cleaning ({report.summary()})")
    t0 = time.perf_counter()
    langs = target_langs(cfg.data)
    tokenizer = train_sentencepiece([s for s, _ in sample], [t for _, t in sample], cfg.tokenizer, langs)
    log.info(f"prepare: trained {cfg.tokenizer.type} sentencepiece ({'joint' if tokenizer.joint else 'separate'}, "
             f"vocab {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size}, tags "
             f"{' '.join(f'<2{lang}>' for lang in langs)}) on {len(sample)} sampled pairs of "
             f"{len(cfg.data.pairs)} language pairs in {time.perf_counter() - t0:.1f}s")
    tokenizer.save(staging)
    return tokenizer


def _concatenate(staging: Path, parts: list[str], out: str) -> None:
    """Write split `out` as the splits `parts` one after the other (offsets shifted), streamed, then
    delete the parts."""
    for side in ("src", "tgt"):
        with open(split_path(staging, out, side, "ids"), "wb") as ids_out, \
                open(split_path(staging, out, side, "offsets"), "wb") as off_out:
            np.zeros(1, dtype=OFFSETS_DTYPE).tofile(off_out)
            base = 0
            for part in parts:
                with open(split_path(staging, part, side, "ids"), "rb") as f:
                    shutil.copyfileobj(f, ids_out)
                offsets = np.fromfile(split_path(staging, part, side, "offsets"), dtype=OFFSETS_DTYPE)
                (offsets[1:] + base).tofile(off_out)
                base += int(offsets[-1])
            assert ids_out.tell() == base * IDS_DTYPE.itemsize
    for part in parts:
        for side in ("src", "tgt"):
            for kind in ("ids", "offsets"):
                split_path(staging, part, side, kind).unlink()


def _encode_pair(cfg: Config, pair: PairConfig, splits: list[str], tokenizer: Tokenizer, staging: Path,
                 stats: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Encode one pair's splits into `staging` with its tag; returns its clean report entry."""
    data, workers, max_positions = pair_data(cfg.data, pair), cfg.tokenizer.workers, cfg.model.max_positions
    tagged = tokenizer.for_target(pair.tgt_lang)
    entry: dict[str, Any] = {"truncated": {}, "round_trip": {}}
    pool = worker_pool(tagged, workers)
    try:
        for split in splits:
            is_train = split == data.train_split
            name = prepared_split(pair, split)
            pairs = _train_pairs(data) if is_train else corpus.iter_split(data, split)
            clean = corpus.CleanLimits.from_config(data, max_positions) if is_train else None
            s, rep, examples = encode_split(pairs, clean, max_positions - 1, tagged, pool, workers, staging, name)
            stats[name] = s
            if is_train:
                if rep.kept == 0:
                    raise _empty_after_cleaning(data, rep)
                entry.update(split=split, **rep.to_dict())
            else:
                entry["truncated"][split] = s["truncated"]
            entry["round_trip"][split] = {"lines": s["sentences"], "changed": s["round_trip_changed"],
                                          "examples": examples}
            dropped = f"; {rep.summary()}" if is_train else ""
            log.info(f"  {pair_name(pair)} {split}: {s['sentences']} sentences, {s['src_tokens']} src / "
                     f"{s['tgt_tokens']} tgt tokens{dropped}")
            _warn_about(name, s, rep if is_train else None, examples, max_positions)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return entry


def prepare_run(cfg: Config, *, force: bool = False, tokenizer: Tokenizer | None = None) -> Path:
    """The prepare stage of any config (what `mt prepare` and `mt train` run): `prepare_pairs` for
    one with data.pairs, else the bilingual `mt.data.prepare.prepare` (with `tokenizer`, the one a
    fine-tuning run reuses: `train.init_from`)."""
    if not cfg.data.pairs:
        return prepare(cfg, force=force, tokenizer=tokenizer)
    if tokenizer is not None:
        raise MTError("train.init_from: fine-tuning a multi-pair config (data.pairs) is not supported yet; "
                      "fine-tune one pair at a time, or train the multi-pair model from scratch")
    return prepare_pairs(cfg, force=force)


def prepare_pairs(cfg: Config, *, force: bool = False) -> Path:
    """`mt prepare` for a multi-pair config: one tokenizer with target tags, every pair's splits
    encoded with its tag, the training splits concatenated. Cached and installed like the bilingual
    stage (mt.data.prepare): a no-op when the manifest's fingerprint matches, unless `force`."""
    run_dir, data_dir = cfg.run_dir, cfg.run_dir / "data"
    splits: dict[str, list[str]] = {}
    skipped: dict[str, list[str]] = {}
    for pair in cfg.data.pairs:
        splits[pair_name(pair)], skipped[pair_name(pair)] = _splits_to_prepare(pair_data(cfg.data, pair))
    digest, payload = _fingerprint(cfg, splits)
    if not force and _is_up_to_date(data_dir, digest):
        _refresh_config(cfg, run_dir)
        log.info(f"prepare: {run_dir} is up to date")
        return run_dir

    start = time.perf_counter()
    data_dir.mkdir(parents=True, exist_ok=True)
    staging = run_dir / ".prepare.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    stats: dict[str, dict[str, int]] = {}
    try:
        tokenizer = _train_tokenizer(cfg, staging)
        t0 = time.perf_counter()
        reports, pairs_info = {}, []
        for pair in cfg.data.pairs:
            name = pair_name(pair)
            reports[name] = _encode_pair(cfg, pair, splits[name], tokenizer, staging, stats)
            pairs_info.append({
                "name": name, "src_lang": pair.src_lang, "tgt_lang": pair.tgt_lang,
                "tag": tokenizer.for_target(pair.tgt_lang).src_prefix[0],
                "train_sentences": stats[prepared_split(pair, pair.train_split)]["sentences"],
                "valid_split": prepared_split(pair, pair.valid_split),
                "test_splits": {s: prepared_split(pair, s) for s in splits[name]
                                if s not in (pair.train_split, pair.valid_split)},
            })
        parts = [prepared_split(p, p.train_split) for p in cfg.data.pairs]
        train = cfg.data.train_split
        stats[train] = {k: sum(stats[p][k] for p in parts) for k in stats[parts[0]]}
        _concatenate(staging, parts, train)
        for p in parts:
            del stats[p]
        seconds = time.perf_counter() - t0
        _write_json(staging / CLEAN_REPORT, {"pairs": reports})
        save_config(cfg, staging / "config.yaml")
        _install(staging, run_dir, data_dir, tokenizer.joint)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = {
        "fingerprint": digest, "cache_version": CACHE_VERSION, "joint": tokenizer.joint,
        "src_vocab_size": tokenizer.src_vocab_size, "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "splits": stats, "pairs": pairs_info, "skipped_test_splits": skipped,
        "encode_seconds": round(seconds, 3), "total_seconds": round(time.perf_counter() - start, 3),
        "inputs": payload["inputs"],
    }
    _write_json(data_dir / MANIFEST, manifest)  # last: its presence marks the cache complete
    log.info(f"prepare: wrote {run_dir} ({len(pairs_info)} language pairs) in {manifest['total_seconds']:.1f}s")
    return run_dir


def model_targets(cfg: Config) -> list[str]:
    """The target languages a model of `cfg` translates into: its pairs' (one tag each), else data.tgt_lang."""
    return target_langs(cfg.data) if cfg.data.pairs else [cfg.data.tgt_lang]


def tokenizer_for_target(tokenizer: Tokenizer, cfg: Config, lang: str | None, *, flag: str = "--target-lang") -> Tokenizer:
    """The tokenizer that makes the model of `cfg` translate into `lang`: with its tag in front for a
    multi-pair model (`lang` may be left out when it has one target only), unchanged for a bilingual
    one (`lang`, if given, must be its target). MTError naming the languages the model knows."""
    targets = model_targets(cfg)
    if lang is None:
        if len(targets) > 1:
            raise MTError(f"{flag}: required: this model translates into {', '.join(targets)}")
        lang = targets[0]
    if lang not in targets:
        raise MTError(f"{flag} {lang}: the model does not translate into '{lang}'; it knows {', '.join(targets)}")
    return tokenizer.for_target(lang) if cfg.data.pairs else tokenizer
