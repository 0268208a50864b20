"""How well the sentence confidence (`mt.decode.confidence`) ranks translations, on one checkpoint.

    python scripts/experiments/exp_confidence.py -c runs/multi30k_en_de/checkpoints/best.pt \\
        --mirror data/multi30k --out docs/data/confidence [--fit] [--store calibrated.pt]

1. With --fit (or when the checkpoint has no calibration), the calibration is fitted on the val
   split (`mt.train.confidence_fit.fit_confidence`: the checkpoint's decode settings, sentence chrF);
   --store writes a copy of the checkpoint with it (decode.calibration.weights and a confidence_fit record).
2. Ranking: every --test set is translated with the checkpoint's decode settings; Spearman of the
   confidence with sentence chrF (the issue's target: >= 0.4 on test_2017_mscoco), beside the
   uncalibrated mean log-prob's.
3. Garbage: for each test sentence, planted wrong outputs are force-decoded (`mt score`'s
   `score_pairs`) and given their confidence: another sentence's translation (the outputs rotated
   by half the set), the output cut to its first half of words, the output with a loop appended
   (its last word six times), the source copied untranslated, and a character loop (the output's
   first word with its last letter run twelve times). The ROC AUC of real outputs against them
   (target: >= 0.9), overall and by kind.
results.json goes to --out, with the command's settings and the CPU it ran on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import time
from pathlib import Path

from mt.decode.confidence import Scored
from mt.decode.forced import score_pairs
from mt.decode.translate import search_lines
from mt.deploy.loading import load_model
from mt.eval.confidence import roc_auc, sentence_chrf, spearman
from mt.model.checkpoint import store_confidence_fit
from mt.textio import read_lines
from mt.train.confidence_fit import fit_confidence

GARBAGE = ("other_sentence", "truncated", "word_loop", "copied_source", "char_loop")


def garbage_outputs(sources: list[str], outputs: list[str]) -> dict[str, list[str]]:
    """Each kind of planted wrong output, one per sentence (module docstring)."""
    half = len(outputs) // 2
    rotated = outputs[half:] + outputs[:half]
    out: dict[str, list[str]] = {"other_sentence": rotated, "copied_source": list(sources)}
    out["truncated"] = [" ".join(o.split()[:max(1, len(o.split()) // 2)]) for o in outputs]
    out["word_loop"] = [o.rstrip(".") + (" " + (o.rstrip(".").split() or ["und"])[-1]) * 6 + "." for o in outputs]
    out["char_loop"] = [(o.split() or ["Ein"])[0] + (o.split() or ["Ein"])[0][-1] * 12 for o in outputs]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--checkpoint", type=Path, required=True)
    ap.add_argument("--mirror", type=Path, required=True, help="the Multi30k mirror folder ({split}.{lang}.gz)")
    ap.add_argument("--test", nargs="*", default=["test_2017_mscoco", "test_2016_flickr", "test_2017_flickr"])
    ap.add_argument("--fit", action="store_true", help="fit the calibration on val (default: only when it has none)")
    ap.add_argument("--store", type=Path, help="write a copy of the checkpoint with the fitted calibration")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    loaded = load_model([args.checkpoint], args.device)
    cfg, engine, tok = loaded.config, loaded.engine, loaded.tokenizer
    pair = cfg.data.pairs[0]

    def split(name: str) -> tuple[list[str], list[str]]:
        return (list(read_lines(args.mirror / f"{name}.{pair.src_lang}.gz")),
                list(read_lines(args.mirror / f"{name}.{pair.tgt_lang}.gz")))

    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, n_best=1))
    result: dict = {"checkpoint": str(args.checkpoint), "cpu": platform.processor() or platform.machine(),
                    "decode": {"beam": decode.search.beam, "alpha": decode.search.alpha,
                               "no_repeat_ngram_size": decode.search.no_repeat_ngram_size,
                               "repetition_penalty": decode.search.repetition_penalty}}
    if args.fit or not decode.calibration.weights:
        weights, record = fit_confidence(engine, tok, *[x[:1500] for x in split("val")], decode, loaded.device)
        decode = dataclasses.replace(decode, calibration=dataclasses.replace(decode.calibration, weights=weights, min_pieces=record["min_source_pieces"], min_distinct=record["min_distinct_share"]))  # as stored
        result["fit"] = record
        print("fit:", json.dumps(record), flush=True)
        if args.store:
            shutil.copyfile(args.checkpoint, args.store)
            store_confidence_fit(args.store, weights, record)
    result["weights"] = list(decode.calibration.weights)
    for name in args.test:
        started = time.perf_counter()
        src, ref = split(name)
        found: list[Scored] = search_lines(engine, tok, src, decode, device=loaded.device).scored()
        chrf = sentence_chrf([s.output for s in found], ref)
        real = [s.confidence(decode) for s in found]
        row = {"sentences": len(src), "spearman": round(spearman(real, chrf), 4),
               "spearman_mean_log_prob": round(spearman([s.features()[0] for s in found], chrf), 4),
               "mean_confidence": round(sum(real) / len(real), 4), "mean_chrf": round(sum(chrf) / len(chrf), 2)}
        src_ids = tok.encode_src(src)
        planted: list[float] = []
        for kind, outputs in garbage_outputs(src, [s.output for s in found]).items():
            forced = score_pairs(engine.model, tok, src, outputs, decode, max_positions=engine.max_positions,
                                 device=loaded.device)
            conf = [Scored(s, o, ids, f.length - 1, f.log_prob).confidence(decode)
                    for s, o, ids, f in zip(src, outputs, src_ids, forced)]
            row[f"auc_{kind}"] = round(roc_auc(real, conf), 4)
            planted += conf
        row["auc"] = round(roc_auc(real, planted), 4)
        row["seconds"] = round(time.perf_counter() - started, 1)
        result[name] = row
        print(name, json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
