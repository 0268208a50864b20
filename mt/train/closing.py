"""What rank 0 does with a run's best checkpoint once training has made its last update: the
average of the newest periodic checkpoints against best.pt (`train.average_last`), then the length
penalty (`train.fit_alpha`) and the confidence (`train.fit_confidence`) fitted on the chosen file;
and, for a resumed run whose limits were already reached, the fits a kill cut short.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mt.config import DecodeConfig, TrainConfig
from mt.model.checkpoint import CheckpointFiles, read_checkpoint
from mt.train.averaging import average_or_best
from mt.train.confidence_fit import fit_and_store_confidence
from mt.train.decode_fit import fit_and_store
from mt.train.log import TrainLog
from mt.train.validate import Validator


def close_run(best: Path, *, files: CheckpointFiles, validator: Validator, t: TrainConfig,
              decode: DecodeConfig, device: torch.device, log: TrainLog, best_metric: float,
              where: Callable[[], dict[str, Any]]) -> Path:
    """The checkpoint to evaluate (`best`, or the average when it wins), with the fits the run asks
    for stored in it. `where()`: the update, epoch and wall time the average's record names."""
    known: dict[float, float] = {}
    if t.average_last > 0:
        best, known = average_or_best(best, files, validator, t, decode, device, log, best_metric, where())
    if t.fit_alpha:
        fit_and_store(best, validator, decode, device, log.info, known)
    if t.fit_confidence:
        fit_and_store_confidence(best, validator, device, log.info)
    return best


def finish_fits(best: Path, *, validator: Validator, t: TrainConfig, decode: DecodeConfig,
                device: torch.device, report: Callable[[str], None]) -> None:
    """The fits the run asks for that `best` lacks (a run killed while fitting)."""
    if t.fit_alpha and "decode_fit" not in read_checkpoint(best).state:
        fit_and_store(best, validator, decode, device, report)
    if t.fit_confidence and "confidence_fit" not in read_checkpoint(best).state:
        fit_and_store_confidence(best, validator, device, report)
