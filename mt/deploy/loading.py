"""The one way a command loads a model: `load_model` takes what `-c` names and returns a `LoadedModel`.

- one `.pt` checkpoint: mt's own Transformer, run natively on the device asked for;
- several `.pt` checkpoints: an `Ensemble` of them (their tokenizers must be the same);
- one directory written by `mt export`: the CTranslate2 model in it, on the CPU, with the
  config (decode defaults included) stored in its mt_export.json.

Each checkpoint is read once (`mt.model.checkpoint.read_checkpoint`: one `torch.load`, and its
bytes hashed) and everything a command needs of it comes back in one value: the engine, the
tokenizer, the config, the device and the model's provenance (files, sha256s, update, where it
was fine-tuned from, what its model card is made of). `mt translate`, `mt evaluate`, `mt score`,
`mt plot` and the `mt serve` worker all come through here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt.config import Config
from mt.config_load import config_from_dict
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import Engine, NativeEngine
from mt.deploy.card import CardSource, checkpoint_card_source, export_card_source
from mt.deploy.export import WEIGHTS_FILE, is_export_dir
from mt.device import resolve_device
from mt.errors import MTError
from mt.model.checkpoint import ensemble_of, read_checkpoint
from mt.textio import sha256_file


@dataclass(frozen=True)
class ModelProvenance:
    """Where a loaded model comes from, as plain data: picklable (the serve worker sends it to the
    HTTP process, which then never reads a checkpoint)."""

    # what `-c` named, in order: .pt files (several: an ensemble) or an export directory
    files: tuple[Path, ...]
    sha256s: tuple[str, ...]  # of each one's weights: a checkpoint's file, an export's model.bin
    update: int  # the training update of the first (an export's, from its mt_export.json)
    # each one's {"path", "sha256", "update"}: where its run started
    init_from: tuple[dict[str, Any] | None, ...]
    card_source: CardSource  # what the first one's model card is made of (`card_source.card()`)

    @property
    def model_id(self) -> str:
        """The weights' sha256 (an ensemble's: the sha256 of its members' sha256s joined by spaces)."""
        if len(self.sha256s) == 1:
            return self.sha256s[0]
        return hashlib.sha256(" ".join(self.sha256s).encode()).hexdigest()


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to translate, and all a command needs to know of it."""

    engine: Engine  # a NativeEngine (mt's Transformer or Ensemble) or a CT2Translator (an export)
    tokenizer: Tokenizer  # the first checkpoint's (an ensemble's members share it)
    config: Config  # the first checkpoint's: decode defaults, corpus, languages
    device: torch.device
    provenance: ModelProvenance


def load_model(paths: Sequence[Path], device: str) -> LoadedModel:
    """The model `-c PATH...` names: checkpoint files run natively on `device` (several: an
    ensemble; config and decode settings are the first's); one directory written by `mt export`
    runs in CTranslate2 on the CPU. Every file is read once."""
    exports = [path for path in paths if is_export_dir(path)]
    if not exports:
        return _load_checkpoints(paths, resolve_device(device))
    path = exports[0]
    if len(paths) > 1:
        raise MTError(f"-c {path}: an exported CTranslate2 model cannot be part of an ensemble; "
                      "give it alone")
    if device not in ("auto", "cpu"):
        raise MTError(f"--device {device}: an exported CTranslate2 model ('{path}') runs on the CPU here; "
                      "use --device cpu or the .pt checkpoint")
    from mt.deploy.ct2 import CT2Translator  # ctranslate2 is an optional extra

    # one CTranslate2 batch per mt batch (decode.resources.max_tokens)
    translator = CT2Translator(path, max_batch_size=0)
    try:
        cfg = config_from_dict(translator.info["config"])
    except MTError as e:
        raise MTError(f"'{path}': stored config is invalid: {e}") from None
    # An export keeps no init_from record: only the path its config names.
    init = {"path": cfg.train.init_from, "sha256": None, "update": None} if cfg.train.init_from else None
    provenance = ModelProvenance((Path(path),), (sha256_file(Path(path) / WEIGHTS_FILE),),
                                 int(translator.info["update"]), (init,),
                                 export_card_source(translator.info, Path(path)))
    return LoadedModel(translator, Tokenizer.from_files(path, targets=cfg.data.target_langs), cfg,
                       torch.device("cpu"), provenance)


def _load_checkpoints(paths: Sequence[Path], device: torch.device) -> LoadedModel:
    """`.pt` checkpoints as one native engine, each read once; only its model is kept of each."""
    if not paths:
        raise MTError("--checkpoint: give at least one checkpoint")
    models, tokenizers, configs, shas, inits = [], [], [], [], []
    first = None
    for path in paths:
        ckpt = read_checkpoint(path)
        cfg = ckpt.config
        tokenizers.append(ckpt.tokenizer)
        configs.append(cfg)
        models.append(ckpt.model(device))
        shas.append(ckpt.sha256)
        inits.append(ckpt.init_from)
        if first is None:
            first = (cfg, ckpt.update, checkpoint_card_source(ckpt.state, Path(path)))
    cfg, update, card = first
    model = ensemble_of(paths, models, tokenizers, configs)
    provenance = ModelProvenance(tuple(Path(p) for p in paths), tuple(shas), update, tuple(inits), card)
    return LoadedModel(NativeEngine(model, device), tokenizers[0], cfg, device, provenance)

