"""`mt translate` and `mt score`, and the decoding flags every command shares: flag checks,
stdin/stdout handling and what they print.

mt/cli.py parses the options and calls these; the work itself is library code (mt.decode.translate,
mt.decode.forced) that returns data and prints nothing but progress bars. Models come from
`mt.deploy.engines.load_engine`: one or more checkpoints (several decode as an ensemble) or an
exported directory.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from mt.config import DecodeConfig
from mt.decode.engine import NativeEngine
from mt.decode.forced import score_pairs
from mt.decode.translate import translate_lines, translate_nbest
from mt.deploy.engines import load_engine
from mt.errors import MTError
from mt.textio import (
    atomic_write,
    check_same_length,
    decode_line,
    iter_lines,
    iter_stream,
    read_lines,
    write_lines_atomic,
)

T = TypeVar("T")

# --------------------------------------------------------------------------- decoding flags


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None, sampling: bool | None = None, temperature: float | None = None,
                    top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                    precision: str | None = None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.

    Searching, an --n-best above the configured beam raises the beam to it unless --beam was
    given too; without --n-best the config's decode.n_best counts (at most --beam when that is
    given). Sampling (--sampling, or decode.sampling in the config), --n-best is the number of
    samples per sentence and --beam does not apply; --temperature, --top-k, --top-p and --seed
    apply only to sampling. --precision bf16 decodes a bf16 copy of the model (see NativeEngine)."""
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


# --------------------------------------------------------------------------- mt translate

CHUNK_LINES = 10_000  # lines `mt translate` reads, translates and writes at a time (bounded memory)


def _format_nbest(first: int, found: list[list[tuple[str, float]]]) -> list[str]:
    """Moses-style n-best lines 'i ||| text ||| score' (i = 0-based input line)."""
    return [f"{first + i} ||| {text} ||| {s:.4f}" for i, nbest in enumerate(found) for text, s in nbest]


def translate_command(
    checkpoints: Sequence[Path],
    input: str,
    output: str,
    *,
    beam: int | None,
    alpha: float | None,
    n_best: int | None,
    max_tokens: int | None,
    sampling: bool | None,
    temperature: float | None,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
    device: str,
    precision: str | None = None,
    target_lang: str | None = None,
) -> None:
    """`mt translate`: raw text in (a file, or '-' for stdin), one translation per input line out.

    A multi-pair model translates into `target_lang` (--target-lang; required when it has several
    target languages): its tag goes in front of every source.

    Interactive stdin (a terminal) with stdout output is translated line by line, each result
    flushed at once. Otherwise the input is streamed: CHUNK_LINES lines at a time are read,
    translated in length-sorted batches and written, so memory stays flat for any input size
    (with a progress bar per chunk on stderr for file input when stderr is a terminal). An output
    file is written to a temp file and renamed only after every line is translated, so a failure
    (e.g. invalid UTF-8 on line 1,000,001) never truncates an earlier result; on stdout the
    chunks before the failure have been written. With N-best output (--n-best, or decode.n_best
    > 1 in the checkpoint's config) each input line gives N lines 'i ||| text ||| score'
    (i 0-based; an empty line gives one line with score 0): the N best hypotheses, or N samples
    with --sampling. Sampled line i depends only on the seed, i and its text, so file, pipe and
    interactive input, and any chunking, give the same output.
    """
    src_path = None if input == "-" else Path(input)
    if src_path is not None and src_path.is_dir():  # a pipe, /dev/stdin or <(zcat f.gz) is input too
        raise MTError(f"input '{input}': is a folder")
    if src_path is not None and not src_path.exists():
        raise MTError(f"input '{input}': file not found")
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    model, tokenizer, cfg, dev = load_engine(checkpoints, device)
    tokenizer = tokenizer.for_target(target_lang, flag="--target-lang")
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=n_best, max_tokens=max_tokens,
                             sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                             precision=precision)
    with_scores = n_best is not None or decode.n_best > 1

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        if with_scores:
            found = translate_nbest(model, tokenizer, lines, decode, device=dev, progress=progress, first_id=first)
            return _format_nbest(first, found)
        return translate_lines(model, tokenizer, lines, decode, device=dev, progress=progress, first_id=first)

    if src_path is None and out_path is None and sys.stdin.isatty():
        stream = sys.stdin.buffer
        for number, raw in enumerate(iter(stream.readline, b""), start=1):
            for text in render(number - 1, [decode_line(raw, "<stdin>", number)], False):
                sys.stdout.write(text + "\n")
            sys.stdout.flush()
        return
    lines = iter_lines(src_path) if src_path is not None else iter_stream(sys.stdin.buffer, "<stdin>")
    progress = src_path is not None and sys.stderr.isatty()
    if out_path is None:
        for first, chunk in _chunks(lines, CHUNK_LINES):
            sys.stdout.writelines(text + "\n" for text in render(first, chunk, progress))
            sys.stdout.flush()
        return
    with atomic_write(out_path) as f:
        for first, chunk in _chunks(lines, CHUNK_LINES):
            f.write("".join(text + "\n" for text in render(first, chunk, progress)).encode("utf-8"))


def _chunks(lines: Iterator[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """(index of the first line, up to `size` lines) until `lines` runs out."""
    first = 0
    while chunk := list(itertools.islice(lines, size)):
        yield first, chunk
        first += len(chunk)


# --------------------------------------------------------------------------- mt score


def score_command(
    checkpoints: Sequence[Path],
    src: Path,
    tgt: Path,
    output: str,
    *,
    normalize: bool,
    max_tokens: int | None,
    device: str,
    target_lang: str | None = None,
) -> None:
    """`mt score`: one line per (source, target) pair, 'log_prob<TAB>per_token', the target's
    log-probability under forced decoding (EOS included) and its average over the |y| + 1
    scored tokens; --normalize adds a third column, log_prob / the config's length penalty
    (beam search's score for that output). Several checkpoints score as their ensemble.
    A multi-pair model scores the targets as `target_lang` (its tag before each source)."""
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)  # read and checked before the model load
    check_same_length(src, tgt, len(src_lines), len(tgt_lines))
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    engine, tokenizer, cfg, dev = load_engine(checkpoints, device)
    tokenizer = tokenizer.for_target(target_lang, flag="--target-lang")
    if not isinstance(engine, NativeEngine):
        raise MTError(f"-c {checkpoints[0]}: mt score runs mt's own model; give the .pt checkpoint, not an export")
    decode = decode_settings(cfg.decode, beam=None, alpha=None, n_best=None, max_tokens=max_tokens)
    found = score_pairs(engine.model, tokenizer, src_lines, tgt_lines, decode, max_positions=engine.max_positions,
                        device=dev, progress=sys.stderr.isatty())
    lines = [f"{s.log_prob:.4f}\t{s.per_token:.4f}" + (f"\t{s.normalized:.4f}" if normalize else "") for s in found]
    if out_path is None:
        sys.stdout.writelines(line + "\n" for line in lines)
        sys.stdout.flush()
    else:
        write_lines_atomic(out_path, lines)
