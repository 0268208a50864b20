"""Translation and scoring, shared by `mt translate`, `mt evaluate` and validation BLEU.

Translating raw text: encode with the source sentencepiece model, batch sentences of similar
length (`mt.batching.decode_batches`), run greedy search (beam 1) or beam search, put the
results back in input order and detokenise with the target model. An empty input line gives
an empty output line without running the model, so outputs always line up with inputs.

Scoring uses sacreBLEU's metric objects with their defaults, the field's standard: BLEU (mixed
case, 13a tokenisation, exponential smoothing), chrF (character 6-grams, beta 2) and TER, each
reported with its signature. `validation_scores` is what the trainer calls, so validation BLEU
is computed by exactly the code `mt evaluate` runs.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from sacrebleu.metrics import BLEU, CHRF, TER
from tqdm import tqdm

from mt.batching import collate_source, decode_batches
from mt.config import DataConfig, DecodeConfig
from mt.distributed import resolve_device
from mt.errors import MTError
from mt.model import Transformer
from mt.search import Hypothesis, beam_search, greedy_search
from mt.textio import decode_line, iter_stream, read_lines, sha256_file, write_lines_atomic
from mt.tokenizer import Tokenizer

T = TypeVar("T")


# --------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Scores:
    """Corpus-level scores (0-100) with the sacreBLEU signatures that make them reproducible."""

    bleu: float
    chrf: float
    ter: float
    bleu_signature: str
    chrf_signature: str
    ter_signature: str
    bleu_detail: str  # sacreBLEU's summary: n-gram precisions, brevity penalty, lengths

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def score(hyps: Sequence[str], refs: Sequence[str]) -> Scores:
    """BLEU, chrF and TER of detokenised hypotheses against one reference each (same order)."""
    if len(hyps) != len(refs):
        raise MTError(f"scoring: {len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise MTError("scoring: no sentences to score")
    hyps, refs = list(hyps), [list(refs)]
    bleu, chrf, ter = BLEU(), CHRF(), TER()
    b = bleu.corpus_score(hyps, refs)
    return Scores(
        bleu=float(b.score),
        chrf=float(chrf.corpus_score(hyps, refs).score),
        ter=float(ter.corpus_score(hyps, refs).score),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        ter_signature=str(ter.get_signature()),
        bleu_detail=str(b),
    )


# --------------------------------------------------------------------------- translation


def _map_sentences(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool,
    search: Callable[[torch.Tensor, torch.Tensor], list[T]],
    empty: T,
) -> list[T]:
    """Run `search(src (B, S), src_mask (B, S)) -> B results` over length-sorted batches of the
    encoded lines; results come back in input order, `empty` for lines without any token."""
    ids = tokenizer.encode_src(list(lines))
    limit = model.cfg.max_positions - 1  # the source gets an EOS; longer input cannot be encoded
    if any(len(seq) > limit for seq in ids):
        print(f"mt: warning: source lines longer than {limit} pieces are truncated", file=sys.stderr)
        ids = [seq[:limit] for seq in ids]
    todo = np.array([i for i, seq in enumerate(ids) if seq], dtype=np.int64)
    results: list[T] = [empty] * len(ids)
    lengths = np.array([len(ids[i]) for i in todo], dtype=np.int64)
    # decode.max_tokens bounds source tokens times the beam: beam search runs B * beam rows.
    budget = max(1, decode.max_tokens // decode.beam)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), tqdm(total=len(ids), disable=not progress, file=sys.stderr,
                                          unit="sent", desc="translate") as bar:
            bar.update(len(ids) - len(todo))
            for batch in decode_batches(lengths, max_tokens=budget, max_sentences=budget):
                rows = todo[batch]
                src, src_mask = collate_source([ids[i] for i in rows])
                for row, result in zip(rows.tolist(), search(src.to(device), src_mask.to(device))):
                    results[row] = result
                bar.update(len(rows))
    finally:
        model.train(was_training)
    return results


def _beam(model: Transformer, src: torch.Tensor, src_mask: torch.Tensor, decode: DecodeConfig, *,
          n_best: int) -> list[list[Hypothesis]]:
    """Beam search with the decode settings; outputs stay below the model's max_positions."""
    return beam_search(model, src, src_mask, beam=decode.beam, alpha=decode.alpha,
                       length_penalty=decode.length_penalty, max_len_a=decode.max_len_a,
                       max_len_b=decode.max_len_b, n_best=n_best, forbid_unk=decode.forbid_unk,
                       max_len_limit=model.cfg.max_positions - 1)


def translate_lines(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
) -> list[str]:
    """Translate raw lines (greedy when decode.beam == 1, else beam search) -> one detokenised
    line each, in input order. The model is put in eval mode and restored afterwards."""
    def search(src: torch.Tensor, src_mask: torch.Tensor) -> list[list[int]]:
        if decode.beam == 1:
            return greedy_search(model, src, src_mask, max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                                 forbid_unk=decode.forbid_unk, max_len_limit=model.cfg.max_positions - 1)
        return [h[0].tokens for h in _beam(model, src, src_mask, decode, n_best=1)]

    tokens = _map_sentences(model, tokenizer, lines, decode, device=device, progress=progress, search=search, empty=[])
    return tokenizer.decode_tgt(tokens)


def translate_nbest(
    model: Transformer,
    tokenizer: Tokenizer,
    lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
    progress: bool = False,
) -> list[list[tuple[str, float]]]:
    """The `decode.n_best` best translations of each line with their length-normalised scores,
    best first (beam search, also for beam 1). An empty line gives [("", 0.0)]."""
    def search(src: torch.Tensor, src_mask: torch.Tensor) -> list[list[tuple[list[int], float]]]:
        return [[(h.tokens, h.score) for h in nbest] for nbest in _beam(model, src, src_mask, decode, n_best=decode.n_best)]

    found = _map_sentences(model, tokenizer, lines, decode, device=device, progress=progress, search=search,
                           empty=[([], 0.0)])
    texts = iter(tokenizer.decode_tgt([tokens for nbest in found for tokens, _ in nbest]))
    return [[(next(texts), s) for _, s in nbest] for nbest in found]


def validation_scores(
    model: Transformer,
    tokenizer: Tokenizer,
    src_lines: Sequence[str],
    ref_lines: Sequence[str],
    decode: DecodeConfig,
    *,
    device: torch.device | str,
) -> Scores:
    """Translate `src_lines` and score them against `ref_lines`: the trainer's validation BLEU,
    computed exactly as `mt evaluate` does. Pass the unwrapped model (not DDP)."""
    return score(translate_lines(model, tokenizer, src_lines, decode, device=device), list(ref_lines))


# --------------------------------------------------------------------------- files and settings


def decode_settings(base: DecodeConfig, *, beam: int | None, alpha: float | None, n_best: int | None,
                    max_tokens: int | None) -> DecodeConfig:
    """The checkpoint's decode settings with command-line overrides (None = keep), checked.
    An --n-best above the configured beam raises the beam to it unless --beam was given too."""
    for flag, value in (("--beam", beam), ("--n-best", n_best), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise MTError(f"{flag}: must be at least 1, got {value}")
    decode = dataclasses.replace(
        base,
        beam=base.beam if beam is None else beam,
        alpha=base.alpha if alpha is None else alpha,
        n_best=1 if n_best is None else n_best,
        max_tokens=base.max_tokens if max_tokens is None else max_tokens,
    )
    if decode.n_best > decode.beam:
        if beam is not None:
            raise MTError(f"--n-best {decode.n_best} exceeds --beam {decode.beam}")
        decode = dataclasses.replace(decode, beam=decode.n_best)
    return decode


def _load(checkpoint: Path, device: str) -> tuple[Transformer, Tokenizer, Any, torch.device]:
    from mt.checkpoint import load_for_inference

    dev = resolve_device(device, local_rank=0)
    model, tokenizer, cfg = load_for_inference(checkpoint, dev)
    return model, tokenizer, cfg, dev


# --------------------------------------------------------------------------- mt translate


def _format_nbest(first: int, found: list[list[tuple[str, float]]]) -> list[str]:
    """Moses-style n-best lines 'i ||| text ||| score' (i = 0-based input line)."""
    return [f"{first + i} ||| {text} ||| {s:.4f}" for i, nbest in enumerate(found) for text, s in nbest]


def translate_file(
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
    flushed at once; otherwise all input is read and translated in length-sorted batches, with
    a progress bar on stderr for file input when stderr is a terminal. An output file is
    written to a temp file and renamed only after every line is translated, so a failure never
    truncates an earlier result. With --n-best, each input line gives N lines
    'i ||| text ||| score' (i 0-based; an empty line gives one line with score 0).
    """
    src_path = None if input == "-" else Path(input)
    if src_path is not None and not src_path.is_file():
        raise MTError(f"input '{input}': file not found")
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    model, tokenizer, cfg, dev = _load(checkpoint, device)
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=n_best, max_tokens=max_tokens)

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        if n_best is not None:
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
    lines = read_lines(src_path) if src_path is not None else list(iter_stream(sys.stdin.buffer, "<stdin>"))
    outputs = render(0, lines, src_path is not None and sys.stderr.isatty())
    if out_path is None:
        sys.stdout.writelines(text + "\n" for text in outputs)
        sys.stdout.flush()
    else:
        write_lines_atomic(out_path, outputs)


# --------------------------------------------------------------------------- mt evaluate


@dataclass
class _TestSet:
    label: str  # split name, or the source file's name
    source: str  # where the source came from (for the report)
    reference: str
    src: list[str]
    ref: list[str]


def _paired(src: Path, ref: Path, src_lines: list[str], ref_lines: list[str]) -> None:
    if len(src_lines) != len(ref_lines):
        raise MTError(f"line counts differ: {src} has {len(src_lines)} lines, {ref} has {len(ref_lines)}")


def _print_scores(scores: Scores) -> None:
    print(f"  BLEU {scores.bleu:6.2f}  {scores.bleu_signature}")
    print(f"       {scores.bleu_detail}")
    print(f"  chrF {scores.chrf:6.2f}  {scores.chrf_signature}")
    print(f"  TER  {scores.ter:6.2f}  {scores.ter_signature}")


def _print_samples(test: _TestSet, hyps: list[str], samples: int) -> None:
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


def _write_report(path: Path, report: dict[str, Any]) -> None:
    write_lines_atomic(path, [json.dumps(report, indent=2, ensure_ascii=False)])


def _score_only(hyp: Path, ref: Path, out_dir: Path | None) -> None:
    hyps, refs = read_lines(hyp), read_lines(ref)
    if len(hyps) != len(refs):
        raise MTError(f"line counts differ: {hyp} has {len(hyps)} lines, {ref} has {len(refs)}")
    started = time.perf_counter()
    scores = score([h.rstrip() for h in hyps], [r.rstrip() for r in refs])
    print(f"{hyp} ({len(hyps)} sentences) against {ref}")
    _print_scores(scores)
    report_path = (out_dir or Path("eval")) / f"{hyp.name}.json"
    _write_report(report_path, {
        "hypotheses": str(hyp.resolve()), "reference": str(ref.resolve()), "sentences": len(hyps), **scores.to_dict(),
        "timings": {"score_s": round(time.perf_counter() - started, 3)},
    })
    print(f"  report: {report_path}")


def _read_split_set(data: DataConfig, split: str) -> _TestSet:
    """A split of the checkpoint's corpus (data.path relative to the working directory)."""
    from mt.corpus import read_split, split_available

    if not split_available(data, split):
        known = ", ".join(dict.fromkeys([data.train_split, data.valid_split, *data.test_splits]))
        raise MTError(f"split '{split}': not found in {data.path} (the config names: {known})")
    src_lines, ref_lines = read_split(data, split)
    where = f"{data.path} ({split}.{data.src_lang}/{data.tgt_lang})"
    return _TestSet(split, where, where, src_lines, ref_lines)


def _default_out_dir(checkpoint: Path) -> Path:
    """<run_dir>/eval for runs/<name>/checkpoints/<file>.pt, else ./eval."""
    parent = checkpoint.resolve().parent
    return parent.parent / "eval" if parent.name == "checkpoints" else Path("eval")


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
        _score_only(hyp, ref, out_dir)
        return
    if checkpoint is None:
        raise MTError("give --checkpoint with --split or --src/--ref, or --hyp/--ref to score existing translations")
    if (src is None) != (ref is None):
        raise MTError("--src and --ref go together (or use --split, or --hyp with --ref)")
    if not splits and src is None:
        raise MTError("nothing to evaluate: give --split NAME (repeatable) or --src/--ref")

    files: list[_TestSet] = []
    if src is not None and ref is not None:  # read user files before the (slower) model load
        src_lines, ref_lines = read_lines(src), read_lines(ref)
        _paired(src, ref, src_lines, ref_lines)
        files.append(_TestSet(src.name, str(src), str(ref), src_lines, ref_lines))
    started = time.perf_counter()
    model, tokenizer, cfg, dev = _load(checkpoint, device)
    load_s = time.perf_counter() - started
    tests = [_read_split_set(cfg.data, split) for split in splits] + files
    decode = decode_settings(cfg.decode, beam=beam, alpha=alpha, n_best=None, max_tokens=None)
    out_dir = out_dir if out_dir is not None else _default_out_dir(checkpoint)
    sha = sha256_file(checkpoint)
    rows: list[tuple[str, Scores]] = []
    for test in tests:
        if not test.src:
            raise MTError(f"{test.label}: no sentences to translate")
        t0 = time.perf_counter()
        hyps = translate_lines(model, tokenizer, test.src, decode, device=dev, progress=sys.stderr.isatty())
        translate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores = score(hyps, [r.rstrip() for r in test.ref])
        score_s = time.perf_counter() - t0
        stem = f"{test.label}.{checkpoint.stem}.beam{decode.beam}"
        hyp_path, report_path = out_dir / f"{stem}.hyp", out_dir / f"{stem}.json"
        write_lines_atomic(hyp_path, hyps)
        _write_report(report_path, {
            "set": test.label, "source": test.source, "reference": test.reference, "hypotheses": str(hyp_path.resolve()),
            "sentences": len(hyps), **scores.to_dict(),
            "checkpoint": str(checkpoint.resolve()), "checkpoint_sha256": sha, "decode": dataclasses.asdict(decode),
            "device": str(dev), "threads": torch.get_num_threads(),
            "timings": {"load_s": round(load_s, 3), "translate_s": round(translate_s, 3), "score_s": round(score_s, 3)},
            "sentences_per_s": round(len(hyps) / max(translate_s, 1e-9), 2),
        })
        print(f"{test.label}: {len(hyps)} sentences in {translate_s:.1f} s "
              f"({len(hyps) / max(translate_s, 1e-9):.1f} sent/s), beam {decode.beam}, alpha {decode.alpha}")
        _print_scores(scores)
        print(f"  hypotheses: {hyp_path}  report: {report_path}")
        if samples:
            _print_samples(test, hyps, samples)
        rows.append((test.label, scores))
    if len(rows) > 1:
        print()
        _print_table(rows)
