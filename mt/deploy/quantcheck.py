"""What a quantised export costs: its validation BLEU against the same model in float32.

`mt export --quantization int8` (or int8_float32, int16) converts the checkpoint once more without
quantization into a temporary folder beside the export, translates the validation set with both
in CTranslate2 (the checkpoint's decode settings, so the figure is what `mt translate -c DIR`
gives), and records both BLEUs, both chrFs and the CPU under "quantization_check" in
`mt_export.json` and in MODEL_CARD.md. int8 kernels differ by instruction set (AVX2 has no VNNI
dot products, AVX-512 VNNI has), so the figure holds for the CPU named beside it. Where the
validation set cannot be read (an export made away from the corpus), the check is recorded as
not measured, with the reason.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mt.decode.translate import translate_lines
from mt.deploy.export import EXPORT_INFO, MODEL_CARD, export_ctranslate2, export_model_card, read_export_info
from mt.deploy.loading import load_model
from mt.device import cpu_isa, cpu_name
from mt.errors import MTError
from mt.eval.evaluate import eval_sets, score
from mt.model.checkpoint import Checkpoint
from mt.textio import atomic_write

MAX_SENTENCES = 2000  # the first N sentences of each validation set: a few seconds of CTranslate2 each


def check_quantization(export_dir: Path, checkpoint: Checkpoint | Path, *,
                       max_sentences: int = MAX_SENTENCES) -> dict[str, Any]:
    """Measure the quantised export `export_dir` (written from `checkpoint`: its path, or the
    checkpoint already read) against float32 on the validation set(s); store the record in its
    mt_export.json and MODEL_CARD.md; return it."""
    info = read_export_info(export_dir)
    quantization = info["quantization"]
    loaded = load_model([export_dir], "cpu")
    engine, tokenizer, cfg = loaded.engine, loaded.tokenizer, loaded.config
    splits = sorted({p.valid_split for p in cfg.data.pairs})
    record: dict[str, Any] = {"quantization": quantization, "int8_range": info.get("int8_range"),
                              "cpu": cpu_name(), "isa": cpu_isa(),
                              "beam": cfg.decode.search.beam, "splits": splits}
    try:
        sets = eval_sets(cfg, tokenizer, splits, [], None, None)
    except MTError as e:
        record["skipped"] = f"validation set not readable here ({e})"
        _store(export_dir, info, record)
        return record
    decode = cfg.decode
    with tempfile.TemporaryDirectory(prefix=f".{export_dir.name}.fp32-check.", dir=export_dir.parent) as tmp:
        reference = export_ctranslate2(checkpoint, Path(tmp) / "float32", quantization="none")
        engines = {"float32": load_model([reference], "cpu").engine, quantization: engine}
        results = []
        for test, tok, bleu_tokenize in sets:
            src, ref = test.src[:max_sentences], [r.rstrip() for r in test.ref[:max_sentences]]
            row: dict[str, Any] = {"label": test.label, "sentences": len(src)}
            for name, eng in engines.items():
                started = time.perf_counter()
                hyps = translate_lines(eng, tok, src, decode, device="cpu")
                seconds = time.perf_counter() - started
                scores = score(hyps, ref, tokenize=bleu_tokenize)
                row[name] = {"bleu": round(scores.bleu, 2), "chrf": round(scores.chrf, 2),
                             "seconds": round(seconds, 2)}
            row["bleu_delta"] = round(row[quantization]["bleu"] - row["float32"]["bleu"], 2)
            row["logprob_error"] = _logprob_error(engines["float32"], engine, tok, src, ref,
                                                  cfg.model.max_positions)
            results.append(row)
    record["sets"] = results
    record["bleu_delta"] = round(sum(r["bleu_delta"] for r in results) / len(results), 2)
    _store(export_dir, info, record)
    return record


def _logprob_error(reference: Any, quantised: Any, tok: Any, src: list[str], ref: list[str],
                   max_positions: int) -> dict[str, float]:
    """How far the quantised model's teacher-forced log-probs of the references are from float32's
    (mean and 99th percentile of |difference| per token): finer than BLEU, which moves only when
    an argmax flips."""
    src_ids, tgt_ids = tok.encode_src(src), tok.encode_tgt(ref)
    keep = [i for i in range(len(src_ids)) if max(len(src_ids[i]), len(tgt_ids[i])) < max_positions]
    src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
    a = np.concatenate([np.asarray(x) for x in reference.score_ids(src_ids, tgt_ids)] or [np.zeros(0)])
    b = np.concatenate([np.asarray(x) for x in quantised.score_ids(src_ids, tgt_ids)] or [np.zeros(0)])
    diff = np.abs(a - b)
    return {"mean": round(float(diff.mean()), 4) if diff.size else 0.0,
            "p99": round(float(np.quantile(diff, 0.99)), 4) if diff.size else 0.0}


def describe(record: dict[str, Any]) -> str:
    """One line for the model card and `mt export`'s output."""
    q = record["quantization"]
    if "skipped" in record:
        return f"{q} against float32: not measured: {record['skipped']}"
    parts = [f"{r['label']} ({r['sentences']:,} sentences): "
             f"BLEU {r[q]['bleu']:.2f} against {r['float32']['bleu']:.2f} "
             f"({r['bleu_delta']:+.2f}), chrF {r[q]['chrf']:.2f} against {r['float32']['chrf']:.2f}, "
             f"token log-prob error mean {r['logprob_error']['mean']:.4f} "
             f"/ p99 {r['logprob_error']['p99']:.4f}"
             for r in record["sets"]]
    name = f"{q} ({record['int8_range']} range)" if record.get("int8_range") else q
    return (f"{name} against float32, beam {record['beam']}, measured at export on {record['cpu']} "
            f"({record['isa']}): {'; '.join(parts)}. int8 kernels differ by CPU: on another one, check with "
            f"`mt evaluate -c <this dir> --split {record['splits'][0]}`")


def _store(export_dir: Path, info: dict[str, Any], record: dict[str, Any]) -> None:
    """Write the record into mt_export.json and regenerate MODEL_CARD.md, each atomically."""
    info = {**info, "quantization_check": {**record, "summary": describe(record)}}
    with atomic_write(export_dir / EXPORT_INFO) as f:
        f.write((json.dumps(info, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    with atomic_write(export_dir / MODEL_CARD) as f:
        f.write(export_model_card(info).encode("utf-8"))
