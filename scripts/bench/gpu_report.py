"""The report of scripts/bench/gpu_check.sh: OUT/gpu_check.json (every figure) and OUT/gpu_check.md (one table).

    python scripts/bench/gpu_report.py OUT

Reads what the stages left in OUT (bench.json, loop.json, train.txt, eval/, *.status, device.txt)
and sets the issue-63 targets beside the figures: transformer-base bf16 at >= 40% MFU at WMT-like
lengths and >= 3x nn.Transformer and Marian, the loop at >= 90% of its step, >= 38 BLEU on
test_2016_flickr after 3 minutes. A stage that failed or did not run shows as such.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def find_key(obj: Any, key: str) -> Any:
    """The first value of `key` anywhere in a JSON object (depth first), else None."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for item in obj:
            if (found := find_key(item, key)) is not None:
                return found
    return None


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def summary(out: Path) -> dict[str, Any]:
    stages = {p.stem: p.read_text().strip() for p in sorted(out.glob("*.status"))}
    bench, loop = read_json(out / "bench.json"), read_json(out / "loop.json")
    bleu = None
    for path in sorted((out / "eval").rglob("*.json")) if (out / "eval").is_dir() else []:
        if (found := find_key(read_json(path), "bleu")) is not None:
            bleu = float(found)
            break
    train_log = (out / "train.txt").read_text() if (out / "train.txt").is_file() else ""
    rates = [float(x.replace(",", "")) for x in re.findall(r"\| ([\d,]+) tgt tok/s", train_log)]
    best: dict[str, Any] = {}
    for row in (bench or {}).get("rows", []):
        if row["mode"] != "train" or not row["model"].startswith("mt"):
            continue
        key = str(row["max_tokens"])
        if key not in best or row["mfu"] > best[key]["mfu"]:
            best[key] = row
    return {"device": (out / "device.txt").read_text().strip() if (out / "device.txt").is_file() else "",
            "stages": stages, "bench": bench, "mt_best_train": best, "loop": loop,
            "train_tok_s_last": rates[-1] if rates else None, "test_2016_flickr_bleu": bleu}


def table(s: dict[str, Any]) -> str:
    lines = [f"# gpu_check: {s['device'] or 'unknown device'}", "",
             "| figure | measured | target |", "| --- | ---: | ---: |"]
    for size, row in sorted(s["mt_best_train"].items(), key=lambda kv: int(kv[0])):
        peers = " / ".join(f"{r:.2f}x" for r in row["vs_peers"]) or "-"
        lines.append(f"| mt train MFU, {int(size):,}-token batches ({row['model']}, {row['precision']}) "
                     f"| {row['mfu']:.1%} | >= 40% at WMT-like lengths |")
        lines.append(f"| mt vs nn.Transformer / Marian, {int(size):,} tokens | {peers} | >= 3x |")
    if s["loop"]:
        lines.append(f"| loop / bare step | {s['loop']['loop_over_step']:.1%} | >= 90% |")
    if s["train_tok_s_last"] is not None:
        lines.append(f"| `mt train --budget` last logged speed | {s['train_tok_s_last']:,.0f} tgt tok/s | |")
    bleu = s["test_2016_flickr_bleu"]
    lines.append(f"| BLEU test_2016_flickr after the budget | {'-' if bleu is None else f'{bleu:.2f}'} | >= 38 |")
    lines.append("")
    lines.append("stages: " + ", ".join(f"{k} {v}" for k, v in s["stages"].items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    out = Path(sys.argv[1])
    s = summary(out)
    (out / "gpu_check.json").write_text(json.dumps(s, indent=1) + "\n")
    text = table(s)
    (out / "gpu_check.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
