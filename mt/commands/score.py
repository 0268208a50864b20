"""`mt score`: forced-decoding scores of sentence pairs, one line per pair (the work is
mt.decode.forced's)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from mt.commands.decoding import load_for_target, output_path
from mt.decode.engine import NativeEngine
from mt.decode.forced import score_pairs
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.errors import MTError
from mt.textio import check_same_length, read_lines, write_lines_atomic


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
    out_path = output_path(output)
    loaded, tokenizer = load_for_target(checkpoints, device, target_lang)
    engine, cfg, dev = loaded.engine, loaded.config, loaded.device
    if not isinstance(engine, NativeEngine):
        raise MTError(f"-c {checkpoints[0]}: mt score runs mt's own model; give the .pt checkpoint, "
                      f"not an export")
    decode = apply_overrides(cfg.decode, DecodeOverrides(max_tokens=max_tokens))
    found = score_pairs(engine.model, tokenizer, src_lines, tgt_lines, decode,
                        max_positions=engine.max_positions, device=dev, progress=sys.stderr.isatty())
    lines = [f"{s.log_prob:.4f}\t{s.per_token:.4f}" + (f"\t{s.normalized:.4f}" if normalize else "")
             for s in found]
    if out_path is None:
        sys.stdout.writelines(line + "\n" for line in lines)
        sys.stdout.flush()
    else:
        write_lines_atomic(out_path, lines)
