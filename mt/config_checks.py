"""What values a config accepts: the range of every numeric key and the checks across keys.

`mt.config_load` builds a `Config` from YAML and overrides, checking types and choices;
`check_values` then checks what types cannot say: every numeric key against its `Range` in
`RANGES` (NaN and infinity are never accepted), divisibility of d_model by heads, n-best against
the beam, the time budget's format and the run name (it becomes a folder name).
"""

from __future__ import annotations

import functools
import math
import re
import typing
from dataclasses import dataclass
from typing import Any

from mt.config import Config, DataFormat
from mt.errors import MTError


@dataclass(frozen=True)
class Range:
    """The values a numeric config key accepts: lo <= v <= hi (strict where `*_open`); None = unbounded.
    Floats must also be finite (no NaN, no infinity)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v: float) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False
        low = self.lo is None or (v > self.lo if self.lo_open else v >= self.lo)
        return low and (self.hi is None or (v < self.hi if self.hi_open else v <= self.hi))

    def __str__(self) -> str:
        if self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is None:
            return "finite"
        if self.lo_open:
            return f"positive (> {self.lo:g})"
        return "positive (>= 1)" if self.lo == 1 else f"at least {self.lo:g}"


POSITIVE, AT_LEAST_1, AT_LEAST_0 = Range(0, lo_open=True), Range(1), Range(0)
FRACTION = Range(0, 1, hi_open=True)
# Every numeric key and its range (tests/test_robust.py checks that none is missing); tuples: each item.
RANGES: dict[str, Range] = {
    "data.train_limit": AT_LEAST_0, "data.pair_temperature": POSITIVE, "data.max_len": AT_LEAST_0,
    "data.max_len_ratio": AT_LEAST_0, "data.synthetic_ratio": AT_LEAST_0,
    # sentencepiece's own bounds
    "tokenizer.vocab_size": Range(5), "tokenizer.character_coverage": Range(0.98, 1),
    "tokenizer.src_vocab_size": AT_LEAST_0, "tokenizer.src_character_coverage": Range(0, 1),
    "tokenizer.sample_size": AT_LEAST_1, "tokenizer.workers": AT_LEAST_1,
    "tokenizer.sampling_alpha": AT_LEAST_0, "tokenizer.sampling_nbest": Range(-1),
    "model.d_model": Range(2), "model.heads": AT_LEAST_1, "model.encoder_layers": AT_LEAST_1,
    "model.decoder_layers": AT_LEAST_1, "model.d_ff": AT_LEAST_1, "model.dropout": FRACTION,
    "model.attention_dropout": FRACTION, "model.max_positions": Range(2),
    "train.seed": AT_LEAST_0, "train.max_tokens": AT_LEAST_1, "train.max_sentences": AT_LEAST_1,
    "train.pad_multiple": AT_LEAST_0, "train.max_shapes": AT_LEAST_0, "train.data_workers": Range(-1),
    # train.warmup: or a share (SHARE_KEYS)
    "train.accumulate": AT_LEAST_1, "train.lr": POSITIVE, "train.warmup": AT_LEAST_0,
    "train.cooldown": Range(0, 1), "train.betas": FRACTION,
    "train.eps": POSITIVE, "train.weight_decay": AT_LEAST_0, "train.clip_norm": AT_LEAST_0,
    "train.label_smoothing": FRACTION, "train.max_epochs": AT_LEAST_0, "train.max_updates": AT_LEAST_0,
    "train.valid_every": AT_LEAST_0, "train.valid_beam": AT_LEAST_1, "train.valid_max_sentences": AT_LEAST_0,
    "train.valid_max_share": FRACTION,
    "train.patience": AT_LEAST_0, "train.keep_checkpoints": AT_LEAST_0, "train.save_every": AT_LEAST_0,
    "train.log_every": AT_LEAST_1, "train.threads": AT_LEAST_0, "train.max_bad_losses": AT_LEAST_0,
    "train.average_last": AT_LEAST_0, "train.ema_decay": FRACTION,
    "decode.search.beam": AT_LEAST_1, "decode.search.alpha": AT_LEAST_0, "decode.search.n_best": AT_LEAST_1,
    "decode.search.max_len_a": AT_LEAST_0, "decode.search.max_len_b": AT_LEAST_0,
    "decode.search.temperature": POSITIVE, "decode.search.top_k": AT_LEAST_0,
    "decode.search.top_p": Range(0, 1, lo_open=True), "decode.search.seed": AT_LEAST_0,
    "decode.search.no_repeat_ngram_size": AT_LEAST_0, "decode.search.repetition_penalty": AT_LEAST_1,
    "decode.calibration.weights": Range(), "decode.calibration.min_pieces": AT_LEAST_0,
    "decode.calibration.min_distinct": Range(0, 1), "decode.resources.max_tokens": AT_LEAST_1,
    "clean.max_words": AT_LEAST_0, "clean.max_char_ratio": AT_LEAST_0, "clean.ratio_min_chars": AT_LEAST_0,
    "clean.max_overlap": Range(0, 1), "clean.min_script_share": Range(0, 1),
    "clean.langid_threshold": Range(0, 1),
    "clean.max_drop": Range(0, 1), "clean.samples": AT_LEAST_0, "clean.seed": AT_LEAST_0,
    "augment.upper": Range(0, 1), "augment.title": Range(0, 1), "augment.placeholder": Range(0, 1),
    "augment.noise": Range(0, 1), "augment.seed": AT_LEAST_0,
}
# Run names become folder names: no '/', no '..', nothing a shell or another OS trips over.
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# Language codes of data.pairs name target tags (<2de>) and prepared split files (en-de.val).
LANG = re.compile(r"[A-Za-z0-9_]+(-[A-Za-z0-9_]+)*")



_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$")


def parse_duration(text: str) -> float:
    """'20m' -> 1200.0 seconds; also '1h30m', '90s', '2.5m' and a bare number of seconds. '' -> 0."""
    text = text.strip()
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not (math.isfinite(seconds) and seconds >= 0):
            raise MTError(f"config key 'train.time_budget': must be a duration >= 0 like '20m', "
                          f"got {short_repr(text)}")
        return seconds
    m = _DURATION.match(text)
    if not m or not any(m.groups()):
        raise MTError(f"config key 'train.time_budget': expected a duration like '20m' or '1h30m', "
                      f"got {short_repr(text)}")
    h, mnt, s = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mnt * 60 + s


# Keys given in updates or as a share of the run's updates ("5%"), resolved by mt/train/horizon.py.
SHARE_KEYS = ("warmup", "valid_every", "save_every")
_SHARE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*$")


def parse_share(key: str, value: int | str) -> float | None:
    """'5%' -> 0.05; an int (a number of updates) -> None. MTError naming `key` for other text or a
    share outside [0%, 100%]."""
    if not isinstance(value, str):
        return None
    m = _SHARE.match(value)
    if not m:
        raise MTError(f"config key '{key}': expected a number of updates or a share of the run like '5%', "
                      f"got {short_repr(value)}")
    share = float(m.group(1)) / 100
    if share > 1:
        raise MTError(f"config key '{key}': a share of the run must be at most 100%, got {short_repr(value)}")
    return share


def check_range(key: str, value: Any, allowed: Range) -> None:
    """MTError naming `key`, the allowed range and `value` unless every item of it is in `allowed`."""
    for v in value if isinstance(value, tuple) else (value,):
        if v not in allowed:
            finite = " and finite" if isinstance(v, float) else ""
            raise MTError(f"config key '{key}': must be {allowed}{finite}, "
                          f"got {short_repr(value)}")


def short_repr(value: Any) -> str:
    """repr(value), cut to one readable line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def check_values(cfg: Config) -> None:
    """MTError for the first value of `cfg` out of its range or inconsistent with another."""
    for key, allowed in RANGES.items():  # ranges first: the checks below divide by some of these
        *sections, name = key.split(".")
        value = getattr(functools.reduce(getattr, sections, cfg), name)
        if sections == ["train"] and name in SHARE_KEYS and isinstance(value, str):
            parse_share(key, value)
        else:
            check_range(key, value, allowed)
    m, d = cfg.model, cfg.decode.search
    if m.d_model % m.heads != 0:
        raise MTError(f"config key 'model.heads': d_model={m.d_model} is not divisible by heads={m.heads}")
    if m.d_model % 2 != 0:
        raise MTError(f"config key 'model.d_model': must be even for sinusoidal positions, got {m.d_model}")
    if d.n_best > d.beam and not d.sampling:  # sampling draws n_best samples, whatever the beam
        raise MTError(f"config key 'decode.search.n_best': {d.n_best} exceeds decode.search.beam={d.beam}")
    tok = cfg.tokenizer
    if tok.type == "bpe" and tok.sampling_alpha >= 1:
        raise MTError(f"config key 'tokenizer.sampling_alpha': with a bpe tokenizer it is the "
                      f"BPE-dropout rate, which must be in [0, 1), got {tok.sampling_alpha:g}")
    if 0 < tok.src_character_coverage < 0.98:
        raise MTError(f"config key 'tokenizer.src_character_coverage': must be 0 (as character_coverage) "
                      f"or in [0.98, 1] (sentencepiece's bounds), got {tok.src_character_coverage:g}")
    if 0 < tok.src_vocab_size < 5:
        raise MTError(f"config key 'tokenizer.src_vocab_size': must be 0 (as vocab_size) or at least 5, "
                      f"got {tok.src_vocab_size}")
    for key in ("src_vocab_size", "src_character_coverage"):
        if tok.joint and getattr(tok, key):
            raise MTError(f"config key 'tokenizer.{key}': sizes the source model of separate vocabularies; "
                          f"with tokenizer.joint true there is one model (set joint: false, or remove it)")
    if tok.sampling_nbest in (0, 1):
        raise MTError(f"config key 'tokenizer.sampling_nbest': {tok.sampling_nbest} leaves nothing to "
                      f"sample; use -1 (all segmentations) or at least 2")
    t = cfg.train
    if not (parse_duration(t.time_budget) or t.max_updates or t.max_epochs):
        for name in SHARE_KEYS:
            if isinstance(getattr(t, name), str):
                raise MTError(f"config key 'train.{name}': {getattr(t, name)!r} is a share of the run, "
                              f"which needs a limit to measure it by: train.time_budget, max_updates or "
                              f"max_epochs")
    check_pairs(cfg)
    if not NAME.fullmatch(cfg.name):
        raise MTError(f"config key 'name': {short_repr(cfg.name)} names the run folder: use only letters, "
                      f"digits, '.', '_' and '-', not starting with '.'")


def check_data_format(data_format: str) -> None:
    """MTError unless `data_format` is one of `DataFormat`: for a DataConfig built in code, which
    bypasses the loader's checks."""
    formats = typing.get_args(DataFormat)
    if data_format not in formats:
        raise MTError(f"data.format '{data_format}': unknown format; "
                      f"expected {', '.join(formats[:-1])} or {formats[-1]}")


def check_pairs(cfg: Config) -> None:
    """MTError naming `data.pairs[i].key` for a listed pair without a path or languages, a language
    code that cannot name a tag or a file, a repeated pair, or a hub pair without its dataset. (An
    untagged model's one pair is the data section's own keys, which the loader checks as such.)"""
    seen: dict[tuple[str, str], int] = {}
    for i, pair in enumerate(cfg.data.pairs if cfg.data.target_tags else ()):
        where = f"data.pairs[{i}]"
        for key in ("path", "src_lang", "tgt_lang"):
            if not getattr(pair, key).strip():
                raise MTError(f"config key '{where}.{key}': required "
                              f"(each pair needs path, src_lang and tgt_lang)")
        for key in ("src_lang", "tgt_lang"):
            if not LANG.fullmatch(getattr(pair, key)):
                raise MTError(f"config key '{where}.{key}': {short_repr(getattr(pair, key))} is not a "
                              f"language code (letters, digits, '_', inner '-')")
        if pair.src_lang == pair.tgt_lang:
            raise MTError(f"config key '{where}.tgt_lang': same as src_lang ({pair.src_lang!r})")
        if pair.format == "hub" and not pair.hub_name:
            raise MTError(f"config key '{where}.hub_name': required with format hub")
        for key in ("train_split", "valid_split"):
            if not getattr(pair, key).strip():
                raise MTError(f"config key '{where}.{key}': must not be empty")
        key = (pair.src_lang, pair.tgt_lang)
        if key in seen:
            raise MTError(f"config key '{where}': pair {pair.src_lang}-{pair.tgt_lang} "
                          f"repeats data.pairs[{seen[key]}]")
        seen[key] = i
