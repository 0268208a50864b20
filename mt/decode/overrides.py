"""What a command line, a server's flags or a request change in a checkpoint's decode settings.

`DecodeOverrides` declares every decoding knob a user may set once: its flag and help (mt/cli.py
makes the Typer options of `mt translate`, `mt evaluate`, `mt backtranslate` and `mt distill`
from them, and `mt serve` its own flags' help), None meaning "the checkpoint's". `apply_overrides`
is the one place they are checked and applied to a `DecodeConfig`, with one set of messages that
name each value as its user wrote it: `--beam` on a command line (`FLAGS`), `beam` in a /v1
request (`REQUEST_FIELDS`), `--max-batch-tokens` among `mt serve`'s flags (`SERVE_FLAGS`).

The rules between knobs: an n-best above the beam raises the beam to it unless the beam was
given too (then it is an error); without an n-best the checkpoint's counts, capped by a given
beam. Sampling (asked for, or the checkpoint's) draws n-best samples and takes no beam; the
sampling knobs (temperature, top-k, top-p, seed) apply only to sampling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from mt.config import DecodeConfig
from mt.errors import MTError
from mt.text.protect import KINDS, ProtectKind, parse_kinds

SAMPLING_KNOBS = ("temperature", "top_k", "top_p", "seed")  # apply only when sampling


def _knob(section: str, flag: str, help: str, *, setting: str = "", option_type: Any = None) -> Any:
    """A field of `DecodeOverrides`: `section` is the `DecodeConfig` section it overrides a key of
    (search, text or resources), `setting` that key where the names differ; `flag` and `help` make
    its command-line option; `option_type` the option's type where the command line gives another
    than the field holds (parsed by `from_flags`)."""
    metadata: dict[str, Any] = {"section": section, "flag": flag, "help": help, "setting": setting}
    if option_type is not None:
        metadata["option_type"] = option_type
    return field(default=None, metadata=metadata)


@dataclass(frozen=True)
class DecodeOverrides:
    """Decode settings a user sets over the checkpoint's (`DecodeConfig`); None = keep its own.

    The search: beam .. precision; the loop guard: no_repeat_ngram, repetition_penalty; the text
    policy of `mt.decode.pipeline` (segmented text and documents only): protect, case, ending,
    loop_retry."""

    beam: int | None = _knob(
        "search", "--beam", "Beam size (1 = greedy); default from the checkpoint config.")
    alpha: float | None = _knob("search", "--alpha", "Length-penalty alpha.")
    n_best: int | None = _knob(
        "search", "--n-best",
        "Write N hypotheses per sentence (N samples with --sampling): 'i ||| text ||| score'.")
    max_tokens: int | None = _knob("resources", "--max-tokens", "Source tokens per decoding batch.")
    sampling: bool | None = _knob(
        "search", "--sampling/--no-sampling",
        "Draw each translation at random from the model instead of searching (e.g. for "
        "back-translation); default from the config (decode.search.sampling).")
    temperature: float | None = _knob(
        "search", "--temperature",
        "Sampling: divide the log-probabilities by T (< 1 sharper, > 1 flatter; default 1).")
    top_k: int | None = _knob(
        "search", "--top-k", "Sampling: draw from the K most probable tokens (0 = all).")
    top_p: float | None = _knob(
        "search", "--top-p",
        "Sampling: nucleus, the fewest most probable tokens holding probability P (1 = all).")
    seed: int | None = _knob(
        "search", "--seed",
        "Sampling: the same seed and input give the same output, whatever the batching; default 0.")
    precision: str | None = _knob(
        "resources", "--precision",
        "fp32 (default) | bf16: decode a bf16 copy of a .pt model; only with native bf16 "
        "(AVX512-BF16/AMX CPUs, bf16 GPUs), opt-in: check BLEU against fp32.")
    no_repeat_ngram: int | None = _knob(
        "search", "--no-repeat-ngram", "Loop guard: no n-gram of N target pieces twice (0 = off).",
        setting="no_repeat_ngram_size")
    repetition_penalty: float | None = _knob(
        "search", "--repetition-penalty", "Loop guard: emitted pieces' log-probs times P (1 = off).")
    protect: tuple[ProtectKind, ...] | None = _knob(
        "text", "--protect",
        f"Spans kept verbatim: all, none, or some of {','.join(KINDS)} (default: decode.text.protect, all).",
        option_type=Optional[str])  # noqa: UP045 (typer>=0.9 cannot read `str | None`)
    case: bool | None = _knob(
        "text", "--case/--no-case",
        "ALL CAPS / Title Case read in sentence case and given back (default: on).")
    ending: bool | None = _knob(
        "text", "--ending/--no-ending",
        "A sentence ending without punctuation gets no full stop (default: on).")
    loop_retry: bool | None = _knob(
        "text", "--loop-retry/--no-loop-retry",
        "Search a looping output again, no piece twice (default: on).")

    @classmethod
    def from_flags(cls, protect: str | None = None, **flags: Any) -> DecodeOverrides:
        """The overrides a command's options give (mt/cli.py `options_of`): --protect's text parsed
        (`parse_kinds`), the others as they are."""
        return cls(**flags, protect=None if protect is None else parse_kinds(protect))


def _names(naming: str) -> dict[str, str]:
    """Each knob's name for its user: "flag" (`--top-k`) or "field" (`top_k`)."""
    if naming == "field":
        return {f.name: f.name for f in dataclasses.fields(DecodeOverrides)}
    return {f.name: f.metadata["flag"].split("/")[0] for f in dataclasses.fields(DecodeOverrides)}


FLAGS: Mapping[str, str] = _names("flag")
REQUEST_FIELDS: Mapping[str, str] = _names("field")
SERVE_FLAGS: Mapping[str, str] = {**FLAGS, "max_tokens": "--max-batch-tokens"}


def _sampling_on(names: Mapping[str, str]) -> str:
    """How these users turn sampling on: a flag, or a request's field."""
    return names["sampling"] if names["sampling"].startswith("--") else f'"{names["sampling"]}": true'


def check_overrides(overrides: DecodeOverrides, names: Mapping[str, str] = FLAGS) -> None:
    """A one-line MTError naming the first value out of its range (each on its own; the rules
    between knobs need the checkpoint's settings: `apply_overrides`)."""
    o = overrides
    for knob in ("beam", "n_best", "max_tokens"):
        value = getattr(o, knob)
        if value is not None and value < 1:
            raise MTError(f"{names[knob]}: must be at least 1, got {value}")
    if o.temperature is not None and not o.temperature > 0.0:
        raise MTError(f"{names['temperature']}: must be positive, got {o.temperature}")
    if o.top_k is not None and o.top_k < 0:
        raise MTError(f"{names['top_k']}: must be 0 (no limit) or positive, got {o.top_k}")
    if o.top_p is not None and not 0.0 < o.top_p <= 1.0:
        raise MTError(f"{names['top_p']}: must be in (0, 1], got {o.top_p}")
    if o.seed is not None and o.seed < 0:
        raise MTError(f"{names['seed']}: must be 0 or more, got {o.seed}")
    if o.alpha is not None and not (math.isfinite(o.alpha) and o.alpha >= 0):
        raise MTError(f"{names['alpha']}: must be a finite number >= 0, got {o.alpha}")
    if o.no_repeat_ngram is not None and o.no_repeat_ngram < 0:
        raise MTError(f"{names['no_repeat_ngram']}: must be 0 (off) or more, got {o.no_repeat_ngram}")
    penalty = o.repetition_penalty
    if penalty is not None and not (math.isfinite(penalty) and penalty >= 1.0):
        raise MTError(f"{names['repetition_penalty']}: must be a finite number >= 1 (1 = off), got {penalty}")
    if o.precision is not None and o.precision not in ("fp32", "bf16"):
        raise MTError(f"{names['precision']}: expected fp32 or bf16, got {o.precision!r}")


def apply_overrides(base: DecodeConfig, overrides: DecodeOverrides,
                    names: Mapping[str, str] = FLAGS) -> DecodeConfig:
    """`base` (the checkpoint's decode settings) with `overrides` checked and applied by the rules
    of the module docstring; a one-line MTError naming the value by `names` otherwise."""
    check_overrides(overrides, names)
    o = overrides
    given: dict[str, dict[str, Any]] = {"search": {}}  # section -> its keys given
    for f in dataclasses.fields(o):
        if getattr(o, f.name) is not None:
            given.setdefault(f.metadata["section"], {})[f.metadata["setting"] or f.name] = getattr(o, f.name)
    if o.n_best is None:  # the checkpoint's n-best, at most a given beam
        given["search"]["n_best"] = base.search.n_best if o.beam is None else min(base.search.n_best, o.beam)
    decode = dataclasses.replace(base, **{section: dataclasses.replace(getattr(base, section), **keys)
                                          for section, keys in given.items()})
    search = decode.search
    if search.sampling:
        if o.beam is not None:
            raise MTError(f"{names['beam']}: sampling draws translations, it does not search; "
                          f"drop {names['beam']} or {names['sampling']}")
        return decode
    sampling_only = [names[knob] for knob in SAMPLING_KNOBS if getattr(o, knob) is not None]
    if sampling_only:
        raise MTError(f"{sampling_only[0]}: only applies to sampling; add {_sampling_on(names)}")
    if search.n_best > search.beam:
        if o.beam is not None:
            raise MTError(f"{names['n_best']} {search.n_best} exceeds {names['beam']} {search.beam}")
        decode = dataclasses.replace(decode, search=dataclasses.replace(search, beam=search.n_best))
    return decode
