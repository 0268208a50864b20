"""An mt checkpoint against its `mt export --format hf` directory in transformers: equal outputs
and speed on the same lines (greedy and beam), in one run.

    python scripts/tools/hf_compare.py -c runs/demo_post/checkpoints/best.pt --src data/multi30k/test_2016_flickr.en.gz

mt translates with `mt.decode.translate.translate_lines` (its own token-budget batches, decoder
cache); transformers with `MarianMTModel.generate` over batches of `--batch` length-sorted
sentences, with the exported generation_config (mt's banned tokens) and, for beam search, the
same stopping rule and length penalty: both sides use |y|^1 (mt `average`, alpha 1; transformers
`length_penalty=1.0`, `early_stopping=True`). mt's output length limit (a * |x| + b) is per
sentence; generate's is per batch, set to the longest sentence's mt limit, so a sentence that
reaches its own mt limit may go on in transformers: those lines are counted apart. Prints a
Markdown table (CPU, threads, seconds, sentences/s, lines equal) and writes `--out` JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

from mt.decode.rules import max_output_lengths, search_settings
from mt.decode.translate import translate_lines
from mt.deploy.hf_export import export_hf
from mt.device import cpu_name
from mt.model.checkpoint import load_for_inference
from mt.textio import read_lines


def hf_translate(hf, tok, lines: list[str], limits: list[int], *, beam: int, batch: int) -> list[str]:  # noqa: ANN001
    """generate() over length-sorted batches of `batch` lines; outputs in input order."""
    order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    out: list[str] = [""] * len(lines)
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        enc = tok([lines[i] for i in rows], return_tensors="pt", padding=True)
        extra = dict(num_beams=beam, length_penalty=1.0, early_stopping=True) if beam > 1 else {"num_beams": 1}
        with torch.no_grad():
            gen = hf.generate(**enc, max_new_tokens=max(limits[i] for i in rows) + 1, do_sample=False, **extra)
        for i, text in zip(rows, tok.batch_decode(gen, skip_special_tokens=True)):
            out[i] = text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--checkpoint", type=Path, required=True)
    ap.add_argument("--src", type=Path, required=True, help="source lines (text or .gz)")
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    lines = read_lines(args.src)[: args.limit]
    model, tok, cfg = load_for_inference(args.checkpoint, "cpu")
    model.eval()
    d = cfg.decode.search
    src_len = torch.tensor([len(ids) + 1 for ids in tok.encode_src(lines)])
    limits = max_output_lengths(src_len, search_settings(d, max_len_limit=cfg.model.max_positions - 1)).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = export_hf(args.checkpoint, Path(tmp) / "hf")
        hf, hf_tok = AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval(), AutoTokenizer.from_pretrained(hf_dir)
    rows = []
    for beam in args.beams:
        decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(
            d, beam=beam, length_penalty="average", alpha=1.0, n_best=1))
        start = time.perf_counter()
        ours = translate_lines(model, tok, lines, decode, device="cpu")
        mt_s = time.perf_counter() - start
        start = time.perf_counter()
        theirs = hf_translate(hf, hf_tok, lines, limits, beam=beam, batch=args.batch)
        hf_s = time.perf_counter() - start
        ids = [tok.encode_tgt([t])[0] for t in ours]
        at_limit = [len(i) >= lim for i, lim in zip(ids, limits)]
        equal = sum(a.strip() == b for a, b in zip(ours, theirs))
        equal_free = sum(a.strip() == b for a, b, cut in zip(ours, theirs, at_limit) if not cut)
        rows.append({"beam": beam, "mt_seconds": round(mt_s, 2), "hf_seconds": round(hf_s, 2),
                     "mt_sent_per_s": round(len(lines) / mt_s, 1), "hf_sent_per_s": round(len(lines) / hf_s, 1),
                     "lines": len(lines), "equal": equal, "mt_at_limit": sum(at_limit),
                     "equal_not_at_limit": f"{equal_free}/{len(lines) - sum(at_limit)}"})
    report = {"cpu": cpu_name(), "threads": args.threads, "checkpoint": str(args.checkpoint), "src": str(args.src),
              "hf_batch": args.batch, "rows": rows}
    print(f"{report['cpu']}, {args.threads} threads, {len(lines)} lines of {args.src.name}, transformers batch "
          f"{args.batch}")
    print("| search | mt translate s (sent/s) | transformers generate s (sent/s) | equal lines | mt at its length "
          "limit | equal, the others |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        label = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
        print(f"| {label} | {r['mt_seconds']} ({r['mt_sent_per_s']}) | {r['hf_seconds']} ({r['hf_sent_per_s']}) "
              f"| {r['equal']}/{r['lines']} | {r['mt_at_limit']} | {r['equal_not_at_limit']} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
