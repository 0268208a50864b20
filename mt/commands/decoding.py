"""What `mt translate`, `mt evaluate` and `mt score` share: the checkpoint's decode settings with
the command line's overrides, checked (one-line MTErrors naming the flag); the `-o` path; the
model `-c` names with the tokenizer for `--target-lang`; the `--glossary` checked against it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.terms import TermConstraints, term_constraints
from mt.deploy.loading import LoadedModel, load_model
from mt.errors import MTError
from mt.text.glossary import Glossary, read_glossary
from mt.text.protect import parse_kinds

T = TypeVar("T")


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None, sampling: bool | None = None, temperature: float | None = None,
                    top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                    precision: str | None = None, no_repeat_ngram: int | None = None,
                    repetition_penalty: float | None = None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.

    Searching, an --n-best above the configured beam raises the beam to it unless --beam was
    given too; without --n-best the config's decode.n_best counts (at most --beam when that is
    given). Sampling (--sampling, or decode.sampling in the config), --n-best is the number of
    samples per sentence and --beam does not apply; --temperature, --top-k, --top-p and --seed
    apply only to sampling. --precision bf16 decodes a bf16 copy of the model (see NativeEngine).
    --no-repeat-ngram and --repetition-penalty set the loop guard (mt.decode.repeats) of every search."""
    for flag, value in (("--beam", beam), ("--n-best", n_best), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise MTError(f"{flag}: must be at least 1, got {value}")
    if temperature is not None and not temperature > 0.0:
        raise MTError(f"--temperature: must be positive, got {temperature}")
    if top_k is not None and top_k < 0:
        raise MTError(f"--top-k: must be 0 (no limit) or positive, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise MTError(f"--top-p: must be in (0, 1], got {top_p}")
    if alpha is not None and not (math.isfinite(alpha) and alpha >= 0):
        raise MTError(f"--alpha: must be a finite number >= 0, got {alpha}")
    if no_repeat_ngram is not None and no_repeat_ngram < 0:
        raise MTError(f"--no-repeat-ngram: must be 0 (off) or more, got {no_repeat_ngram}")
    if repetition_penalty is not None and not (math.isfinite(repetition_penalty) and repetition_penalty >= 1.0):
        raise MTError(f"--repetition-penalty: must be a finite number >= 1 (1 = off), got {repetition_penalty}")
    if precision is not None and precision not in ("fp32", "bf16"):
        raise MTError(f"--precision: expected fp32 or bf16, got {precision!r}")

    def keep(value: T | None, default: T) -> T:
        return default if value is None else value

    decode = dataclasses.replace(
        base,
        beam=keep(beam, base.beam),
        alpha=keep(alpha, base.alpha),
        n_best=keep(n_best, base.n_best if beam is None else min(base.n_best, beam)),
        max_tokens=keep(max_tokens, base.max_tokens),
        sampling=keep(sampling, base.sampling),
        temperature=keep(temperature, base.temperature),
        top_k=keep(top_k, base.top_k),
        top_p=keep(top_p, base.top_p),
        seed=keep(seed, base.seed),
        precision=keep(precision, base.precision),
        no_repeat_ngram_size=keep(no_repeat_ngram, base.no_repeat_ngram_size),
        repetition_penalty=keep(repetition_penalty, base.repetition_penalty),
    )
    if decode.sampling:
        if beam is not None:
            raise MTError("--beam: sampling draws translations, it does not search; drop --beam or --sampling")
        return decode
    given = [flag for flag, value in (("--temperature", temperature), ("--top-k", top_k), ("--top-p", top_p),
                                      ("--seed", seed)) if value is not None]
    if given:
        raise MTError(f"{given[0]}: only applies to sampling; add --sampling")
    if decode.n_best > decode.beam:
        if beam is not None:
            raise MTError(f"--n-best {decode.n_best} exceeds --beam {decode.beam}")
        decode = dataclasses.replace(decode, beam=decode.n_best)
    return decode


def robust_settings(decode: DecodeConfig, *, protect: str | None, case: bool | None,
                    ending: bool | None = None, loop_retry: bool | None = None) -> DecodeConfig:
    """`decode` with --protect (all, none or kinds separated by commas: `parse_kinds`),
    --case/--no-case, --ending/--no-ending and --loop-retry/--no-loop-retry applied (None = the checkpoint's)."""
    kinds = decode.protect if protect is None else parse_kinds(protect)
    return dataclasses.replace(decode, protect=kinds, case=decode.case if case is None else case,
                               ending=decode.ending if ending is None else ending,
                               loop_retry=decode.loop_retry if loop_retry is None else loop_retry)


def output_path(output: str) -> Path | None:
    """The file `-o` names (None for '-', stdout); a folder is a one-line error."""
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    return out_path


def load_for_target(checkpoints: Sequence[Path], device: str, target_lang: str | None) -> tuple[LoadedModel, Tokenizer]:
    """The model `-c` names and its tokenizer for `--target-lang` (a tagged model's tag in front)."""
    loaded = load_model(checkpoints, device)
    return loaded, loaded.tokenizer.for_target(target_lang, flag="--target-lang")


def read_glossary_flag(path: Path | None) -> Glossary | None:
    """--glossary read and checked as a file (one-line MTErrors naming file:line), before any model
    loads; None without the flag."""
    return None if path is None else read_glossary(path)


def glossary_for_model(glossary: Glossary | None, loaded: LoadedModel, tokenizer: Tokenizer,
                       pair: tuple[str, str], decode: DecodeConfig) -> TermConstraints | None:
    """The --glossary checked against the model (`term_constraints`) translating `pair` (source,
    target language), its terms found with the source's lemmas and suffixes (`Glossary.for_pair`); None without one."""
    if glossary is None:
        return None
    if decode.sampling:
        raise MTError("--glossary: terms are kept by beam search; --sampling draws translations freely")
    return term_constraints(glossary.for_pair(*pair), tokenizer,
                            loaded.engine, target_lang=pair[1])
