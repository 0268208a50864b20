"""What a training checkpoint holds beyond the weights, and how a run resumes from it (from last.pt
as `mt.model.checkpoint.read_checkpoint` read it, once).

`last.pt` carries, under "training": `state` (a `TrainState` as a dict: update, epoch, position
in the epoch's batch list, training seconds, best metric, patience and NaN counters, validation
history), `optimizer` and `scaler` state dicts, and `rng`: every rank's RNG states (python,
numpy, torch CPU, CUDA) in rank order. Restoring all of it makes `--resume` continue with the
same next batch, learning rate, dropout masks and Adam moments as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mt.config import Config, TrainConfig
from mt.data.tokenizer import Tokenizer
from mt.errors import Interrupted, MTError
from mt.model.checkpoint import Checkpoint, inference_state, same_model
from mt.train.ema import WeightEMA
from mt.train.log import TrainLog


@dataclass
class TrainState:
    """Where training is; saved in last.pt under "training" and restored by --resume."""

    update: int = 0  # updates done
    epoch: int = 1  # current epoch (1-based)
    position: int = 0  # index of the next batch in this epoch's batch list (this rank's list)
    elapsed: float = 0.0  # training seconds over all sessions
    best_metric: float = -math.inf  # val BLEU (or -NLL without BLEU); higher is better
    best_update: int = 0
    bad_validations: int = 0  # validations since the last improvement (patience)
    bad_losses: int = 0  # non-finite losses skipped so far
    last_valid_update: int = -1
    # seconds of the latest validation (x2 with averaging), kept free at the budget's end
    final_reserve: float = 0.0
    world_size: int = 1
    horizon: dict[str, Any] = field(default_factory=dict)  # RunHorizon.saved(): shares resolved into updates
    history: list[dict[str, Any]] = field(default_factory=list)  # validation records


class StopReason(Enum):
    """Why training stopped; the value is the word the log uses."""

    MAX_UPDATES = "max_updates"
    MAX_EPOCHS = "max_epochs"
    TIME_BUDGET = "time_budget"
    SIGNAL = "signal"
    EARLY_STOPPING = "early stopping"


class StopSignal:
    """SIGINT/SIGTERM set a flag; the loop stops after the current update and saves last.pt.
    A second signal raises `Interrupted` (whatever is being written is discarded, nothing torn)."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum:
            raise Interrupted(signum)
        self.signum = signum
        # os.write, not print: the handler may run inside a print to the same stream
        os.write(2, f"mt: {signal.Signals(signum).name} received: finishing this update and saving last.pt "
                    f"(send it again to abort without saving)\n".encode())

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """This process's RNG states in types torch.load(weights_only=True) accepts."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(rng: dict[str, Any]) -> None:
    """Undo `rng_state`: every generator continues exactly where it was saved."""
    random.setstate(rng["python"])
    kind, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available() and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


def training_state(state: TrainState, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                   rngs: list[dict[str, Any]], ema: WeightEMA | None) -> dict[str, Any]:
    """Everything --resume needs beyond the weights: last.pt's "training" entry."""
    return {
        "state": dataclasses.asdict(state), "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else {}, "rng": rngs,
        "ema": ema.state_dict() if ema is not None else {},
    }


def restore(last: Checkpoint, cfg: Config, tokenizer: Tokenizer, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, ema: WeightEMA | None, *,
            rank: int, world_size: int, log: Callable[[str], None]) -> TrainState:
    """Load last.pt (read once, by the caller) into model/optimizer/scaler/EMA/RNG; returns the
    saved TrainState.

    An EMA switched on at resume (none in last.pt) starts from the resumed weights.

    With a different world size the rest of the current epoch (sharded for the old one) cannot
    be continued: training goes on with the next epoch, reseeded.
    """
    path = last.path
    diff = same_model(last.state, inference_state(cfg, tokenizer, model))
    if diff:
        raise MTError(f"train --resume: '{path}' was trained with a different model: {diff}")
    tr = last.training
    if tr is None:
        raise MTError(f"train --resume: '{path}' holds no training state (an inference checkpoint)")
    try:  # a checkpoint of the right kind whose training fields hold the wrong things: a user error
        model.load_state_dict(last.weights)
        optimizer.load_state_dict(tr["optimizer"])
        if scaler is not None and tr.get("scaler"):
            scaler.load_state_dict(tr["scaler"])
        if ema is not None and tr.get("ema"):
            ema.load_state_dict(tr["ema"])
        elif ema is not None:
            ema.reset()
        state = TrainState(**tr["state"])
        if state.world_size != world_size:
            log(f"resume: world size {state.world_size} -> {world_size}; "
                f"continuing with epoch {state.epoch + 1}")
            state = dataclasses.replace(state, epoch=state.epoch + 1, position=0, world_size=world_size)
            seed_everything(cfg.train.seed + state.update + rank)
        else:
            set_rng_state(tr["rng"][rank])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise MTError(f"train --resume: '{path}': training state is not readable "
                      f"({type(e).__name__}: {first})") from None
    log(f"resumed from {path} at update {state.update}, epoch {state.epoch}, batch {state.position}")
    return state


def limit_reached(st: TrainState, t: TrainConfig) -> StopReason | None:
    """The update or epoch limit that training has reached, if any."""
    if t.max_updates and st.update >= t.max_updates:
        return StopReason.MAX_UPDATES
    if t.max_epochs and st.epoch > t.max_epochs:
        return StopReason.MAX_EPOCHS
    return None


def count_bad_updates(st: TrainState, t: TrainConfig, log: TrainLog, last: Path, total: int) -> None:
    """`total` updates so far had a non-finite loss or gradient (a device counter, read at a log line
    or checkpoint); each was skipped by the optimizer. New ones are logged; past train.max_bad_losses
    training stops, writing nothing, so last.pt keeps the last state saved before them."""
    if total <= st.bad_losses:
        return
    new, st.bad_losses = total - st.bad_losses, total
    if total > t.max_bad_losses:
        raise MTError(f"train: {total} non-finite losses (train.max_bad_losses={t.max_bad_losses}); "
                      f"stopped at update {st.update}, the last good state is in {last}; "
                      f"try a lower train.lr or fp32")
    log.info(f"warning: {new} update(s) with a non-finite loss/gradient by update {st.update}, "
             f"skipped ({total}/{t.max_bad_losses})")
