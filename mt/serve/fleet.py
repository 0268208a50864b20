"""The models one server serves (`mt serve -c A -c B ...`), and which of them answers a request.

Each `-c` names one model: a `.pt` checkpoint, an ensemble of checkpoints joined by commas
(`-c a.pt,b.pt`), or a directory written by `mt export`. Each model runs in its own worker process
with its own batcher and cache (`mt.serve.model`). A request is routed by its language pair: the
model that serves (source, target); `/languages` lists the union of every model's pairs. Two
models that claim the same pair are refused at start-up, naming both; so is a `--glossary` the
model of its pair cannot keep (`mt.serve.glossary`). `terms` holds each pair's default glossary.

A `Fleet` is immutable once built: a reload (`mt.serve.state`) builds a new one beside it and swaps
it in. The routes take the fleet for the whole request (`mt.serve.deps.ready_fleet` counts its
users), so a request that began on the old models finishes on them; the old fleet is closed once
nobody uses it (`retire`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from mt.decode.terms import TermConstraints
from mt.errors import MTError
from mt.serve.detect import detector_for
from mt.serve.glossary import default_terms
from mt.serve.languages import ServedLanguages
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError
from mt.serve.specs import Spec, spec_name
from mt.text.glossary import Glossary

log = logging.getLogger(__name__)


class StartupRefused(MTError):
    """The models loaded, but the server may not serve them as asked: a start-up error that stops the
    server (a reload that meets it keeps the old models)."""


class PairConflict(StartupRefused):
    """Two models claim one language pair."""


class GlossaryRefused(StartupRefused):
    """A `--glossary` no model can keep: a pair not served, a CTranslate2 model, a term it cannot write."""


class Fleet:
    """The served models (in `-c` order), routed by language pair; the language detector over all
    of their languages; and how many requests use this fleet now (`users`: event-loop thread only)."""

    def __init__(self, models: Sequence[ServedModel], specs: Sequence[Spec],
                 glossaries: Sequence[tuple[str, Glossary]] = ()) -> None:
        """Blocking (loads the language detector, ~0.7 s): a start-up or reload thread builds it.
        `glossaries`: `mt serve --glossary`'s (pair, glossary), checked against the models here."""
        self.models = tuple(models)
        self.specs = tuple(specs)
        self.users = 0
        owner: dict[tuple[str, str], int] = {}
        for i, model in enumerate(self.models):
            for pair in model.pairs:
                if pair in owner:
                    raise PairConflict(f"-c {spec_name(self.specs[owner[pair]])} and "
                                       f"-c {spec_name(self.specs[i])} both translate {pair[0]}-{pair[1]}: "
                                       "serve each language pair from one model "
                                       "(an ensemble is one -c with its checkpoints joined by commas)")
                owner[pair] = i
        self._owner = {pair: self.models[i] for pair, i in owner.items()}
        self.languages = ServedLanguages(list(owner))
        try:  # the default glossary of each pair that has one (`mt.serve.glossary`)
            self.terms: dict[tuple[str, str], TermConstraints] = default_terms(self.models, glossaries)
        except MTError as e:
            raise GlossaryRefused(str(e)) from None
        # /detect and source "auto", over every model's
        self.detector = detector_for(tuple(self.languages.all))

    def for_pair(self, source: str, target: str) -> tuple[ServedModel, str]:
        """(the model that translates `source` into `target`, the served target code); a 400 naming
        the served pairs when no model does (codes read as `ServedLanguages` reads them)."""
        pair = self.languages.pair(source, target)
        return self._owner[pair], pair[1]

    def for_request(self, source: str | None, target: str | None) -> ServedModel:
        """The one model a /v1 request means: the one whose pairs match the `source` and `target`
        given (either may be left out when the other decides; with one model, both may: its
        tokenizer then checks the target); a 400 when none or several do."""
        src = self.languages.match(source, "source", self.languages.sources) if source else None
        if len(self.models) == 1:
            return self.models[0]
        tgt = self.languages.match(target, "target", self.languages.targets) if target else None
        found = list({id(model): model for (s, t), model in self._owner.items()
                      if src in (None, s) and tgt in (None, t)}.values())
        if len(found) == 1:
            return found[0]
        served = ", ".join(f"{s}-{t}" for s, t in self.languages.pairs)
        if not found:
            raise ApiError(400, f"language pair {src}-{tgt}: not served; this server translates {served}")
        raise ApiError(400, f"source and target: this server's models translate {served}; name the pair")

    def sources_into(self, target: str) -> list[str]:
        """The source languages some model translates into `target` (a served target code)."""
        return [s for s, t in self.languages.pairs if t == target]

    def find(self, model_id: str) -> ServedModel:
        """The model whose id (sha256) starts with `model_id`; a 404 naming the served ids otherwise."""
        found = ([model for model in self.models if model.identity.id.startswith(model_id.lower())]
                 if model_id else [])
        if len(found) != 1:
            ids = ", ".join(model.identity.id[:12] for model in self.models)
            raise ApiError(404, f"model {model_id!r}: {'ambiguous' if found else 'not served'}; "
                                f"this server's models are {ids}")
        return found[0]

    def describe(self) -> list[dict[str, object]]:
        """GET /v1/models: each model's id, update (and averaged updates), pairs and files (names only)."""
        return [{**model.identity.summary(), "pairs": [{"source": s, "target": t} for s, t in model.pairs],
                 "files": [Path(path).name for path in model.identity.provenance.files]}
                for model in self.models]

    def summaries(self) -> list[dict[str, object]]:
        return [model.identity.summary() for model in self.models]

    def problem(self) -> str | None:
        """Why some model cannot translate now (a batcher thread or worker process gone), naming it; else
        None."""
        for model, spec in zip(self.models, self.specs):
            problem = model.problem()
            if problem is not None:
                return problem if len(self.models) == 1 else f"-c {spec_name(spec)}: {problem}"
        return None

    def memory_bytes(self) -> float:
        """Resident memory of every model's worker process together."""
        return float(sum(model.engine.memory_bytes() for model in self.models))

    def close(self) -> None:
        for model in self.models:
            model.close()

    def retire(self, grace_s: float) -> None:
        """Close this fleet once no request uses it (or after `grace_s`: every request has timed out
        by then). Blocking: a reload's thread runs it after the swap."""
        deadline = time.monotonic() + grace_s
        while self.users > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.users > 0:
            log.warning("serve: reload: closing the old models with %d requests still on them", self.users)
        self.close()

