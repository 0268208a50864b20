"""The one way a command loads a model for inference: `load_engine` takes what `-c` names.

- one `.pt` checkpoint: mt's own Transformer, run natively on the device asked for;
- several `.pt` checkpoints: an `Ensemble` of them (their tokenizers must be the same);
- one directory written by `mt export`: the CTranslate2 model in it, on the CPU, with the
  config (decode defaults included) stored in its mt_export.json.

`mt translate`, `mt evaluate`, `mt score` and `mt serve` all come through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from mt.config import Config
from mt.config_load import config_from_dict
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import Engine, NativeEngine
from mt.deploy.export import WEIGHTS_FILE, is_export_dir
from mt.device import resolve_device
from mt.errors import MTError
from mt.model.checkpoint import load_models


def load_engine(checkpoints: Sequence[Path], device: str) -> tuple[Engine, Tokenizer, Config, torch.device]:
    """(engine, tokenizer, config, device) for `-c PATH...`: checkpoint files run natively on
    `device` (several: an ensemble; config and decode settings are the first's); one directory
    written by `mt export` runs in CTranslate2 on the CPU."""
    exports = [path for path in checkpoints if is_export_dir(path)]
    if not exports:
        dev = resolve_device(device)
        model, tokenizer, cfg = load_models(checkpoints, dev)
        return NativeEngine(model, dev), tokenizer, cfg, dev
    path = exports[0]
    if len(checkpoints) > 1:
        raise MTError(f"-c {path}: an exported CTranslate2 model cannot be part of an ensemble; give it alone")
    if device not in ("auto", "cpu"):
        raise MTError(f"--device {device}: an exported CTranslate2 model ('{path}') runs on the CPU here; "
                      "use --device cpu or the .pt checkpoint")
    from mt.deploy.ct2 import CT2Translator  # ctranslate2 is an optional extra

    translator = CT2Translator(path, max_batch_size=0)  # one CTranslate2 batch per mt batch (decode.max_tokens)
    try:
        cfg = config_from_dict(translator.info["config"])
    except MTError as e:
        raise MTError(f"'{path}': stored config is invalid: {e}") from None
    return translator, Tokenizer.from_files(path, targets=cfg.data.target_langs), cfg, torch.device("cpu")


def weight_files(checkpoints: Sequence[Path]) -> list[Path]:
    """The files whose sha256 identify the models `-c` names: a checkpoint itself, an export's weights."""
    return [Path(path) / WEIGHTS_FILE if is_export_dir(path) else Path(path) for path in checkpoints]
