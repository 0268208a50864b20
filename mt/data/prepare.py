"""The prepare stage: train sentencepiece, encode every split into memory-mapped token arrays.

A model serves a list of language pairs, `cfg.data.pairs` (a bilingual config is its one pair,
without target tags). One sentencepiece model, joint or source + target, is trained on a seeded
sample of all pairs' training data; with `data.target_tags` its source side holds a control piece
`<2lang>` per target language (Johnson et al. 2017, mt.data.tokenizer). Every split of a pair is
encoded with `tokenizer.for_target(pair.tgt_lang)`, which puts the pair's tag id in front of each
source when the model has tags: the tag costs one source position and is never split or
confused with text.

Layout in `cfg.run_dir` (ARCHITECTURE.md maps the rest of a run directory): `config.yaml`,
`spm.model` (or `spm.src.model` + `spm.tgt.model`), and in `data/`:

- `<data.train_split>.{src,tgt}.{ids,offsets}`: every pair's cleaned training data, concatenated in
  the order of `data.pairs` (int32 ids, little-endian, no BOS/EOS; int64 offsets, N+1);
- each pair's validation and test splits under `DataConfig.split_label`: `val` for a model of one
  pair, `en-de.val` among several; kept whole, but cut to the model's length;
- `clean_report.json`: the cleaning settings and, per pair, its training pairs dropped, its
  valid/test pairs truncated and its target lines the tokenizer changes;
- `manifest.json`, written last: `pairs` (name, languages, tag id, training sentences: the
  boundaries the temperature sampler of mt.data.batching needs, and the prepared name of each
  split), split sizes and the fingerprint of the inputs + config. A cache without a manifest, or
  whose fingerprint differs, is rebuilt; so is one an older mt wrote (its `cache_version`), with a
  one-line notice.

With `augment.*` shares, the training split's pairs are followed by augmented copies as they are
encoded (upper case, Title Case, placeholders, noise: mt.data.augment), after the tokenizer is trained.

With `clean.enabled`, every pair's training split first goes through the cleaning stage
(mt.data.clean: rules and language identification on the raw text, into a temporary file both
passes read); its counts and examples per rule go to `clean_report.json` under `clean`.

The corpus is streamed in chunks (`mt.data.encode`, in `tokenizer.workers` processes): memory is
bounded by the tokenizer sample and a few chunks in flight, not by the corpus size.

Lengths are subword pieces. The training split is cleaned after encoding (`data.max_len`,
`data.max_len_ratio`, and `model.max_positions`: the source + EOS and BOS + target must fit);
validation and test pairs are kept whole but cut to `model.max_positions - 1` pieces a side,
so that validation loss never meets a sequence the model cannot encode. Every split's target
side is checked for `decode(encode(line)) == line`; the counts (and a few examples) of pairs
dropped, truncated and changed go to `clean_report.json`, with a warning when they are many.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mt.config import Config, PairConfig
from mt.config_load import config_to_yaml, save_config
from mt.data import corpus, synthetic
from mt.data.augment import augment_pairs
from mt.data.clean import CLEAN_VERSION, CleanStats, clean_for_prepare, read_cleaned
from mt.data.encode import concatenate_splits, encode_split, split_path, worker_pool
from mt.data.splits import MANIFEST
from mt.data.tokenizer import (
    JOINT_MODEL,
    SRC_MODEL,
    TGT_MODEL,
    Tokenizer,
    reservoir_sample,
    target_tag,
    train_sentencepiece,
)
from mt.errors import MTError, MTWarning
from mt.textio import atomic_write

log = logging.getLogger(__name__)  # stage reports; the CLI shows them, a server may not

# 3: one layout for every model (manifest and clean report list the pairs, one pair too);
# 2: cleaning counts pieces, max_positions filter and truncation, byte fallback
CACHE_VERSION = 3
CLEAN_REPORT = "clean_report.json"
DROP_WARNING = 0.05  # warn when cleaning drops more than this fraction of the training pairs
ROUND_TRIP_WARNING = 0.001  # warn when more target lines than this fraction change in the tokenizer
# The tokenizer's training sample is drawn before any tokenizer exists, so it is filtered by
# characters: empty pairs, and lines that could exceed the 4192 UTF-8 bytes sentencepiece trains
# on (1048 characters of up to 4 bytes; it would skip them anyway). No ratio rule: a misaligned
# pair is still good text to learn pieces from.
SAMPLE_LIMITS = corpus.CleanLimits(max_len=4192 // 4, max_len_ratio=0)
Cleaned = dict[str, tuple[Path, CleanStats]]  # the cleaning stage's file and counts per pair (mt.data.clean)


# --------------------------------------------------------------------------- fingerprint


def _shaping_config(cfg: Config) -> dict[str, Any]:
    """The settings that shape the cache (not: workers, sampling, which happens per epoch in
    training, the pair temperature, nor the data section's own keys a list of pairs leaves unused)."""
    tok = dataclasses.asdict(cfg.tokenizer)
    for key in ("workers", "sampling_alpha", "sampling_nbest"):
        tok.pop(key)
    d = cfg.data
    data = {"pairs": [dataclasses.asdict(p) for p in d.pairs], "target_tags": d.target_tags,
            "train_split": d.train_split, "train_limit": d.train_limit, "max_len": d.max_len,
            "max_len_ratio": d.max_len_ratio}
    shaping = {"data": data, "tokenizer": tok, "seed": cfg.train.seed,
               "max_positions": cfg.model.max_positions, "cache_version": CACHE_VERSION}
    if cfg.clean.enabled:  # the cleaning stage's settings and version (off: the key of before it existed)
        shaping["clean"] = {**dataclasses.asdict(cfg.clean), "version": CLEAN_VERSION}
    if cfg.augment.enabled:  # likewise the augmentation's (mt.data.augment)
        shaping["augment"] = dataclasses.asdict(cfg.augment)
    return shaping


def _fingerprint(cfg: Config, splits: dict[str, list[str]],
                 reused: Tokenizer | None = None) -> tuple[str, dict[str, Any]]:
    """sha256 over the input files (path, size, mtime) of every pair's `splits` and the config that
    shapes the cache, plus the sha256 of a `reused` tokenizer's model bytes (fine-tuning)."""
    inputs = {}
    for pair in cfg.data.pairs:
        for split in splits[pair.name]:
            inputs[cfg.data.split_label(pair, split)] = [
                [str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
                for p in corpus.split_files(pair, split)]
    payload = {"inputs": inputs, **_shaping_config(cfg), **synthetic.fingerprint_inputs(cfg)}
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
    version = manifest.get("cache_version")
    if version != CACHE_VERSION:
        log.info(f"prepare: {data_dir} was prepared by an older mt "
                 f"(cache version {version}, now {CACHE_VERSION}); "
                 f"preparing it again")
        return False
    if manifest.get("fingerprint") != digest:
        return False
    run_dir = data_dir.parent
    models = [JOINT_MODEL] if manifest.get("joint") else [SRC_MODEL, TGT_MODEL]
    needed = [run_dir / m for m in models]
    needed += [split_path(data_dir, s, side, kind) for s in manifest.get("splits", {})
               for side in ("src", "tgt") for kind in ("ids", "offsets")]
    return all(p.is_file() for p in needed)


# --------------------------------------------------------------------------- the stage


def _train_pairs(pair: PairConfig, limit: int, stage: Cleaned | None = None) -> Iterator[tuple[str, str]]:
    if stage and pair.name in stage:  # the cleaning stage's output (train_limit applied before it)
        return read_cleaned(stage[pair.name][0])
    pairs = corpus.iter_split(pair, pair.train_split)
    return itertools.islice(pairs, limit) if limit > 0 else pairs


def _empty_after_cleaning(pairs: Sequence[PairConfig], report: corpus.CleanReport) -> MTError:
    return MTError(f"training split '{pairs[0].train_split}' in {', '.join(p.path for p in pairs)}: "
                   f"no sentence pairs left after cleaning ({report.summary()})")


def _install(staging: Path, run_dir: Path, data_dir: Path, joint: bool) -> None:
    """Move the staged files into place; the caller writes the manifest afterwards."""
    # from here until the new manifest the cache reads as incomplete
    (data_dir / MANIFEST).unlink(missing_ok=True)
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


def _splits_to_prepare(pair: PairConfig) -> tuple[list[str], list[str]]:
    """(splits of `pair` to encode: train, valid and the test splits found, in that order; test
    splits skipped). Missing train/valid files are an error; a test split without files is
    skipped with a note."""
    for split in (pair.train_split, pair.valid_split):
        corpus.split_files(pair, split)  # MTError naming the missing file
        if not corpus.split_available(pair, split):
            raise MTError(f"split '{split}': not found in {pair.hub_name or pair.path}")
    tests = []
    for split in pair.test_splits:
        if corpus.split_available(pair, split):
            tests.append(split)
        else:
            log.info(f"prepare: test split '{split}' not found in {pair.path}; skipped")
    splits = list(dict.fromkeys([pair.train_split, pair.valid_split, *tests]))
    return splits, [s for s in pair.test_splits if s not in tests]


def _train_tokenizer(cfg: Config, staging: Path, stage: Cleaned) -> Tokenizer:
    """Pass 1: train sentencepiece on a bounded, seeded sample of all pairs' cleaned training data
    (with a tag per target language when data.target_tags) and save its model file(s) into `staging`."""
    data, tok_cfg = cfg.data, cfg.tokenizer
    report = corpus.CleanReport()
    train = itertools.chain.from_iterable(_train_pairs(p, data.train_limit, stage) for p in data.pairs)
    sample = reservoir_sample(corpus.clean_pairs(train, SAMPLE_LIMITS, report), tok_cfg.sample_size,
                              cfg.train.seed)
    if report.kept == 0:
        raise _empty_after_cleaning(data.pairs, report)
    t0 = time.perf_counter()
    tokenizer = train_sentencepiece([s for s, _ in sample], [t for _, t in sample], tok_cfg,
                                    data.target_langs, tags=data.target_tags,
                                    extra_symbols=synthetic.control_symbols(cfg))
    tags = " ".join(target_tag(lang) for lang in tokenizer.target_tags())
    tagged = f", tags {tags}" if tags else ""
    log.info(f"prepare: trained {tok_cfg.type} sentencepiece ({'joint' if tokenizer.joint else 'separate'}, "
             f"vocab {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size}{tagged}) on "
             f"{len(sample)} sampled pairs in {time.perf_counter() - t0:.1f}s")
    tokenizer.save(staging)
    return tokenizer


def _warn_about(split: str, stats: dict[str, int], report: corpus.CleanReport | None, examples: list[str],
               max_positions: int) -> None:
    """MTWarnings for many dropped pairs, truncated pairs and target lines the tokenizer changes."""
    if report is not None and report.dropped_fraction() > DROP_WARNING:
        warnings.warn(f"cleaning dropped {100 * report.dropped_fraction():.1f}% of the '{split}' pairs "
                      f"({report.summary()}); see data/{CLEAN_REPORT}", MTWarning, stacklevel=3)
    if stats["truncated"]:
        warnings.warn(f"{stats['truncated']} '{split}' pairs are longer than "
                      f"model.max_positions={max_positions} pieces and were cut to {max_positions - 1} "
                      f"(validation loss sees the cut pairs)",
                      MTWarning, stacklevel=3)
    if stats["round_trip_changed"] > ROUND_TRIP_WARNING * max(stats["sentences"], 1):
        warnings.warn(f"{stats['round_trip_changed']} of {stats['sentences']} '{split}' target lines "
                      f"do not come back unchanged from the tokenizer, e.g. {examples[0]!r}; "
                      f"see data/{CLEAN_REPORT}",
                      MTWarning, stacklevel=3)


def _encode_pair(cfg: Config, pair: PairConfig, splits: list[str], tokenizer: Tokenizer, staging: Path,
                 stats: dict[str, dict[str, int]], stage: Cleaned) -> dict[str, Any]:
    """Pass 2 for one pair: encode its splits into `staging`, streamed, in `tokenizer.workers`
    processes, with its target tag when the model has tags (cleaning the training split,
    truncating the others to the model's length); adds their counts to `stats` under their
    prepared names and returns the pair's clean report."""
    data, workers, max_positions = cfg.data, cfg.tokenizer.workers, cfg.model.max_positions
    tokenizer = tokenizer.for_target(pair.tgt_lang)
    cleaned: dict[str, Any] = {}
    truncated: dict[str, int] = {}
    round_trip: dict[str, dict[str, Any]] = {}
    pool = worker_pool(tokenizer, workers)
    try:
        for split in splits:
            is_train = split == pair.train_split
            name = data.split_label(pair, split)
            pairs = (augment_pairs(_train_pairs(pair, data.train_limit, stage), cfg.augment) if is_train
                     else corpus.iter_split(pair, split))
            clean = corpus.CleanLimits.from_config(data, max_positions) if is_train else None
            s, rep, examples = encode_split(pairs, clean, max_positions - 1, tokenizer, pool, workers,
                                            staging, name)
            stats[name] = s
            if is_train:
                if rep.kept == 0:
                    raise _empty_after_cleaning([pair], rep)
                cleaned = {"split": split, **rep.to_dict()}
            else:
                truncated[split] = s["truncated"]
            round_trip[split] = {"lines": s["sentences"], "changed": s["round_trip_changed"],
                                 "examples": examples}
            dropped = f"; {rep.summary()}" if is_train else ""
            cut = f"; {s['truncated']} truncated to {max_positions - 1} pieces" if s["truncated"] else ""
            log.info(f"  {data.split_label(pair, split, ' ')}: {s['sentences']} sentences, "
                     f"{s['src_tokens']} src / {s['tgt_tokens']} tgt tokens{dropped}{cut}")
            _warn_about(name, s, rep if is_train else None, examples, max_positions)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return {**cleaned, "truncated": truncated, "round_trip": round_trip}


def _pair_entry(cfg: Config, pair: PairConfig, tokenizer: Tokenizer, splits: list[str], skipped: list[str],
                stats: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The manifest's record of one prepared pair: name, languages, tag id (None without tags),
    training sentences and the prepared name of each of its splits."""
    label = cfg.data.split_label
    return {"name": pair.name, "src_lang": pair.src_lang, "tgt_lang": pair.tgt_lang,
            "tag": next(iter(tokenizer.for_target(pair.tgt_lang).src_prefix), None),
            "train_sentences": stats[label(pair, pair.train_split)]["sentences"],
            "valid_split": label(pair, pair.valid_split),
            "test_splits": {s: label(pair, s) for s in splits
                            if s not in (pair.train_split, pair.valid_split)},
            "skipped_test_splits": skipped}


def _write_clean_report(cfg: Config, staging: Path, reports: dict[str, Any], stage: Cleaned) -> None:
    """CLEAN_REPORT: the length limits, each pair's report and the cleaning stage's settings and counts."""
    d = cfg.data
    cleaned = ({"clean": {"settings": dataclasses.asdict(cfg.clean),
                          **{n: s.to_dict() for n, (_, s) in stage.items()}}}
               if stage else {})
    _write_json(staging / CLEAN_REPORT, {"length_unit": "pieces", "max_len": d.max_len,
                                         "max_len_ratio": d.max_len_ratio,
                                         "max_positions": cfg.model.max_positions,
                                         "train_limit": d.train_limit, "pairs": reports, **cleaned})


def prepare(cfg: Config, *, force: bool = False, tokenizer: Tokenizer | None = None) -> Path:
    """Train the tokenizer and encode every pair's train (cleaned), valid and test splits into
    `cfg.run_dir` (what `mt prepare` and `mt train` run).

    With `tokenizer` (fine-tuning, `train.init_from`: the init checkpoint's, which
    `mt.train.init_from.start_run` reads) no sentencepiece model is trained: that one is
    saved into the run byte for byte and encodes every split.

    A no-op ("up to date"; only config.yaml is refreshed if other sections changed) when the
    manifest fingerprint matches the inputs and config, unless `force`. Missing train/valid files
    are an error; a test split without files is skipped with a note. Everything is built in a
    staging folder and moved into place; the manifest is written last.
    """
    run_dir, data_dir = cfg.run_dir, cfg.run_dir / "data"
    if tokenizer is not None and cfg.data.target_tags:
        raise MTError("train.init_from: fine-tuning a multi-pair config (data.pairs) is not supported yet; "
                      "fine-tune one pair at a time, or train the multi-pair model from scratch")
    if cfg.train.init_from and tokenizer is None:
        raise MTError(f"prepare: train.init_from '{cfg.train.init_from}' is set: pass its tokenizer "
                      f"(mt.train.init_from.start_run)")
    splits: dict[str, list[str]] = {}
    skipped: dict[str, list[str]] = {}
    for pair in cfg.data.pairs:
        splits[pair.name], skipped[pair.name] = _splits_to_prepare(pair)
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
    stats: dict[str, dict[str, int]] = {}
    try:
        stage = clean_for_prepare(cfg, lambda p: _train_pairs(p, cfg.data.train_limit),
                                  run_dir / ".clean.tmp", staging)
        if tokenizer is None:
            tokenizer = _train_tokenizer(cfg, staging, stage)
        else:
            tokenizer.save(staging)
            log.info(f"prepare: reusing the tokenizer of {cfg.train.init_from} "
                     f"({'joint' if tokenizer.joint else 'separate'}, "
                     f"vocab {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size}); "
                     f"no sentencepiece training")
        t0 = time.perf_counter()
        reports = {p.name: _encode_pair(cfg, p, splits[p.name], tokenizer, staging, stats, stage)
                   for p in cfg.data.pairs}
        pairs = [_pair_entry(cfg, p, tokenizer, splits[p.name], skipped[p.name], stats)
                 for p in cfg.data.pairs]
        # The training split: every pair's, one after the other (the sampler's boundaries: train_sentences).
        parts = [cfg.data.split_label(p, p.train_split) for p in cfg.data.pairs]
        synthetic_parts, synthetic_stats, synthetic_record = synthetic.encode_synthetic(
            cfg, tokenizer, staging)
        # synthetic pairs after the real ones
        parts, stats = parts + synthetic_parts, {**stats, **synthetic_stats}
        part_stats = [stats.pop(part) for part in parts]
        stats = {cfg.data.train_split: {k: sum(s[k] for s in part_stats) for k in part_stats[0]}, **stats}
        concatenate_splits(staging, parts, cfg.data.train_split)
        seconds = time.perf_counter() - t0
        total = sum(s["sentences"] for s in stats.values())
        rate = total / seconds if seconds > 0 else float("inf")
        log.info(f"prepare: encoded {total} sentence pairs in {seconds:.1f}s ({rate:,.0f} pairs/s, "
                 f"{cfg.tokenizer.workers} worker(s))")
        _write_clean_report(cfg, staging, reports, stage)
        save_config(cfg, staging / "config.yaml")
        _install(staging, run_dir, data_dir, tokenizer.joint)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(run_dir / ".clean.tmp", ignore_errors=True)
    manifest = {
        "fingerprint": digest, "cache_version": CACHE_VERSION, "joint": tokenizer.joint,
        "src_vocab_size": tokenizer.src_vocab_size, "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "splits": stats, "pairs": pairs,
        "encode_seconds": round(seconds, 3), "pairs_per_second": round(rate, 1),
        "total_seconds": round(time.perf_counter() - start, 3), "inputs": payload["inputs"],
    }
    if synthetic_record is not None:
        manifest["synthetic"] = synthetic_record
    if "reused_tokenizer" in payload:
        manifest["tokenizer_from"] = {"path": cfg.train.init_from, "sha256": payload["reused_tokenizer"]}
    _write_json(data_dir / MANIFEST, manifest)  # last: its presence marks the cache complete
    log.info(f"prepare: wrote {run_dir} in {manifest['total_seconds']:.1f}s")
    return run_dir
