"""`mt distill`: sequence-level knowledge distillation in one resumable run (mt.train.distill's work).

The teacher checkpoints (several: an ensemble) translate the training sources of the student
config by beam search (`--beam`, default the teacher's decode.search.beam); with `--n-best N
--select-bleu` the one of the N best closest to the reference by sentence BLEU is kept. The
student config then trains on the result with the teacher's tokenizer. Run the same command
again to continue an interrupted run: translation resumes at its last committed chunk, training
from the student's last.pt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from mt.commands.backtranslate import model_record
from mt.config_load import load_config
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.train.distill import Teacher, distill


def distill_command(teachers: Sequence[Path], config: Path, overrides: list[str],
                    decoding: DecodeOverrides, *, select_bleu: bool, chunk_lines: int, device: str) -> None:
    """`mt distill --teacher T.pt [--teacher T2.pt] STUDENT.yaml`: see the module docstring."""
    if chunk_lines < 1:
        raise MTError(f"--chunk-lines: must be at least 1, got {chunk_lines}")
    n_best = decoding.n_best
    if select_bleu and (n_best is None or n_best < 2):
        raise MTError("--select-bleu: needs --n-best N (N >= 2) hypotheses to choose from")
    if n_best is not None and not select_bleu:
        raise MTError("--n-best: the student learns one translation per source; "
                      "add --select-bleu to pick one of N")
    cfg = load_config(config, overrides)
    loaded = load_model(teachers, device)
    if loaded.provenance.files and any(Path(f).is_dir() for f in loaded.provenance.files):
        raise MTError("--teacher: give .pt checkpoints "
                      "(an exported CTranslate2 model has no tokenizer to train with here)")
    decode = apply_overrides(loaded.config.decode,
                             dataclasses.replace(decoding, n_best=n_best or 1, sampling=False))
    teacher = Teacher(loaded.engine, loaded.tokenizer, loaded.config, loaded.device, model_record(loaded))
    best = distill(cfg, teacher, decode, select_bleu=select_bleu, chunk_lines=chunk_lines,
                   report=lambda line: print(line, flush=True))
    print(f"distill: student checkpoint {best}")
