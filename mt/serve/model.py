"""The model a server serves: loaded in its worker process, identified, warmed up, fed by a batcher.

`load_served_model` starts one model's worker (`mt.serve.worker.ModelProcess`), takes the model's
identity from what the worker reports (`ModelIdentity`: files, sha256s, update, card) and starts its
batcher, and decodes one warm-up sentence before the server says it is ready. `ServedModel` is what
the routes use of it: the server's default decode settings, the language pairs it serves, the
tokenizer for a target and its translation cache.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from mt.config import Config, DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.overrides import SERVE_FLAGS, apply_overrides
from mt.decode.terms import UNSPACED, glue_pieces
from mt.deploy.loading import ModelProvenance
from mt.errors import MTError
from mt.serve.batcher import Batcher
from mt.serve.cache import TranslationCache
from mt.serve.languages import ServedLanguages
from mt.serve.metrics import Metrics, OpenRequests
from mt.serve.requests import ApiError
from mt.serve.settings import ServeSettings
from mt.serve.worker import ModelProcess

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelIdentity:
    """Which model a server runs, as its worker reported it (`ModelProvenance`: the files `-c`
    named, their sha256s, the training update, the card's data): the HTTP process reads no checkpoint."""

    provenance: ModelProvenance

    @property
    def id(self) -> str:
        """The weights' sha256 (an ensemble's: the sha256 of its members' sha256s joined by spaces)."""
        return self.provenance.model_id

    @property
    def update(self) -> int:
        return self.provenance.update

    def summary(self) -> dict[str, Any]:
        """{"id", "update"} (and, for an averaged checkpoint, "averaged_updates"): how /ready and
        /v1/translate name the model."""
        averaged = self.provenance.card_source.fields.get("averaged_updates")
        return {"id": self.id, "update": self.update, **({"averaged_updates": averaged} if averaged else {})}


def model_card(identity: ModelIdentity) -> dict[str, Any]:
    """The card `/v1/model-card` returns: `mt export`'s MODEL_CARD.md as data (with file names where
    it holds paths), plus the ensemble's members and the model id. Blocking (reads the run's eval/
    reports; run it off the event loop)."""
    files = identity.provenance.files
    card = identity.provenance.card_source.card()
    # File names, never the server's absolute paths: the card is public to every client.
    card["checkpoint"] = Path(card["checkpoint"]).name
    card["training_data"]["path"] = Path(card["training_data"]["path"]).name
    card["ensemble"] = [Path(path).name for path in files] if len(files) > 1 else []
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
    cache: TranslationCache  # segments already translated (--cache-size; `mt.serve.jobs` reads and fills it)
    open: OpenRequests  # requests this model's batcher should expect (`mt.serve.jobs` holds one per job)

    @property
    def constrains(self) -> bool:
        """The model keeps glossary terms (mt's own; an `mt export` cannot: `mt.serve.glossary`
        refuses them)."""
        return self.engine.constrains

    @cached_property
    def _spaced_glue(self) -> tuple[int, ...]:
        return glue_pieces(self.tokenizer, "")

    def glue_for(self, target: str) -> tuple[int, ...]:
        """`mt.decode.terms.glue_pieces` into `target`, computed once per model (one walk over the
        vocabulary): the pieces barred after a term, the same for every target written with spaces."""
        if target.split("-")[0].lower() in UNSPACED:
            return glue_pieces(self.tokenizer, target)
        return self._spaced_glue

    @cached_property
    def languages(self) -> ServedLanguages:
        """The served languages: how every route reads a request's language codes."""
        return ServedLanguages(self.pairs)

    @cached_property
    def _tagged(self) -> dict[str | None, Tokenizer]:
        return {}

    def tokenizer_for(self, target: str | None, field: str = "target") -> Tokenizer:
        """The tokenizer that makes the model translate into `target` (any case or alias of a served
        code; a multi-pair model's tag in front); a target the model does not know is a 400 naming the
        ones it knows. A tagged one is made once per target and kept: what is computed per tokenizer
        (a typed prefix's vocabulary, `mt.decode.typed`) is then computed once, not per request."""
        if target is not None:
            target = self.languages.find(target, self.languages.targets) or target
        found = self._tagged.get(target)
        if found is not None:
            return found
        try:
            found = self.tokenizer.for_target(target, flag=field)
        except MTError as e:
            raise ApiError(400, str(e)) from None
        if found is not self.tokenizer:  # a served target's tag: as many as the model has targets
            self._tagged[target] = found
        return found

    def problem(self) -> str | None:
        """Why this model cannot translate right now (its batcher's thread or its worker process is
        gone), else None: what /health reports."""
        if self.batcher.crashed is not None:
            return f"the batcher's worker thread failed ({self.batcher.crashed}); it is being restarted"
        if not self.batcher.alive:
            return "the batcher's worker thread has stopped"
        if self.engine.refused is not None:
            return f"the model worker cannot be restarted: {self.engine.refused}"
        code = self.engine.exited()
        if code is not None:
            return f"the model worker process exited (code {code}); a new one is starting"
        return None

    def close(self) -> None:
        """Stop the batcher, then the worker process."""
        self.batcher.stop()
        self.engine.close()


def server_decode(settings: ServeSettings, cfg: Config) -> tuple[DecodeConfig, int]:
    """(the server's default decode settings, the largest beam a request may ask for): the
    checkpoint's with the server's flags (`ServeSettings.decode_overrides`) applied; --beam is both
    the default and the bound of a request's beam (the checkpoint's decode.search.beam without it)."""
    bounded = dataclasses.replace(settings.decode_overrides(), beam=None)  # the bound is not a search's beam
    decode = apply_overrides(cfg.decode, bounded, SERVE_FLAGS)
    max_beam = settings.max_beam or decode.search.beam
    search = dataclasses.replace(decode.search, beam=max_beam, n_best=min(decode.search.n_best, max_beam))
    return dataclasses.replace(decode, search=search), max_beam


def load_served_model(settings: ServeSettings, checkpoints: Sequence[Path], metrics: Metrics) -> ServedModel:
    """Load, identify and warm up the model behind `-c`; start its batcher."""
    started = time.perf_counter()
    engine = ModelProcess(checkpoints, settings.device, threads=settings.threads,
                          on_restart=metrics.worker_restarts.inc)
    loaded = engine.loaded
    identity = ModelIdentity(loaded.provenance)
    decode, max_beam = server_decode(settings, loaded.cfg)
    expected = OpenRequests(metrics)
    batcher = Batcher(engine, loaded.tokenizer, max_wait_ms=settings.max_wait_ms,
                      queue_size=settings.queue_size, on_batch=metrics.on_batch,
                      on_depth=metrics.depth_reporter(), on_failure=metrics.on_failure,
                      open_requests=expected.now,  # this model's requests, not the whole server's
                      admit_within_s=settings.timeout_s,  # admit only what can be answered in time
                      on_thread_restart=metrics.batcher_restarts.inc)
    model = ServedModel(engine, batcher, loaded.cfg, decode, max_beam, identity, loaded.tokenizer,
                        served_pairs(loaded.cfg), loaded.samples,
                        TranslationCache(settings.cache_size, metrics.cache_reporter(identity.id)), expected)
    try:  # allocations, not a client
        warm = model.tokenizer_for(model.pairs[0][1])
        batcher.submit(["Warm-up."], decode, n_best=None, tokenizer=warm).future.result()
    except BaseException:
        model.close()
        raise
    log.info("serve: model %s (update %d, %s, beam %d) ready in %.1f s", identity.id[:12], identity.update,
             ", ".join(f"{s}-{t}" for s, t in model.pairs), max_beam, time.perf_counter() - started)
    return model
