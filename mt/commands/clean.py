"""`mt data clean`: one split of a corpus cleaned by the rules, language identification and,
given a model in each direction, dual conditional cross-entropy (mt.data.clean_corpus's work;
the scorer is mt.eval.dualxent's)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from mt.config import CleanConfig, DataConfig
from mt.config_checks import check_data_format
from mt.config_load import apply_overrides, config_from_dict, load_raw_config
from mt.data.clean_corpus import Scorer, check_keep, clean_corpus
from mt.errors import MTError

if TYPE_CHECKING:
    from mt.deploy.loading import LoadedModel
    from mt.eval.dualxent import Direction


def _clean_settings(config: Path | None, overrides: list[str]) -> CleanConfig:
    """The `clean:` section of `config` (else the defaults) with `--set clean.key=value` overrides."""
    bad = [o for o in overrides if not o.strip().startswith("clean.")]
    if bad:
        raise MTError(f"--set {bad[0]}: mt data clean takes clean.* settings only")
    raw = load_raw_config(config, overrides) if config is not None else apply_overrides({}, overrides)
    return config_from_dict(raw).clean


def _direction(
    checkpoint: Path, flag: str, src_lang: str, tgt_lang: str, device: str
) -> tuple[Direction, LoadedModel]:
    from mt.decode.engine import NativeEngine
    from mt.deploy.loading import load_model
    from mt.eval.dualxent import Direction

    loaded = load_model([checkpoint], device)
    if not isinstance(loaded.engine, NativeEngine):
        raise MTError(f"{flag} {checkpoint}: scoring runs mt's own model; give the .pt checkpoint, "
                      f"not an export")
    pairs = {(p.src_lang, p.tgt_lang) for p in loaded.config.data.pairs}
    if (src_lang, tgt_lang) not in pairs:
        have = ", ".join(f"{s}-{t}" for s, t in sorted(pairs))
        raise MTError(f"{flag} {checkpoint}: translates {have}, not {src_lang}-{tgt_lang}")
    tokenizer = loaded.tokenizer.for_target(tgt_lang, flag=flag)
    return Direction(loaded.engine.model, tokenizer, loaded.engine.max_positions), loaded


def _dual_xent(forward: Path, backward: Path, src_lang: str, tgt_lang: str, device: str,
               max_tokens: int | None) -> Scorer:
    """The two models loaded (torch only now: the rules alone start fast and small)."""
    from mt.decode.overrides import DecodeOverrides, apply_overrides
    from mt.eval.dualxent import DualXent

    fwd, loaded = _direction(forward, "--forward", src_lang, tgt_lang, device)
    bwd, _ = _direction(backward, "--backward", tgt_lang, src_lang, device)
    decode = apply_overrides(loaded.config.decode, DecodeOverrides(max_tokens=max_tokens))
    return DualXent(fwd, bwd, decode, loaded.device)


def clean_command(path: str, output: Path, *, src_lang: str, tgt_lang: str, data_format: str, split: str,
                  config: Path | None, overrides: list[str], dropped_file: bool, max_drop: float | None,
                  forward: Path | None, backward: Path | None, keep: float | None, min_score: float | None,
                  device: str, max_tokens: int | None, workers: int = 1) -> None:
    """`mt data clean PATH -o OUT`: see mt.data.clean_corpus."""
    cfg = _clean_settings(config, overrides)
    if max_drop is not None:
        if not 0 <= max_drop <= 1:
            raise MTError(f"--max-drop: must be in [0, 1], got {max_drop:g}")
        cfg = dataclasses.replace(cfg, max_drop=max_drop)
    try:
        check_data_format(data_format)
    except MTError as e:
        raise MTError(f"--format {data_format}: {str(e).split(': ', 2)[-1]}") from None
    hub = data_format == "hub"  # PATH names the hub dataset then
    data = DataConfig(path="" if hub else path, hub_name=path if hub else "", src_lang=src_lang,
                      tgt_lang=tgt_lang, format=data_format, train_split=split)  # type: ignore[arg-type]
    scorer: Scorer | None = None
    if (forward is None) != (backward is None):
        raise MTError("--forward and --backward: dual cross-entropy needs a model in each direction; "
                      "give both")
    if forward is not None and backward is not None:
        if keep is None and min_score is None:
            raise MTError("--keep or --min-score: say how many model-scored pairs to keep")
        check_keep(keep, cfg.max_drop)  # before the models load
        scorer = _dual_xent(forward, backward, src_lang, tgt_lang, device, max_tokens)
    elif keep is not None or min_score is not None:
        raise MTError("--keep/--min-score: rank by model scores, which need --forward and --backward")
    if workers < 1:
        raise MTError(f"--workers: must be at least 1, got {workers}")
    clean_corpus(data, split, cfg, output, dropped_file=dropped_file, scorer=scorer, keep=keep,
                 min_score=min_score, workers=workers)
