"""Encoding one split into token-id arrays: streamed in chunks, optionally in worker processes.

`encode_split` reads (source, target) pairs, strips them, encodes both sides with the tokenizer,
cleans the training split by lengths in pieces (or truncates the other splits to the model's
length), checks the target round trip, and appends the ids to four files written atomically:
`<split>.{src,tgt}.ids` (int32, all sentences concatenated) and `.offsets` (int64, N+1). Memory is
bounded by a few chunks in flight, not by the corpus. `concatenate_splits` joins the training
splits of several language pairs into one. `mt.data.prepare` orchestrates the stage.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import shutil
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mt.data import corpus
from mt.data.tokenizer import Tokenizer
from mt.textio import atomic_write

CHUNK_LINES = 10_000  # sentence pairs per encoding task
IDS_DTYPE = np.dtype("<i4")
OFFSETS_DTYPE = np.dtype("<i8")
ROUND_TRIP_EXAMPLES = 3  # changed lines quoted per split in clean_report.json


def split_path(data_dir: Path, split: str, side: str, kind: str) -> Path:
    """`<data_dir>/<split>.<side>.<kind>`: side src | tgt, kind ids | offsets."""
    return data_dir / f"{split}.{side}.{kind}"


_worker_tokenizer: Tokenizer | None = None


def worker_pool(tokenizer: Tokenizer, workers: int) -> Any:
    """A pool of `workers` processes holding the tokenizer, or None for one worker (encode in process).

    fork (fast start, no re-import of __main__) unless torch is loaded: a forked copy of a parent
    whose torch thread pools are running can deadlock, so then spawn (which re-imports `__main__`:
    scripts calling `prepare` with workers > 1 need an `if __name__ == "__main__":` guard)."""
    if workers <= 1:
        return None
    spawn = "torch" in sys.modules or "fork" not in mp.get_all_start_methods()
    context = mp.get_context("spawn" if spawn else "fork")
    # The whole tokenizer (pickled as its model bytes and source prefix: a multi-pair target tag).
    return context.Pool(workers, initializer=_init_worker, initargs=(tokenizer,))


def _init_worker(tokenizer: Tokenizer) -> None:
    global _worker_tokenizer
    _worker_tokenizer = tokenizer


@dataclass
class _Encoded:
    """One encoded chunk: flat ids and per-sentence lengths for each side, plus its clean counts,
    how many pairs were truncated, and the target lines the tokenizer changes (count, examples)."""

    src_ids: np.ndarray  # (sum src lengths,) int32
    src_lengths: np.ndarray  # (n,) int64
    tgt_ids: np.ndarray
    tgt_lengths: np.ndarray
    report: corpus.CleanReport
    truncated: int = 0
    changed: int = 0
    changed_examples: list[str] = field(default_factory=list)


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=IDS_DTYPE, count=int(lengths.sum()))
    return flat, lengths


def _encode_chunk(pairs: list[tuple[str, str]], clean: corpus.CleanLimits | None, truncate: int,
                  tokenizer: Tokenizer | None = None) -> _Encoded:
    """Strip a chunk of raw pairs and encode both sides; with `clean` limits (training) drop pairs
    by their lengths in pieces, else cut each side to `truncate` pieces (0 = never)."""
    tok = tokenizer or _worker_tokenizer
    assert tok is not None, "worker tokenizer not initialised"
    src, tgt = [s.strip() for s, _ in pairs], [t.strip() for _, t in pairs]
    # One sentencepiece thread per process: parallelism comes from the worker processes.
    src_seqs, tgt_seqs = tok.encode_src(src, threads=1), tok.encode_tgt(tgt, threads=1)
    report, truncated = corpus.CleanReport(), 0
    if clean is not None:
        keep = [corpus.drop_reason(len(s), len(t), clean) for s, t in zip(src_seqs, tgt_seqs)]
        for reason in keep:
            report.record(reason)
        kept = [i for i, reason in enumerate(keep) if reason is None]
        src_seqs = [src_seqs[i] for i in kept]
        tgt_seqs = [tgt_seqs[i] for i in kept]
        tgt = [tgt[i] for i in kept]
    else:
        report.kept = len(pairs)
    changed = tok.round_trip_failures(tgt, tgt_seqs)
    if clean is None and truncate > 0:
        truncated = sum(len(s) > truncate or len(t) > truncate for s, t in zip(src_seqs, tgt_seqs))
        src_seqs, tgt_seqs = [s[:truncate] for s in src_seqs], [t[:truncate] for t in tgt_seqs]
    src_ids, src_len = _flatten(src_seqs)
    tgt_ids, tgt_len = _flatten(tgt_seqs)
    examples = [tgt[i][:200] for i in changed[:ROUND_TRIP_EXAMPLES]]
    return _Encoded(src_ids, src_len, tgt_ids, tgt_len, report, truncated, len(changed), examples)


def _chunks(pairs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    it = iter(pairs)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _ordered_map(pool: Any, chunks: Iterator[list[tuple[str, str]]], clean: corpus.CleanLimits | None,
                 truncate: int, workers: int) -> Iterator[_Encoded]:
    """Encode chunks in the pool, results in input order, with at most 2*workers chunks in flight.

    (Pool.imap would read the whole input ahead of the workers: unbounded memory on big corpora.)
    """
    pending: deque[Any] = deque()
    for chunk in chunks:
        pending.append(pool.apply_async(_encode_chunk, (chunk, clean, truncate)))
        if len(pending) >= 2 * workers:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


class _SplitWriter:
    """Appends encoded chunks to the four binary files of one split, keyed (side, kind)."""

    def __init__(self, files: dict[tuple[str, str], BinaryIO]) -> None:
        self.files = files
        self.totals = {"src": 0, "tgt": 0}
        self.sentences = 0
        for side in ("src", "tgt"):
            np.zeros(1, dtype=OFFSETS_DTYPE).tofile(self.files[(side, "offsets")])

    def append(self, enc: _Encoded) -> None:
        sides = (("src", enc.src_ids, enc.src_lengths), ("tgt", enc.tgt_ids, enc.tgt_lengths))
        for side, ids, lengths in sides:
            ids.astype(IDS_DTYPE, copy=False).tofile(self.files[(side, "ids")])
            offsets = np.cumsum(lengths) + self.totals[side]
            offsets.astype(OFFSETS_DTYPE).tofile(self.files[(side, "offsets")])
            self.totals[side] += int(lengths.sum())
        self.sentences += len(enc.src_lengths)


def encode_split(pairs: Iterable[tuple[str, str]], clean: corpus.CleanLimits | None, truncate: int,
                  tokenizer: Tokenizer, pool: Any, workers: int, data_dir: Path,
                  split: str) -> tuple[dict[str, int], corpus.CleanReport, list[str]]:
    """Encode one split into its four files in `data_dir` (each written atomically); returns its
    counts (sentences, tokens, truncated and round-trip-changed pairs), the clean report of its
    chunks and a few target lines the tokenizer changes."""
    report = corpus.CleanReport()
    truncated, changed, examples = 0, 0, []
    with ExitStack() as stack:
        files = {(side, kind): stack.enter_context(atomic_write(split_path(data_dir, split, side, kind)))
                 for side in ("src", "tgt") for kind in ("ids", "offsets")}
        writer = _SplitWriter(files)
        chunks = _chunks(pairs, CHUNK_LINES)
        results = (_ordered_map(pool, chunks, clean, truncate, workers) if pool is not None
                   else (_encode_chunk(c, clean, truncate, tokenizer) for c in chunks))
        for enc in results:
            writer.append(enc)
            report.add(enc.report)
            truncated, changed = truncated + enc.truncated, changed + enc.changed
            examples += enc.changed_examples[:ROUND_TRIP_EXAMPLES - len(examples)]
    stats = {"sentences": writer.sentences, "src_tokens": writer.totals["src"],
             "tgt_tokens": writer.totals["tgt"], "truncated": truncated, "round_trip_changed": changed}
    return stats, report, examples


def concatenate_splits(data_dir: Path, parts: list[str], out: str) -> None:
    """Make split `out` of the splits `parts`, one after the other (offsets shifted), streamed: the
    first part becomes `out` and each next one is appended to it, then deleted."""
    for side in ("src", "tgt"):
        ids_out, off_out = split_path(data_dir, out, side, "ids"), split_path(data_dir, out, side, "offsets")
        split_path(data_dir, parts[0], side, "ids").replace(ids_out)
        split_path(data_dir, parts[0], side, "offsets").replace(off_out)
        base = int(np.fromfile(off_out, dtype=OFFSETS_DTYPE)[-1])
        with open(ids_out, "ab") as ids_f, open(off_out, "ab") as off_f:
            for part in parts[1:]:
                with open(split_path(data_dir, part, side, "ids"), "rb") as f:
                    shutil.copyfileobj(f, ids_f)
                offsets = np.fromfile(split_path(data_dir, part, side, "offsets"), dtype=OFFSETS_DTYPE)
                (offsets[1:] + base).tofile(off_f)
                base += int(offsets[-1])
                for kind in ("ids", "offsets"):
                    split_path(data_dir, part, side, kind).unlink()
            assert ids_f.tell() == base * IDS_DTYPE.itemsize
