"""`mt backtranslate`: target-language monolingual text -> synthetic pairs, through a reverse model.

The reverse model (e.g. de->en for an en->de system; several -c: an ensemble) translates every
line of `--mono`; the folder `-o` becomes a text-format corpus `train.{src}` (the model's
output: the synthetic sources) + `train.{tgt}` (the monolingual lines), with `manifest.json`
(models and their sha256s, settings, counts) once complete. Train on it with
`data.synthetic: [OUT]` (mt/data/synthetic.py). Sampling (the default; Edunov et al. 2018) draws
line i from a generator keyed by (seed, i), so the output does not depend on batching or on
where a run was interrupted; `--beam N` searches instead. Committed in chunks of
`--chunk-lines` lines (mt.data.pairwriter): a killed run continues where it stopped when started
again with the same command.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mt.commands.decoding import load_for_target
from mt.data.pairwriter import PairWriter
from mt.data.synthetic import mono_lines
from mt.decode.generate import generate_pairs
from mt.decode.overrides import FLAGS, SAMPLING_KNOBS, DecodeOverrides, apply_overrides
from mt.decode.translate import translate_lines
from mt.deploy.loading import LoadedModel
from mt.errors import MTError


def model_record(loaded: LoadedModel) -> list[dict[str, Any]]:
    """The manifest's `models`: each file's path, sha256 and training update (the first's)."""
    p = loaded.provenance
    return [{"path": str(Path(f).resolve()), "sha256": sha} for f, sha in zip(p.files, p.sha256s)]


def file_identity(path: Path) -> dict[str, Any]:
    """What names an input file for resuming: its absolute path, size and modification time."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def backtranslate_command(models: Sequence[Path], mono: Path, out: Path, overrides: DecodeOverrides, *,
                          chunk_lines: int, device: str, target_lang: str | None,
                          mono_lang: str | None) -> None:
    """`mt backtranslate`: see the module docstring."""
    if not mono.is_file():
        raise MTError(f"--mono '{mono}': {'is a folder' if mono.is_dir() else 'file not found'}")
    if chunk_lines < 1:
        raise MTError(f"--chunk-lines: must be at least 1, got {chunk_lines}")
    beam = overrides.beam
    given = [FLAGS[knob] for knob in SAMPLING_KNOBS if getattr(overrides, knob) is not None]
    if beam is not None and given:
        raise MTError(f"{given[0]}: applies to sampling, and --beam {beam} searches instead; "
                      f"drop one of them")
    loaded, tokenizer = load_for_target(models, device, target_lang)
    cfg = loaded.config
    sampling = beam is None
    decode = apply_overrides(cfg.decode, dataclasses.replace(overrides, n_best=1, sampling=sampling))
    if sampling and overrides.top_k is None and overrides.top_p is None and overrides.temperature is None:
        # unrestricted (Edunov et al.)
        unrestricted = dataclasses.replace(decode.search, top_k=0, top_p=1.0, temperature=1.0)
        decode = dataclasses.replace(decode, search=unrestricted)
    pair = cfg.data.pair_into(target_lang)
    synthetic_lang, text_lang = pair.tgt_lang, mono_lang or pair.src_lang
    settings = decode.output_settings()
    identity = {"command": "backtranslate", "models": [r["sha256"] for r in model_record(loaded)],
                "mono": file_identity(mono), "decode": settings, "languages": [synthetic_lang, text_lang]}
    writer = PairWriter(out, synthetic_lang, text_lang, identity)
    if writer.complete:
        print(f"backtranslate: {out} is complete (manifest.json); nothing to do")
        return

    def translate(first: int, lines: list[str], _refs: list[str] | None) -> list[str]:
        return translate_lines(loaded.engine, tokenizer, lines, decode, device=loaded.device, first_id=first)

    start = time.perf_counter()
    s = decode.search
    mode = (f"sampling (seed {s.seed}, temperature {s.temperature:g}, top-k {s.top_k}, top-p {s.top_p:g})"
            if sampling else f"beam {s.beam}")
    result = generate_pairs(((line, None) for line in mono_lines(mono, text_lang)), translate, writer,
                            chunk_lines=chunk_lines, output_is_source=True,
                            on_chunk=lambda n: print(f"backtranslate: {n} lines committed", flush=True))
    seconds = time.perf_counter() - start
    done = result.lines - result.resumed_at
    manifest = writer.finish({"command": "backtranslate", "models": model_record(loaded),
                              "mono": str(mono.resolve()), "mode": "sampling" if sampling else "beam",
                              "decode": settings, "src_lang": synthetic_lang, "tgt_lang": text_lang,
                              "resumed_at": result.resumed_at, "seconds_this_run": round(seconds, 2)})
    resumed = f", resumed at line {result.resumed_at}" if result.resumed_at else ""
    print(f"backtranslate: {result.lines} lines -> {out} ({mode}; {done} in {seconds:.1f}s, "
          f"{done / max(seconds, 1e-9):.1f} lines/s{resumed}); manifest {manifest}")
