"""`mt translate` and `mt evaluate`: flag checks, stdin/stdout handling and what they print.

mt/cli.py parses the options and calls these; the work itself is library code (mt.translate,
mt.evaluate) that returns data and prints nothing but progress bars.
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from mt.errors import MTError
from mt.evaluate import (
    EvalSet,
    Scores,
    default_out_dir,
    evaluate_set,
    read_file_set,
    read_split_set,
    score_files,
)
from mt.textio import (
    atomic_write,
    decode_line,
    iter_lines,
    iter_stream,
    sha256_file,
)
from mt.translate import decode_settings, load_model, translate_lines, translate_nbest

# --------------------------------------------------------------------------- mt translate

CHUNK_LINES = 10_000  # lines `mt translate` reads, translates and writes at a time (bounded memory)


def _format_nbest(first: int, found: list[list[tuple[str, float]]]) -> list[str]:
    """Moses-style n-best lines 'i ||| text ||| score' (i = 0-based input line)."""
    return [f"{first + i} ||| {text} ||| {s:.4f}" for i, nbest in enumerate(found) for text, s in nbest]


def translate_command(
    checkpoint: Path,
    input: str,
    output: str,
    *,
    beam: int | None,
    alpha: float | None,
    n_best: int | None,
    max_tokens: int | None,
    device: str,
) -> None:
    """`mt translate`: raw text in (a file, or '-' for stdin), one translation per input line out.

    Interactive stdin (a terminal) with stdout output is translated line by line, each result
    flushed at once. Otherwise the input is streamed: CHUNK_LINES lines at a time are read,
    translated in length-sorted batches and written, so memory stays flat for any input size
    (with a progress bar per chunk on stderr for file input when stderr is a terminal). An output
    file is written to a temp file and renamed only after every line is translated, so a failure
    (e.g. invalid UTF-8 on line 1,000,001) never truncates an earlier result; on stdout the
    chunks before the failure have been written. With N-best output (--n-best, or decode.n_best
    > 1 in the checkpoint's config) each input line gives N lines 'i ||| text ||| score'
    (i 0-based; an empty line gives one line with score 0).
    """
    src_path = None if input == "-" else Path(input)
    if src_path is not None and not src_path.is_file():
        raise MTError(f"input '{input}': file not found")
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    model, tokenizer, cfg, dev = load_model(checkpoint, device)
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=n_best, max_tokens=max_tokens)
    with_scores = n_best is not None or decode.n_best > 1

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        if with_scores:
            found = translate_nbest(model, tokenizer, lines, decode, device=dev, progress=progress)
            return _format_nbest(first, found)
        return translate_lines(model, tokenizer, lines, decode, device=dev, progress=progress)

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


# --------------------------------------------------------------------------- mt evaluate


def _print_scores(scores: Scores) -> None:
    print(f"  BLEU {scores.bleu:6.2f}  {scores.bleu_signature}")
    print(f"       {scores.bleu_detail}")
    print(f"  chrF {scores.chrf:6.2f}  {scores.chrf_signature}")
    print(f"  TER  {scores.ter:6.2f}  {scores.ter_signature}")


def _print_samples(test: EvalSet, hyps: list[str], samples: int) -> None:
    picked = sorted(random.Random(0).sample(range(len(hyps)), min(samples, len(hyps))))
    for i in picked:
        print(f"  [{i + 1}] SRC: {test.src[i]}")
        print(f"       REF: {test.ref[i]}")
        print(f"       HYP: {hyps[i]}")


def _print_table(rows: list[tuple[str, Scores]]) -> None:
    width = max(len("split"), *(len(label) for label, _ in rows))
    print(f"{'split':<{width}} | {'BLEU':>6} | {'chrF':>6} | {'TER':>6}")
    print(f"{'-' * width}-+-{'-' * 6}-+-{'-' * 6}-+-{'-' * 6}")
    for label, s in rows:
        print(f"{label:<{width}} | {s.bleu:6.2f} | {s.chrf:6.2f} | {s.ter:6.2f}")


def evaluate_command(
    checkpoint: Path | None,
    *,
    splits: Sequence[str],
    src: Path | None,
    ref: Path | None,
    hyp: Path | None,
    out_dir: Path | None,
    beam: int | None,
    alpha: float | None,
    samples: int,
    device: str,
) -> None:
    """`mt evaluate`: translate splits of the checkpoint's corpus (--split, repeatable) or a
    --src file, score against the references, print scores with signatures (a table when there
    are several sets) and `samples` example translations, and write `<label>.<ckpt>.beam<K>.hyp`
    plus a JSON report beside it in `out_dir`. With --hyp/--ref only scores (no checkpoint)."""
    if samples < 0:
        raise MTError(f"--samples: must be at least 0, got {samples}")
    if hyp is not None:
        if ref is None:
            raise MTError("--hyp needs --ref: the reference translations to score against")
        if checkpoint is not None or splits or src is not None:
            raise MTError("--hyp scores existing translations; do not combine it with --checkpoint, --split or --src")
        result = score_files(hyp, ref, out_dir)
        print(f"{hyp} ({result.sentences} sentences) against {ref}")
        _print_scores(result.scores)
        print(f"  report: {result.report_path}")
        return
    if checkpoint is None:
        raise MTError("give --checkpoint with --split or --src/--ref, or --hyp/--ref to score existing translations")
    if (src is None) != (ref is None):
        raise MTError("--src and --ref go together (or use --split, or --hyp with --ref)")
    if not splits and src is None:
        raise MTError("nothing to evaluate: give --split NAME (repeatable) or --src/--ref")

    # User files are read (and checked) before the slower model load.
    files = [read_file_set(src, ref)] if src is not None and ref is not None else []
    started = time.perf_counter()
    model, tokenizer, cfg, dev = load_model(checkpoint, device)
    load_s = time.perf_counter() - started
    tests = [read_split_set(cfg.data, split) for split in splits] + files
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=1, max_tokens=None)  # scores the 1-best
    out_dir = out_dir if out_dir is not None else default_out_dir(checkpoint)
    sha = sha256_file(checkpoint)
    rows: list[tuple[str, Scores]] = []
    for test in tests:
        result = evaluate_set(model, tokenizer, test, decode, device=dev, checkpoint=checkpoint, checkpoint_sha256=sha,
                              load_s=load_s, out_dir=out_dir, progress=sys.stderr.isatty())
        n, seconds = len(result.hyps), result.translate_s
        print(f"{test.label}: {n} sentences in {seconds:.1f} s ({n / max(seconds, 1e-9):.1f} sent/s), "
              f"beam {decode.beam}, alpha {decode.alpha}")
        _print_scores(result.scores)
        print(f"  hypotheses: {result.hyp_path}  report: {result.report_path}")
        if samples:
            _print_samples(test, result.hyps, samples)
        rows.append((test.label, result.scores))
    if len(rows) > 1:
        print()
        _print_table(rows)
