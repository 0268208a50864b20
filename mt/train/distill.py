"""Sequence-level knowledge distillation (Kim & Rush 2016): a student trained on its teacher's translations.

`distill` does the whole job in one resumable run, in the student config's run directory:

1. the teacher (one model or an ensemble; what `mt.deploy.loading.load_model` returns) translates
   the source side of the student config's training split (any corpus format mt reads;
   `data.train_limit` counts) by beam search, or keeps of its n best the one with the highest
   sentence BLEU against the reference (`select_bleu`); the pairs go to `<run>/distill/` in
   committed chunks (`mt.data.pairwriter`: a killed run continues there), with `manifest.json`;
2. the validation and test splits are copied beside them (`{split}.{lang}`), so `<run>/distill/`
   is a complete text-format corpus and validation scores against the real references;
3. the student trains on it with the teacher's tokenizer (no sentencepiece training; the
   `tokenizer` section becomes the teacher's) from scratch, or continues from its last.pt.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.config import Config, DecodeConfig
from mt.data import corpus
from mt.data.pairwriter import PairWriter
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import Engine
from mt.decode.generate import generate_pairs
from mt.decode.translate import search_lines, translate_lines
from mt.errors import MTError
from mt.eval.bleu import best_by_sentence_bleu, bleu_tokenizer_for
from mt.textio import one_line, write_lines_atomic
from mt.train.init_from import RunStart
from mt.train.loop import train

FOLDER = "distill"


@dataclass(frozen=True)
class Teacher:
    """What distillation needs of the teacher: its engine and tokenizer, config and provenance."""

    engine: Engine
    tokenizer: Tokenizer
    config: Config
    device: Any  # torch.device
    models: list[dict[str, Any]]  # [{"path", "sha256"}] of each checkpoint (several: an ensemble)


def _corpus_identity(cfg: Config) -> dict[str, Any]:
    """What names the student's training corpus for resuming: its files (path, size, mtime) or hub name."""
    pair = cfg.data.pairs[0]
    if pair.format in ("hub", "saved"):
        files: list[Any] = [pair.format, pair.hub_name, pair.hub_config, str(Path(pair.path).resolve())]
    else:
        files = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
                 for p in corpus.split_files(pair, pair.train_split)]
    return {"files": files, "split": pair.train_split, "train_limit": cfg.data.train_limit}


def check_teacher(cfg: Config, teacher: Teacher) -> None:
    """MTError when the student config does not fit the teacher: several pairs, other languages."""
    if len(cfg.data.pairs) > 1:
        raise MTError(f"distill: the student config lists {len(cfg.data.pairs)} language pairs; distillation "
                      f"supports one")
    mine = (cfg.data.pairs[0].src_lang, cfg.data.pairs[0].tgt_lang)
    if not any((p.src_lang, p.tgt_lang) == mine for p in teacher.config.data.pairs):
        theirs = ", ".join(p.name for p in teacher.config.data.pairs)
        raise MTError(f"distill: the teacher translates {theirs}, the student config {mine[0]}-{mine[1]}")


def generate(cfg: Config, teacher: Teacher, decode: DecodeConfig, *, select_bleu: bool, chunk_lines: int,
             report: Callable[[str], None]) -> Path:
    """Step 1 and 2 (module docstring): the distilled corpus in `<run>/distill/`; returns the folder."""
    pair = cfg.data.pairs[0]
    folder = cfg.run_dir / FOLDER
    settings = decode.output_settings()
    identity = {"command": "distill", "teachers": [m["sha256"] for m in teacher.models],
                "corpus": _corpus_identity(cfg), "decode": settings,
                "select": "sentence_bleu" if select_bleu else "best_score"}
    writer = PairWriter(folder, pair.src_lang, pair.tgt_lang, identity)
    tokenizer = teacher.tokenizer.for_target(pair.tgt_lang)
    tokenize = bleu_tokenizer_for(pair.tgt_lang, cfg.decode.bleu_tokenize)
    changed = [0]

    def translate(first: int, lines: list[str], refs: list[str] | None) -> list[str]:
        if not select_bleu:
            return translate_lines(teacher.engine, tokenizer, lines, decode, device=teacher.device,
                                   first_id=first)
        assert refs is not None
        found = search_lines(teacher.engine, tokenizer, lines, decode, n_best=decode.search.n_best,
                             device=teacher.device, first_id=first).nbest()
        best = [best_by_sentence_bleu([t for t, _ in nbest], ref, tokenize)
                for nbest, ref in zip(found, refs)]
        changed[0] += sum(1 for i in best if i > 0)
        return [nbest[i][0] for nbest, i in zip(found, best)]

    if writer.complete:
        report(f"distill: {folder} is complete; not translated again")
    else:
        pairs = corpus.iter_split(pair, pair.train_split)
        limited = itertools.islice(pairs, cfg.data.train_limit) if cfg.data.train_limit > 0 else pairs
        result = generate_pairs(limited, translate, writer, chunk_lines=chunk_lines, output_is_source=False,
                                on_chunk=lambda n: report(f"distill: {n} training sources translated"))
        writer.finish({"command": "distill", "teachers": teacher.models, "decode": settings,
                       "select": identity["select"], "n_best_changed_this_run": changed[0],
                       "resumed_at": result.resumed_at, "src_lang": pair.src_lang, "tgt_lang": pair.tgt_lang,
                       "corpus": identity["corpus"]})
        resumed = f" (resumed at {result.resumed_at})" if result.resumed_at else ""
        report(f"distill: {result.lines} pairs in {folder}" + resumed)
    for split in (pair.valid_split, *pair.test_splits):
        if not corpus.split_available(pair, split):
            continue
        for side, lang in ((0, pair.src_lang), (1, pair.tgt_lang)):
            path = folder / f"{split}.{lang}"
            if not path.is_file():  # written once: a rewrite would change the cache's fingerprint
                write_lines_atomic(path, (one_line(p[side]) for p in corpus.iter_split(pair, split)))
    return folder


def student_config(cfg: Config, teacher: Teacher, folder: Path) -> Config:
    """The student's config trained on `folder`: its data section reads the distilled corpus (text,
    every split present), its tokenizer section is the teacher's (workers kept)."""
    pair = cfg.data.pairs[0]
    tests = tuple(s for s in pair.test_splits if (folder / f"{s}.{pair.src_lang}").is_file())
    data = dataclasses.replace(cfg.data, format="text", path=str(folder), hub_name="", hub_config="",
                               train_split="train", valid_split=pair.valid_split, test_splits=tests,
                               train_limit=0, pairs=())
    tok = dataclasses.replace(teacher.config.tokenizer, workers=cfg.tokenizer.workers)
    return dataclasses.replace(cfg, data=data, tokenizer=tok)


def distill(cfg: Config, teacher: Teacher, decode: DecodeConfig, *, select_bleu: bool, chunk_lines: int,
            report: Callable[[str], None]) -> Path:
    """Distil `teacher` into the model of `cfg` (module docstring); returns the student's checkpoint to
    evaluate."""
    check_teacher(cfg, teacher)
    if cfg.train.init_from:
        raise MTError("distill: the student trains from scratch on the teacher's tokenizer; "
                      "drop train.init_from")
    folder = generate(cfg, teacher, decode, select_bleu=select_bleu, chunk_lines=chunk_lines, report=report)
    student = student_config(cfg, teacher, folder)
    last = student.run_dir / "checkpoints" / "last.pt"
    resume = last.is_file()
    report(f"distill: {'resuming' if resume else 'training'} the student in {student.run_dir}")
    tokenizer = teacher.tokenizer.with_targets(student.data.target_langs)
    return train(student, resume=resume, start=RunStart(student, None, None, given_tokenizer=tokenizer))
