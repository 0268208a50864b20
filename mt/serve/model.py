"""The model a server serves: loaded in its worker process, identified, warmed up, fed by a batcher.

`load_served_model` starts the worker (`mt.serve.worker.ModelProcess`), builds the model's identity
(`identify`: the weight files, their sha256s, the training update) and its batcher, and decodes one
warm-up sentence before the server says it is ready. `ServedModel` is what the routes use of it: the
server's default decode settings, the language pairs it serves and the tokenizer for a target.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.config import Config, DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.deploy.card import model_card_for
from mt.deploy.engines import weight_files
from mt.errors import MTError
from mt.serve.batcher import Batcher
from mt.serve.metrics import Metrics
from mt.serve.requests import ApiError
from mt.serve.settings import ServeSettings
from mt.serve.worker import LoadedModel, ModelProcess
from mt.textio import sha256_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelIdentity:
    """Which model a server runs: what `-c` named, the weight files hashed and the training update."""

    checkpoints: tuple[Path, ...]  # as `-c` named them: .pt files (several: an ensemble) or an export directory
    sha256s: tuple[str, ...]  # of each checkpoint's weight file (`weight_files`), in order
    update: int  # the training update, as the worker read it

    @property
    def id(self) -> str:
        """The weights' sha256 (an ensemble's: the sha256 of its members' sha256s joined by spaces)."""
        return self.sha256s[0] if len(self.sha256s) == 1 else hashlib.sha256(" ".join(self.sha256s).encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        """{"id", "update"}: how /ready and /v1/translate name the model."""
        return {"id": self.id, "update": self.update}


def weight_sha256s(checkpoints: Sequence[Path]) -> tuple[str, ...]:
    """The sha256 of each checkpoint's weight file (a `.pt` itself, an export's weights)."""
    return tuple(sha256_file(path) for path in weight_files(checkpoints))


def identify(checkpoints: Sequence[Path], sha256s: Sequence[str], loaded: LoadedModel) -> ModelIdentity:
    """The served model's identity, in one place: the files and their hashes (hashed here, in the
    HTTP process, before the worker starts) and the update the worker reported.
    LEAD (PLAN.md item 2): once the worker sends `LoadedModel.provenance` (file names, sha256s,
    update), build this from it alone and drop `weight_sha256s`."""
    return ModelIdentity(tuple(Path(p) for p in checkpoints), tuple(sha256s), loaded.update)


def model_card(identity: ModelIdentity) -> dict[str, Any]:
    """The card `/v1/model-card` returns: `mt export`'s MODEL_CARD.md as data, plus the ensemble's
    members and the model id. Blocking (run it off the event loop).
    LEAD (PLAN.md item 2): this reads the first checkpoint a second time, in the HTTP process
    (`model_card_for` -> `load_checkpoint`); build it from the worker's `LoadedModel.provenance`
    (the card's data) once the worker sends it."""
    card = model_card_for(identity.checkpoints[0])
    card["ensemble"] = [str(path) for path in identity.checkpoints] if len(identity.checkpoints) > 1 else []
    card["model_id"] = identity.id
    return card


def served_pairs(cfg: Config) -> list[tuple[str, str]]:
    """The (source, target) language pairs a model of `cfg` serves, in the config's order."""
    return [(p.src_lang, p.tgt_lang) for p in cfg.data.pairs]


@dataclass(frozen=True)
class ServedModel:
    """The loaded model and what the routes need from it."""

    engine: ModelProcess
    batcher: Batcher
    cfg: Config
    decode: DecodeConfig  # the server's default: checkpoint decode settings, server beam and batch budget
    max_beam: int
    identity: ModelIdentity
    tokenizer: Tokenizer  # the checkpoint's; a multi-pair model's adds a target tag (`tokenizer_for`)
    pairs: list[tuple[str, str]]  # (source, target) languages served: one, or a multi-pair model's pairs
    samples: bool  # /v1's sampling works (mt's own models; an exported CTranslate2 one only searches)

    def tokenizer_for(self, target: str | None, field: str = "target") -> Tokenizer:
        """The tokenizer that makes the model translate into `target` (a multi-pair model's tag in
        front); a target the model does not know is a 400 naming the ones it knows."""
        try:
            return self.tokenizer.for_target(target, flag=field)
        except MTError as e:
            raise ApiError(400, str(e)) from None

    def close(self) -> None:
        """Stop the batcher, then the worker process."""
        self.batcher.stop()
        self.engine.close()


def server_decode(settings: ServeSettings, cfg: Config) -> tuple[DecodeConfig, int]:
    """(the server's default decode settings, the largest beam a request may ask for): the
    checkpoint's, with --beam and --max-batch-tokens."""
    max_beam = settings.max_beam or cfg.decode.beam
    decode = dataclasses.replace(cfg.decode, beam=max_beam, n_best=min(cfg.decode.n_best, max_beam),
                                 max_tokens=settings.max_batch_tokens or cfg.decode.max_tokens)
    return decode, max_beam


def load_served_model(settings: ServeSettings, checkpoints: Sequence[Path], metrics: Metrics) -> ServedModel:
    """Load, identify and warm up the model behind `-c`; start its batcher."""
    started = time.perf_counter()
    sha256s = weight_sha256s(checkpoints)
    engine = ModelProcess(checkpoints, settings.device, threads=settings.threads)
    loaded = engine.loaded
    identity = identify(checkpoints, sha256s, loaded)
    decode, max_beam = server_decode(settings, loaded.cfg)
    batcher = Batcher(engine, loaded.tokenizer, max_wait_ms=settings.max_wait_ms, queue_size=settings.queue_size,
                      on_batch=metrics.on_batch, on_depth=metrics.on_depth,
                      open_requests=lambda: metrics.open_translations)
    model = ServedModel(engine, batcher, loaded.cfg, decode, max_beam, identity, loaded.tokenizer,
                        served_pairs(loaded.cfg), loaded.samples)
    try:  # allocations, not a client
        warm = model.tokenizer_for(model.pairs[0][1])
        batcher.submit(["Warm-up."], decode, n_best=None, tokenizer=warm).future.result()
    except BaseException:
        model.close()
        raise
    seconds = time.perf_counter() - started
    metrics.load_seconds.set(seconds)
    log.info("serve: model %s (update %d, %s-%s, beam %d) ready in %.1f s", identity.id[:12], identity.update,
             loaded.cfg.data.src_lang, loaded.cfg.data.tgt_lang, max_beam, seconds)
    return model
