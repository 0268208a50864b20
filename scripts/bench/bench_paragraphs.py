"""Paragraphs vs sentences: corpus BLEU of test sentences grouped into paragraphs, per path.

    MT_DATA_MIRROR=../shared/data/multi30k python scripts/bench/bench_paragraphs.py -c runs/multi30k_en_de/checkpoints/best.pt

The 1,000 sentences of test_2016_flickr (source and reference) are grouped into seeded paragraphs
of 3-6 consecutive sentences, joined with one space. The baseline translates the sentences one per
line (`mt translate --no-segment`) and joins each paragraph's translations the same way; every path
then translates the paragraphs and is scored against the joined references (sacreBLEU, 13a):
`mt translate` (segmenting, the default), `mt translate --no-segment` (a paragraph as one
segment: what mt did before segmentation), a real `mt serve`'s `/translate` text and html (each
paragraph a `<p>`). Also: how many paragraphs the segmenter split exactly into their sentences, and
the segmentation's share of `mt translate`'s time on the 1,000 sentences (in process: the
segmenter and the piece counting vs the whole call). Everything with the checkpoint's decode settings.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import sacrebleu
from serving import ENV, REPO, served

from mt.device import cpu_name
from mt.textio import read_lines


def group(n: int, seed: int) -> list[tuple[int, int]]:
    """Seeded (start, end) runs of 3-6 consecutive indices covering range(n)."""
    rng, out, at = random.Random(seed), [], 0
    while at < n:
        size = rng.randint(3, 6)
        out.append((at, min(n, at + size)))
        at += size
    return out


def cli(ckpt: str, lines: list[str], *flags: str) -> tuple[list[str], float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mt", "translate", "-c", ckpt, *flags],
                          input="".join(line + "\n" for line in lines).encode(), env=ENV, capture_output=True, check=True)
    return done.stdout.decode().split("\n")[:-1], time.perf_counter() - started


def post_all(url: str, texts: list[str], fmt: str, chars: int = 9000) -> list[str]:
    """`texts` through /translate, as many per request as fit in `chars` (the server's --char-limit is 10,000)."""
    out: list[str] = []
    batch: list[str] = []
    for text in [*texts, None]:
        if batch and (text is None or sum(map(len, batch)) + len(text) > chars):
            r = httpx.post(url + "/translate", json={"q": batch, "source": "en", "target": "de", "format": fmt},
                           timeout=600)
            r.raise_for_status()
            out += r.json()["translatedText"]
            batch = []
        if text is not None:
            batch.append(text)
    return out


def segmentation_share(ckpt: str, sources: list[str]) -> dict[str, float]:
    """Seconds of the segment stage (mt.decode.pipeline.segment) vs the whole translate_texts call
    on the sentences, one per line."""
    from mt.decode.pipeline import segment
    from mt.decode.translate import translate_texts
    from mt.deploy.loading import load_model
    from mt.text.segment import segmenter_for

    loaded = load_model([Path(ckpt)], "cpu")
    seg = segmenter_for("en")
    started = time.perf_counter()
    segment(sources, loaded.tokenizer, loaded.engine.max_positions, seg)
    split_s = time.perf_counter() - started
    started = time.perf_counter()
    translate_texts(loaded.engine, loaded.tokenizer, sources, loaded.config.decode, device="cpu", segmenter=seg)
    total_s = time.perf_counter() - started
    return {"segmentation_s": round(split_s, 4), "translate_texts_s": round(total_s, 2),
            "share": round(split_s / total_s, 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--checkpoint", required=True)
    ap.add_argument("--mirror", default=os.environ.get("MT_DATA_MIRROR", str(REPO / "data" / "multi30k")))
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--quick", action="store_true",
                    help="only the baseline and `mt translate` on paragraphs (no server, no timing of the segmenter)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    mirror, ckpt = Path(args.mirror), args.checkpoint
    src, ref = (read_lines(mirror / f"test_2016_flickr.{lang}.gz") for lang in ("en", "de"))
    spans = group(len(src), args.seed)
    paragraphs = [" ".join(src[a:b]) for a, b in spans]
    refs = [" ".join(ref[a:b]) for a, b in spans]
    from mt.text.segment import segmenter_for
    exact = sum(list(segmenter_for("en").split(p).segments) == src[a:b] for p, (a, b) in zip(paragraphs, spans))
    report: dict[str, object] = {"cpu": cpu_name(), "checkpoint": ckpt, "paragraphs": len(spans),
                                 "split_exactly": exact, "load_before": os.getloadavg()}

    exact_ids = [i for i, (p, (a, b)) in enumerate(zip(paragraphs, spans))
                 if list(segmenter_for("en").split(p).segments) == src[a:b]]

    def bleu(hyps: list[str]) -> float:
        """BLEU over all paragraphs; with --quick, "all / the ones split exactly" as a string."""
        whole = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        if not args.quick:
            return whole
        part = sacrebleu.corpus_bleu([hyps[i] for i in exact_ids], [[refs[i] for i in exact_ids]]).score
        return f"{whole} / {part:.2f}"

    sentences, seconds = cli(ckpt, src, "--no-segment")
    rows = {"sentences one by one, joined": (bleu([" ".join(sentences[a:b]) for a, b in spans]), seconds)}
    print(json.dumps(rows), flush=True)
    segmented = sentences if args.quick else cli(ckpt, src)[0]  # the sentence file, segmenting on
    report["sentence_bleu"] = {"no_segment": round(sacrebleu.corpus_bleu(sentences, [ref]).score, 2),
                               "segment": round(sacrebleu.corpus_bleu(segmented, [ref]).score, 2),
                               "lines_changed": sum(a != b for a, b in zip(sentences, segmented))}
    for name, flags in [("mt translate (segmenting)", ()), ("mt translate --no-segment", ("--no-segment",))][
            :1 if args.quick else 2]:
        hyps, seconds = cli(ckpt, paragraphs, *flags)
        rows[name] = (bleu(hyps), seconds)
        print(json.dumps({name: rows[name]}), flush=True)
    if args.quick:
        print(json.dumps({**report, "rows": rows}, indent=1))
        return
    with served("-c", ckpt, "--cache-size", "0", "--timeout", "600") as (url, _):
        for fmt, wrap in [("text", lambda t: t), ("html", lambda t: f"<p>{t}</p>")]:
            started = time.perf_counter()
            hyps = post_all(url, [wrap(p) for p in paragraphs], fmt)
            hyps = [html.unescape(h.removeprefix("<p>").removesuffix("</p>")) for h in hyps]
            rows[f"mt serve /translate {fmt}"] = (bleu(hyps), time.perf_counter() - started)
            print(json.dumps({fmt: rows[f"mt serve /translate {fmt}"]}), flush=True)
    report["rows"] = {name: {"bleu": b, "seconds": round(s, 1)} for name, (b, s) in rows.items()}
    report["segmentation"] = segmentation_share(ckpt, src)
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    base = rows["sentences one by one, joined"][0]
    print("\n| path | BLEU | vs sentences | seconds |\n|---|---:|---:|---:|")
    for name, (b, s) in rows.items():
        print(f"| {name} | {b:.2f} | {b - base:+.2f} | {s:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
