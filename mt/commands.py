"""`mt translate`, `mt evaluate`, `mt score` and `mt export`: flag checks, stdin/stdout handling
and what they print.

mt/cli.py parses the options and calls these; the work itself is library code (mt.decode.translate,
mt.eval.evaluate, mt.decode.forced, mt.deploy.export) that returns data and prints nothing but
progress bars. Models come from `mt.deploy.engines.load_engine`: one or more checkpoints (several
decode as an ensemble) or an exported directory.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mt.config import Config, DecodeConfig
from mt.data.corpus import split_available
from mt.data.pairs import pair_data, pair_name, tokenizer_for_target
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import NativeEngine
from mt.decode.forced import score_pairs
from mt.decode.translate import translate_lines, translate_nbest
from mt.deploy.engines import load_engine, weight_files
from mt.errors import MTError
from mt.eval.bleu import bleu_tokenizer_for
from mt.eval.evaluate import (
    EvalSet,
    Scores,
    default_out_dir,
    evaluate_set,
    read_file_set,
    read_split_set,
    score_files,
)
from mt.model.checkpoint import init_from_record
from mt.textio import (
    atomic_write,
    check_same_length,
    decode_line,
    iter_lines,
    iter_stream,
    read_lines,
    sha256_file,
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
    tokenizer = tokenizer_for_target(tokenizer, cfg, target_lang)
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


def _suffix_language(path: Path) -> str:
    """'test.ja' -> 'ja', 'newstest.zh.gz' -> 'zh', 'refs.txt' -> 'txt' (which maps to 13a)."""
    suffixes = [x.lstrip(".") for x in path.suffixes if x != ".gz"]
    return suffixes[-1] if suffixes else ""


def _eval_sets(cfg: Config, tokenizer: Tokenizer, splits: Sequence[str], files: list[EvalSet],
               target_lang: str | None, tokenize: str | None) -> list[tuple[EvalSet, Tokenizer, str]]:
    """(test set, the tokenizer that translates it, its BLEU tokenizer) for each --split and file set.

    A multi-pair model: each split of every pair (into `target_lang` when given) that has it,
    labelled `<pair>/<split>`; a split no pair has is an error naming the pairs' splits."""
    def bleu_for(lang: str) -> str:
        return bleu_tokenizer_for(lang, cfg.decode.bleu_tokenize if tokenize is None else tokenize)

    if not cfg.data.pairs:
        tok = tokenizer_for_target(tokenizer, cfg, target_lang)
        bleu = bleu_for(cfg.data.tgt_lang)
        return [(read_split_set(cfg.data, split), tok, bleu) for split in splits] + [(f, tok, bleu) for f in files]
    pairs = [p for p in cfg.data.pairs if target_lang is None or p.tgt_lang == target_lang]
    if not pairs:
        tokenizer_for_target(tokenizer, cfg, target_lang)  # the error naming the known targets
    out = []
    for split in splits:
        found = [p for p in pairs if split_available(pair_data(cfg.data, p), split)]
        if not found:
            known = ", ".join(f"{pair_name(p)}: {', '.join(dict.fromkeys([p.valid_split, *p.test_splits]))}"
                              for p in pairs)
            raise MTError(f"split '{split}': no language pair of the model has it ({known})")
        for p in found:
            test = read_split_set(pair_data(cfg.data, p), split)
            test = dataclasses.replace(test, label=f"{pair_name(p)}/{split}")
            out.append((test, tokenizer.for_target(p.tgt_lang), bleu_for(p.tgt_lang)))
    if files:
        tok = tokenizer_for_target(tokenizer, cfg, target_lang)
        lang = target_lang or cfg.data.pairs[0].tgt_lang
        out += [(f, tok, bleu_for(lang)) for f in files]
    return out


def _init_from(path: Path, cfg: Config) -> dict[str, Any] | None:
    """Where the model at `path` started from: a checkpoint's `init_from` record; for an `mt
    export` directory only the path its config names (exports keep no record)."""
    if path.is_dir():
        return {"path": cfg.train.init_from, "sha256": None, "update": None} if cfg.train.init_from else None
    return init_from_record(path)


def evaluate_command(
    checkpoints: Sequence[Path],
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
    tokenize: str | None = None,
    precision: str | None = None,
    target_lang: str | None = None,
) -> None:
    """`mt evaluate`: translate splits of the checkpoint's corpus (--split, repeatable) or a
    --src file, score against the references, print scores with signatures (a table when there
    are several sets) and `samples` example translations, and write `<label>.<ckpt>.beam<K>.hyp`
    plus a JSON report beside it in `out_dir`. Several checkpoints are evaluated as one ensemble
    (`<ckpt>` joins their names with '+'). With --hyp/--ref only scores (no checkpoint).
    BLEU's tokenizer: `tokenize` (--tokenize) if given, else the checkpoint's `decode.bleu_tokenize`,
    else chosen for its `data.tgt_lang`; with --hyp/--ref the language is the reference file's
    suffix (`test.ja` -> ja). A multi-pair model scores each --split in every pair that has it (only
    the pairs into `target_lang` when given), labelled `en-fr/test_2016_flickr`, each with its tag
    and its target language's BLEU tokenizer; --src/--ref need --target-lang when it has several targets."""
    if samples < 0:
        raise MTError(f"--samples: must be at least 0, got {samples}")
    if hyp is not None:
        if ref is None:
            raise MTError("--hyp needs --ref: the reference translations to score against")
        if checkpoints or splits or src is not None:
            raise MTError("--hyp scores existing translations; do not combine it with --checkpoint, --split or --src")
        result = score_files(hyp, ref, out_dir, bleu_tokenize=bleu_tokenizer_for(_suffix_language(ref), tokenize or ""))
        print(f"{hyp} ({result.sentences} sentences) against {ref}")
        _print_scores(result.scores)
        print(f"  report: {result.report_path}")
        return
    if not checkpoints:
        raise MTError("give --checkpoint with --split or --src/--ref, or --hyp/--ref to score existing translations")
    if (src is None) != (ref is None):
        raise MTError("--src and --ref go together (or use --split, or --hyp with --ref)")
    if not splits and src is None:
        raise MTError("nothing to evaluate: give --split NAME (repeatable) or --src/--ref")

    # User files are read (and checked) before the slower model load.
    files = [read_file_set(src, ref)] if src is not None and ref is not None else []
    started = time.perf_counter()
    model, tokenizer, cfg, dev = load_engine(checkpoints, device)
    load_s = time.perf_counter() - started
    tests = _eval_sets(cfg, tokenizer, splits, files, target_lang, tokenize)
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=1, max_tokens=None,  # scores the 1-best
                             precision=precision)
    out_dir = out_dir if out_dir is not None else default_out_dir(checkpoints[0])
    shas = [sha256_file(path) for path in weight_files(checkpoints)]
    inits = [_init_from(path, cfg) for path in checkpoints]
    for path, init in zip(checkpoints, inits):
        if init is not None:
            sha = f"sha256 {init['sha256'][:12]}, " if init.get("sha256") else ""
            update = f"update {init['update']}" if init.get("update") is not None else "update unknown"
            print(f"{path}: fine-tuned from {init['path']} ({sha}{update})")
    how = f"sampling (seed {decode.seed})" if decode.sampling else f"beam {decode.beam}, alpha {decode.alpha}"
    if len(checkpoints) > 1:
        how += f", ensemble of {len(checkpoints)} checkpoints"
    rows: list[tuple[str, Scores]] = []
    for test, tokenizer, bleu_tokenize in tests:
        result = evaluate_set(model, tokenizer, test, decode, device=dev, checkpoints=checkpoints,
                              checkpoint_sha256s=shas, load_s=load_s, out_dir=out_dir, progress=sys.stderr.isatty(),
                              bleu_tokenize=bleu_tokenize, init_from=inits)
        n, seconds = len(result.hyps), result.translate_s
        print(f"{test.label}: {n} sentences in {seconds:.1f} s ({n / max(seconds, 1e-9):.1f} sent/s), {how}")
        _print_scores(result.scores)
        print(f"  hypotheses: {result.hyp_path}  report: {result.report_path}")
        if samples:
            _print_samples(test, result.hyps, samples)
        rows.append((test.label, result.scores))
    if len(rows) > 1:
        print()
        _print_table(rows)


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
    tokenizer = tokenizer_for_target(tokenizer, cfg, target_lang)
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


# --------------------------------------------------------------------------- mt export


def export_command(checkpoint: Path, *, format: str, output: Path, quantization: str, force: bool) -> None:
    """`mt export`: write `checkpoint` as a CTranslate2 model directory and say where."""
    if format != "ctranslate2":
        raise MTError(f"--format: unknown format {format!r}; expected ctranslate2")
    if not checkpoint.is_file():
        raise MTError(f"checkpoint '{checkpoint}': file not found")
    from mt.deploy.export import export_ctranslate2  # ctranslate2 is an optional extra

    out = export_ctranslate2(checkpoint, output, quantization=quantization, force=force)
    print(f"exported {checkpoint} to {out} (CTranslate2, quantization {quantization})")


# --------------------------------------------------------------------------- mt serve

SERVE_EXTRA_HINT = 'pip install -e ".[serve]"'


def serve_command(
    checkpoints: Sequence[Path],
    *,
    host: str,
    port: int,
    beam: int | None,
    max_batch_tokens: int | None,
    max_wait_ms: float,
    api_keys: Path | None,
    cors_origins: Sequence[str],
    timeout: float,
    char_limit: int,
    max_segments: int,
    max_alternatives: int,
    queue_size: int,
    device: str,
    threads: int = 0,
) -> None:
    """`mt serve`: check the flags and the model paths, then run the HTTP server until SIGTERM."""
    for path in checkpoints:
        if not Path(path).exists():
            raise MTError(f"-c {path}: not found")
    try:
        import fastapi  # noqa: F401
        import multipart  # noqa: F401 - python-multipart, for form data
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MTError(f"mt serve: needs the serve extra ({e.name} is not installed); run: {SERVE_EXTRA_HINT}") from None
    from mt.serve.server import run_server
    from mt.serve.settings import ServeSettings, read_api_keys

    keys = read_api_keys(api_keys) if api_keys is not None else frozenset()
    settings = ServeSettings(host=host, port=port, max_beam=beam, max_batch_tokens=max_batch_tokens,
                             max_wait_ms=max_wait_ms, timeout_s=timeout, char_limit=char_limit,
                             max_segments=max_segments, max_alternatives=max_alternatives, queue_size=queue_size,
                             max_body_bytes=max(1 << 20, 8 * char_limit), cors_origins=tuple(cors_origins),
                             api_keys=keys, device=device, threads=threads)
    run_server(settings, checkpoints)
