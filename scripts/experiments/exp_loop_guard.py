"""What the loop guard (`decode.search.no_repeat_ngram_size`, `decode.search.repetition_penalty`) does to BLEU, and
to odd input, on one checkpoint: how its defaults were chosen.

    python scripts/experiments/exp_loop_guard.py -c runs/multi30k_en_de/checkpoints/best.pt \\
        --mirror data/multi30k --split val --out docs/data/loop_guard

For every setting (`--ngram` sizes with penalty 1, then `--penalty` values with the n-gram ban off)
it translates the split with the checkpoint's decode settings and the guard, and writes BLEU and
chrF, the paired bootstrap against the unguarded run (sacreBLEU's, 1,000 resamples), the sentences
the guard changed, and for the odd inputs of `ODD` (one word, repeated words, runs of a character),
translated as `mt translate` takes text (segmented: a line without words comes back as it is), how
many outputs still repeat a word (case-folded) more often than their input's most repeated word, or
run a letter longer than max(3, the input's longest run): `loops`; the odd inputs without the loop
retry, so each row is the guard alone.

The retry (`decode.text.loop_retry`, with the checkpoint's guard): each of --retry-splits, and the odd
inputs, translated as `mt translate` takes text (`translate_texts`, spans, case and ending rules on
in both runs) with the retry off and on: BLEU, chrF, the sentences it changed, the paired bootstrap,
the seconds each took (the least of --rounds alternating runs; compare them on a quiet machine), and
the odd inputs that still loop. results.json and results.md go to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from mt.config import DecodeConfig
from mt.decode.translate import translate_lines, translate_texts
from mt.deploy.loading import LoadedModel, load_model
from mt.eval.compare import paired_bootstrap
from mt.text.segment import segmenter_for
from mt.textio import read_lines

ODD = ["Yes", "hello", "ha ha ha ha ha ha ha ha", "!!!!!!", "aaaaaaaa", "No", "OK", "Thanks!", "lol", "hmm",
       "yes yes yes yes", "?????", "la la la la la la", "zzzzzzzzzzzz", "Hi", "Wow", "no no no no no",
       "hahahahaha", "Okay okay", "...", "Yes!", "hello hello hello", "Goodbye", "Help", "Stop", "Why?",
       "ok ok ok", "blah blah blah blah", "Hmmmmmm", "A", "I", "Test test test", "Sale", "Cancel", "Save",
       "Done", "Next", "Back", "Menu", "Settings"]


def loops(source: str, output: str) -> bool:
    """The issue's target, strictly: the output repeats a word, or runs a letter, more often than the input."""
    def most(text: str) -> int:
        words = re.findall(r"\w+", text.casefold())
        return max((words.count(w) for w in set(words)), default=0)

    def run(text: str) -> int:
        best, last, n = 0, "", 0
        for c in text:
            n = n + 1 if c == last else 1
            last = c
            if c.isalpha():
                best = max(best, n)
        return best
    return most(output) > most(source) or run(output) > max(run(source), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--checkpoint", type=Path, required=True)
    ap.add_argument("--mirror", type=Path, required=True, help="the Multi30k mirror folder ({split}.{lang}.gz)")
    ap.add_argument("--split", default="val")
    ap.add_argument("--ngram", type=int, nargs="*", default=[2, 3, 4, 5, 6])
    ap.add_argument("--penalty", type=float, nargs="*", default=[1.1, 1.3])
    ap.add_argument("--retry-splits", nargs="*", default=["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"])
    ap.add_argument("--rounds", type=int, default=1, help="retry timing: alternating runs off and on, least time kept")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    loaded = load_model([args.checkpoint], args.device)
    cfg = loaded.config
    pair = cfg.data.pairs[0]
    src = list(read_lines(args.mirror / f"{args.split}.{pair.src_lang}.gz"))
    ref = list(read_lines(args.mirror / f"{args.split}.{pair.tgt_lang}.gz"))
    settings = [(0, 1.0)] + [(n, 1.0) for n in args.ngram] + [(0, p) for p in args.penalty]
    rows, base, systems = [], None, []
    for ngram, penalty in settings:
        decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, no_repeat_ngram_size=ngram, repetition_penalty=penalty, n_best=1), text=dataclasses.replace(cfg.decode.text, loop_retry=False))
        started = time.perf_counter()
        hyps = translate_lines(loaded.engine, loaded.tokenizer, src, decode, device=loaded.device)
        seconds = time.perf_counter() - started
        odd = translate_texts(loaded.engine, loaded.tokenizer, ODD, decode, device=loaded.device,
                              segmenter=segmenter_for(pair.src_lang))  # as mt translate and mt serve take them
        row = {"no_repeat_ngram_size": ngram, "repetition_penalty": penalty, "seconds": round(seconds, 1),
               "bleu": round(BLEU().corpus_score(hyps, [ref]).score, 2),
               "chrf": round(CHRF().corpus_score(hyps, [ref]).score, 2),
               "odd_loops": sum(loops(s, o) for s, o in zip(ODD, odd)), "odd": dict(zip(ODD, odd))}
        base = hyps if base is None else base
        row["changed"] = sum(a != b for a, b in zip(base, hyps))
        systems.append((f"ngram {ngram}, penalty {penalty:g}", hyps))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "odd"}), flush=True)
    compared = paired_bootstrap(systems, ref, tokenize="13a")
    for row, system in zip(rows, compared.systems):
        row["bleu_p"] = system.bleu_p
    retry = retry_rows(loaded, args.mirror, args.retry_splits, args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"checkpoint": str(args.checkpoint), "split": args.split,
                                                       "sentences": len(src), "rows": rows, "retry": retry},
                                                      indent=1, ensure_ascii=False) + "\n")
    lines = [f"| no_repeat_ngram_size | repetition_penalty | {args.split} BLEU | chrF | sentences changed | "
             f"p (paired bootstrap) | odd inputs that loop (of {len(ODD)}) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['no_repeat_ngram_size']} | {row['repetition_penalty']:g} | {row['bleu']:.2f} | "
                     f"{row['chrf']:.2f} | {row['changed']} | {row['bleu_p'] if row['bleu_p'] is not None else 'base'} | "
                     f"{row['odd_loops']} |")
    lines += ["", "| loop retry | set | BLEU | chrF | sentences changed | p (paired bootstrap) | seconds |",
              "|---|---|---|---|---|---|---|"]
    for row in retry["sets"]:
        lines += [f"| off | {row['split']} | {row['bleu_off']:.2f} | {row['chrf_off']:.2f} | | base | "
                  f"{row['seconds_off']} |",
                  f"| on | {row['split']} | {row['bleu_on']:.2f} | {row['chrf_on']:.2f} | {row['changed']} | "
                  f"{row['bleu_p']} | {row['seconds_on']} |"]
    lines += ["", f"Odd inputs that loop (of {len(ODD)}): {retry['odd_loops_off']} without the retry, "
                  f"{retry['odd_loops_on']} with it."]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")


def retry_rows(loaded: LoadedModel, mirror: Path, splits: list[str], rounds: int = 1) -> dict:
    """The loop retry off and on, with the checkpoint's guard, through `translate_texts` (module docstring)."""
    pair = loaded.config.data.pairs[0]
    segmenter = segmenter_for(pair.src_lang, pair.tgt_lang)
    decode = loaded.config.decode
    on = dataclasses.replace(decode, search=dataclasses.replace(decode.search, n_best=1),
                             text=dataclasses.replace(decode.text, loop_retry=True))
    off = dataclasses.replace(on, text=dataclasses.replace(on.text, loop_retry=False))

    def texts(lines: list[str], decode: DecodeConfig) -> list[str]:
        return translate_texts(loaded.engine, loaded.tokenizer, lines, decode, device=loaded.device, segmenter=segmenter)

    sets = []
    for split in splits:
        src = list(read_lines(mirror / f"{split}.{pair.src_lang}.gz"))
        ref = list(read_lines(mirror / f"{split}.{pair.tgt_lang}.gz"))
        seconds_off = seconds_on = float("inf")
        for _ in range(rounds):  # alternating, the least time of each kept
            started = time.perf_counter()
            hyps_off = texts(src, off)
            middle = time.perf_counter()
            hyps_on = texts(src, on)
            seconds_off, seconds_on = min(seconds_off, middle - started), min(seconds_on, time.perf_counter() - middle)
        compared = paired_bootstrap([("retry off", hyps_off), ("retry on", hyps_on)], ref, tokenize="13a")
        row = {"split": split, "bleu_off": round(BLEU().corpus_score(hyps_off, [ref]).score, 2),
               "bleu_on": round(BLEU().corpus_score(hyps_on, [ref]).score, 2),
               "chrf_off": round(CHRF().corpus_score(hyps_off, [ref]).score, 2),
               "chrf_on": round(CHRF().corpus_score(hyps_on, [ref]).score, 2),
               "changed": sum(a != b for a, b in zip(hyps_off, hyps_on)), "bleu_p": compared.systems[1].bleu_p,
               "seconds_off": round(seconds_off, 2), "seconds_on": round(seconds_on, 2),
               "examples": [(s, a, b) for s, a, b in zip(src, hyps_off, hyps_on) if a != b][:10]}
        sets.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "examples"}, ensure_ascii=False), flush=True)
    odd_off, odd_on = texts(ODD, off), texts(ODD, on)
    return {"sets": sets, "odd_loops_off": sum(loops(s, o) for s, o in zip(ODD, odd_off)),
            "odd_loops_on": sum(loops(s, o) for s, o in zip(ODD, odd_on)), "odd_on": dict(zip(ODD, odd_on))}


if __name__ == "__main__":
    main()
