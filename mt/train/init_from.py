"""Fine-tuning: start a new run from a trained checkpoint's weights and tokenizer (`--init-from`).

`train.init_from` (or `mt train --init-from CKPT`) names an mt checkpoint (.pt). The new run:

- uses the checkpoint's sentencepiece model(s): `mt prepare` encodes the new corpus with them and
  trains none (the cleaning and round-trip reports still run); the cache fingerprint includes the
  tokenizer's sha256, so another init checkpoint re-encodes;
- starts from its weights; the optimizer, LR schedule, update count, best score and patience
  start fresh (a new TrainState), as OpenNMT-py's -reset_optim all / fairseq's --reset-* do;
- takes the checkpoint's `model` and `tokenizer` config sections. The user's config may leave
  them out, or give keys equal to the checkpoint's. SHAPE keys (what the weights' shapes and the
  computation depend on: dimensions, layers, norm placement, activation, tying, positions) must
  equal the checkpoint's; a differing one is an MTError naming every differing key with both
  values. TRAINABLE keys (`model.dropout`, `model.attention_dropout`) are regularisation of
  this run, not of the weights, and may differ (fine-tuning on a small corpus often wants more
  dropout). Every `tokenizer` key but `workers` (processes) and the sampling keys (subword
  regularisation of this run) must match: the tokenizer is the checkpoint's.

Every checkpoint of the run records its origin as `init_from: {path, sha256, update}` (see
`mt.model.checkpoint.inference_state`). `--resume` of a fine-tuning run reads nothing from the
init checkpoint: last.pt holds the same tokenizer and config, and `init_from` record, and the
init file may have moved since. `--init-from` with `--resume` is an error: one starts a new run
from another run's weights, the other continues this run exactly.

`start_run` resolves what a run starts from, reading each checkpoint once (`read_checkpoint`): the
init checkpoint of a new fine-tuning run, or last.pt on --resume (whose `init_from` record says
whether the run was fine-tuned). The `RunStart` it returns goes on to `mt prepare` (the tokenizer
to reuse) and to `mt.train.loop.train` (weights, training state), which then read nothing again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt.config import Config, ModelConfig
from mt.config_checks import short_repr
from mt.config_load import config_from_dict
from mt.data.holdout import resolve_single_files
from mt.data.tokenizer import Tokenizer
from mt.errors import MTError
from mt.model.checkpoint import Checkpoint, read_checkpoint

# model keys that may differ from the init checkpoint's: regularisation of the new run only
TRAINABLE_MODEL_KEYS = ("dropout", "attention_dropout")
SHAPE_MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig)
                         if f.name not in TRAINABLE_MODEL_KEYS)
# tokenizer keys that may differ: they do not change the encoded output
FREE_TOKENIZER_KEYS = ("workers", "sampling_alpha", "sampling_nbest")


@dataclass(frozen=True)
class InitSource:
    """A checkpoint a run starts from (or, on --resume of a fine-tuning run, its last.pt)."""

    record: dict[str, Any]  # {"path": absolute path, "sha256": of the file, "update": its update count}
    checkpoint: Checkpoint  # read once: its config (model and tokenizer sections count), tokenizer, weights

    @property
    def cfg(self) -> Config:
        return self.checkpoint.config

    @property
    def tokenizer(self) -> Tokenizer:
        return self.checkpoint.tokenizer


@dataclass(frozen=True)
class RunStart:
    """What a training run starts from (`start_run`), each checkpoint read once."""

    cfg: Config  # the run's config, fine-tuning's model/tokenizer sections resolved from its source
    last: Checkpoint | None  # --resume: last.pt (None when there is none: train() says so)
    source: InitSource | None  # fine-tuning: the init checkpoint, or on --resume last.pt; None: from scratch
    given_tokenizer: Tokenizer | None = None  # a new model on another's tokenizer (mt distill: the teacher's)

    @property
    def tokenizer(self) -> Tokenizer | None:
        """The tokenizer `prepare` must reuse (None: train one): the init checkpoint's, or on
        --resume of a fine-tuning run last.pt's (the same bytes), translating into this run's
        target language (a model fine-tuned from en->de into en->fr keeps the tokenizer, not the language);
        else `given_tokenizer` (a student trained from scratch on its teacher's tokenizer)."""
        if self.source is None:
            return self.given_tokenizer
        return self.source.tokenizer.with_targets(self.cfg.data.target_langs)


def _where(path: str | Path) -> str:
    return f"train.init_from '{path}'"


def read_init_source(path: str | Path) -> InitSource:
    """Load the checkpoint at `path` as a starting point; every bad input is one MTError line."""
    path = Path(path)
    if path.is_dir():
        # mt.deploy.export's files
        exported = (path / "mt_export.json").is_file() or (path / "model.bin").is_file()
        kind = "an `mt export` directory" if exported else "a folder"
        raise MTError(f"{_where(path)}: is {kind}; fine-tuning starts from an mt checkpoint file (.pt), "
                      f"e.g. runs/<name>/checkpoints/best.pt")
    if not path.is_file():
        raise MTError(f"{_where(path)}: file not found")
    try:
        ckpt = read_checkpoint(path)
        _ = (ckpt.config, ckpt.tokenizer)  # parsed now, so their errors name train.init_from too
    except MTError as e:
        raise MTError(f"{_where(path)}: {e}") from None
    return InitSource({"path": str(path.resolve()), "sha256": ckpt.sha256, "update": ckpt.update}, ckpt)


def _differences(section: str, given: dict[str, Any], ckpt: Any, free: tuple[str, ...]) -> list[str]:
    """'section.key VALUE (config) vs VALUE (checkpoint)' for each key the user gave that must match."""
    out = []
    ckpt_values = dataclasses.asdict(ckpt)
    for key in sorted(given):
        if key in free or key not in ckpt_values:
            continue
        mine, theirs = given[key], ckpt_values[key]
        if isinstance(theirs, tuple):
            theirs = list(theirs)
        if mine != theirs and not (isinstance(theirs, float) and isinstance(mine, (int, float))
                                   and not isinstance(mine, bool) and float(mine) == theirs):
            out.append(f"{section}.{key} {short_repr(mine)} (config) vs {short_repr(theirs)} (checkpoint)")
    return out


def resolve_config(cfg: Config, explicit: dict[str, Any], source_cfg: Config, where: str) -> Config:
    """`cfg` with the model and tokenizer sections of `source_cfg`, keeping only the user's trainable keys.

    `explicit` is the user's raw config (YAML + --set): the keys they actually wrote. A written
    shape or tokenizer key that differs from the checkpoint's is one MTError line naming them all.
    """
    model_given = explicit.get("model") or {}
    tok_given = explicit.get("tokenizer") or {}
    diffs = (_differences("model", model_given, source_cfg.model, TRAINABLE_MODEL_KEYS)
             + _differences("tokenizer", tok_given, source_cfg.tokenizer, FREE_TOKENIZER_KEYS))
    if diffs:
        raise MTError(f"{where}: the config does not match the checkpoint's model: {'; '.join(diffs)} "
                      f"(leave the model/tokenizer sections out to take the checkpoint's)")
    model = dataclasses.replace(source_cfg.model, **{k: getattr(cfg.model, k) for k in TRAINABLE_MODEL_KEYS
                                                     if k in model_given})
    tokenizer = dataclasses.replace(source_cfg.tokenizer,
                                    **{k: getattr(cfg.tokenizer, k) for k in FREE_TOKENIZER_KEYS})
    return dataclasses.replace(cfg, model=model, tokenizer=tokenizer)


def check_matches(cfg: Config, source: InitSource, where: str) -> None:
    """Library callers (no CLI resolution): `cfg`'s model and tokenizer must be the source's."""
    diffs = (_differences("model", dataclasses.asdict(cfg.model), source.cfg.model, TRAINABLE_MODEL_KEYS)
             + _differences("tokenizer", dataclasses.asdict(cfg.tokenizer), source.cfg.tokenizer,
                            FREE_TOKENIZER_KEYS))
    if diffs:
        raise MTError(f"{where}: the config does not match the checkpoint's model: {'; '.join(diffs)}")


def _last_pt(cfg: Config) -> Path:
    return cfg.run_dir / "checkpoints" / "last.pt"


def resumed_source(last: Checkpoint | None) -> InitSource | None:
    """On --resume: last.pt as the source of a fine-tuning run's tokenizer and config (None when
    last.pt is missing or the run did not start from a checkpoint)."""
    if last is None or last.init_from is None:
        return None
    return InitSource(last.init_from, last)


def start_run(raw: dict[str, Any], *, resume: bool = False) -> RunStart:
    """What a training run (or `mt prepare`) of the raw config `raw` (YAML + --set, as
    `load_raw_config` reads it) starts from: its config, when fine-tuning with the model and
    tokenizer sections taken from the init checkpoint (or, on --resume, from last.pt), and those
    checkpoints, each read once. A pair whose corpus is one file is read from the validation and
    test sets held out of it in the run (`mt.data.holdout`)."""
    cfg = resolve_single_files(config_from_dict(raw))
    if resume:
        last = read_checkpoint(_last_pt(cfg)) if _last_pt(cfg).is_file() else None
        source = resumed_source(last)
        if source is None:
            return RunStart(cfg, last, None)  # not a fine-tuning run (or no last.pt: train() says so)
        started = source.record["path"]
        if cfg.train.init_from and Path(cfg.train.init_from).resolve() != Path(started):
            raise MTError(f"train --resume: config train.init_from '{cfg.train.init_from}' but "
                          f"'{_last_pt(cfg)}' started from '{started}'")
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, init_from=str(started)))
        return RunStart(resolve_config(cfg, raw, source.cfg, f"train --resume: '{_last_pt(cfg)}'"), last,
                        source)
    if not cfg.train.init_from:
        return RunStart(cfg, None, None)
    source = read_init_source(cfg.train.init_from)
    return RunStart(resolve_config(cfg, raw, source.cfg, _where(cfg.train.init_from)), None, source)


def run_sources(cfg: Config, *, resume: bool, start: RunStart | None) -> RunStart:
    """`_run_sources`, keeping the `given_tokenizer` of `start`."""
    found = _run_sources(cfg, resume=resume, start=start)
    return dataclasses.replace(found, given_tokenizer=start.given_tokenizer) if start is not None else found


def _run_sources(cfg: Config, *, resume: bool, start: RunStart | None) -> RunStart:
    """What a training run with `cfg` starts from, checked: last.pt on --resume and, when
    fine-tuning, the `source` (None: not a fine-tuning run). What `start` holds (what `start_run`
    read) is not read again; the rest is read here, once.

    A new run: the init checkpoint, whose model/tokenizer config `cfg` must match (`start_run`
    takes them from it). --resume: last.pt, which must itself record an init checkpoint when the
    config names one (its weights are then restored with the rest of the training state)."""
    if resume:
        last = start.last if start is not None and start.last is not None else read_checkpoint(_last_pt(cfg))
        source = resumed_source(last)
        if source is not None and not cfg.train.init_from:
            raise MTError(f"train --resume: '{_last_pt(cfg)}' was fine-tuned from '{source.record['path']}' "
                          f"but the config has no train.init_from (`mt train --resume` fills it in)")
        if source is None and cfg.train.init_from:
            raise MTError(f"train --resume: '{_last_pt(cfg)}' was not started from a checkpoint, "
                          f"but the config sets train.init_from '{cfg.train.init_from}'; "
                          f"drop it to resume, or start a new run")
        return RunStart(cfg, last, source)
    if not cfg.train.init_from:
        return RunStart(cfg, None, None)
    if start is not None and start.source is not None:
        source = start.source
    else:
        source = read_init_source(cfg.train.init_from)
    check_matches(cfg, source, _where(cfg.train.init_from))
    return RunStart(cfg, None, source)


def load_init_weights(model: torch.nn.Module, source: InitSource) -> None:
    """Copy the init checkpoint's weights into the freshly built `model` (before the optimizer's
    first step and before an EMA copies them); shapes were checked by config, this re-checks."""
    try:
        model.load_state_dict(source.checkpoint.weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise MTError(f"{_where(source.record['path'])}: weights do not fit the model ({first})") from None
