"""Interactive completion measured as the field measures it (issue 73; Knowles & Koehn, AMTA 2016):
references replayed as a translator typing them, through `translate_path(prefixes=...)`, the one
path `mt translate --prefix` runs.

    python scripts/experiments/exp_completion.py -c run/checkpoints/best.pt \\
        --mirror /work/shared/data/multi30k --split test_2016_flickr --out results/completion

For each of `--sentences` test sentences and each word of its reference:

1. word prediction accuracy: given the reference up to that word (and the space after it), is the
   next word of the completion the reference's word (punctuation after a word not counted);
2. the same for a prefix cut inside the word (its first half typed, words of 2+ letters): the share
   of completions that start with the typed letters (the model's own output, before the typed text
   is put back: `Typed.shown`) and the share completing the reference's word;
3. the reference's next word among the `--alternatives` (5) alternatives after the prefix.

Then for `--keystroke-sentences` sentences a translator types the reference: after each keystroke
the completion is shown; where it gets the current word right one key (Tab) takes the word and its
space, where it gets the whole rest right one key (Enter) ends the line, otherwise one letter is
typed. Reported: keystrokes saved (1 - keys / characters) and the latency of each keystroke's
completion (p50, p95, ms; one sentence a call, this machine's CPU named in results.json). With
`--paired-prefill` those completions are run again with the forced pieces decoded before the
search (`mt.decode.prefill`) and step by step inside it, alternating, in the same process: equal
outputs counted, latencies side by side.
Written to --out: results.json, results.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path

from mt.decode import prefill
from mt.decode.pipeline import Translated
from mt.decode.translate import translate_path
from mt.decode.typed import PUNCTUATION, typed_prefix, word_at
from mt.deploy.loading import LoadedModel, load_model
from mt.text.segment import segmenter_for
from mt.textio import read_lines


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine's architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def clean(word: str) -> str:
    return word.rstrip(PUNCTUATION)


class Completer:
    """The model behind the replay: texts continuing typed prefixes, as `mt translate --prefix`."""

    def __init__(self, loaded: LoadedModel, beam: int | None) -> None:
        self.loaded, self.tokenizer = loaded, loaded.tokenizer
        decode = loaded.config.decode
        if beam is not None:
            decode = dataclasses.replace(decode, search=dataclasses.replace(decode.search, beam=beam))
        self.decode = decode
        self.segmenter = segmenter_for(loaded.config.data.src_lang, loaded.config.data.tgt_lang)

    def complete(self, source: str, prefixes: list[str], alternatives: int = 0) -> Translated:
        return translate_path(self.loaded.engine, self.tokenizer, [source] * len(prefixes), self.decode,
                              device="cpu", segmenter=self.segmenter, prefixes=prefixes,
                              alternatives=alternatives)


def word_positions(completer: Completer, source: str, ref: str, alternatives: int) -> dict[str, int]:
    """Counts for one sentence: next words right, cut words continued / right, among alternatives."""
    words = ref.split()
    at_words = [" ".join(words[:j]) + (" " if j else "") for j in range(len(words))]
    done = completer.complete(source, at_words, alternatives)
    counts = {"words": len(words), "right": 0, "among": 0, "cut": 0, "cut_spelled": 0, "cut_right": 0}
    for j, (prefix, text, alts) in enumerate(zip(at_words, done.best(), done.alternatives())):
        typed = typed_prefix(completer.tokenizer, prefix)
        guess = word_at(typed, text) if typed is not None else clean(text.split(" ")[0])
        counts["right"] += guess == clean(words[j])
        counts["among"] += any(clean(t[len(prefix):].split(" ")[0]) == clean(words[j]) for t, _ in alts)
    cut = [(j, " ".join(words[:j] + [words[j][:max(1, len(words[j]) // 2)]]))
           for j in range(len(words)) if len(clean(words[j])) >= 2]
    if cut:
        done = completer.complete(source, [p for _, p in cut])
        for (j, prefix), (_, mine), text in zip(cut, done.per_text(), done.best()):
            typed = typed_prefix(completer.tokenizer, prefix)
            assert typed is not None
            # the segment the prefix ends in (a source of several sentences shares the prefix out)
            record = [r for r in mine if r.typed is not None][-1]
            counts["cut"] += 1
            counts["cut_spelled"] += record.found.hyps[0][0].casefold().startswith(record.typed.shown.casefold())
            counts["cut_right"] += text.startswith(prefix) and word_at(typed, text) == clean(words[j])
    return counts


def type_reference(completer: Completer, source: str, ref: str,
                   typed: list[tuple[str, str]] | None = None) -> tuple[int, list[float]]:
    """(keys pressed typing `ref` with completions, each completion's seconds); each (source,
    prefix) completed appended to `typed`."""
    keys, at, seconds = 0, 0, []
    while at < len(ref):
        if typed is not None:
            typed.append((source, ref[:at]))
        start = time.perf_counter()
        text = completer.complete(source, [ref[:at]]).best()[0]
        seconds.append(time.perf_counter() - start)
        keys += 1
        if text == ref:  # Enter: the whole rest
            break
        end = ref.find(" ", at + 1)
        end = len(ref) if end < 0 else end
        at = end + 1 if text[:end] == ref[:end] and (end == len(ref) or text[end:end + 1] == " ") else at + 1
    return keys, seconds


def paired_prefill(completer: Completer, typed: list[tuple[str, str]]) -> dict:
    """The keystrokes' completions again, each with the forced pieces decoded before the search
    (`mt.decode.prefill`) and step by step inside it, in alternating order: equal outputs, and
    their latency side by side."""
    seconds: dict[bool, list[float]] = {False: [], True: []}
    equal = 0
    for i, (source, prefix) in enumerate(typed):
        outs = {}
        for fast in (True, False) if i % 2 else (False, True):
            prefill.FAST_PREFIX = fast
            start = time.perf_counter()
            outs[fast] = completer.complete(source, [prefix]).best()[0]
            seconds[fast].append(time.perf_counter() - start)
        equal += outs[True] == outs[False]
    prefill.FAST_PREFIX = True
    ms = {fast: [1000 * t for t in times] or [0.0] for fast, times in seconds.items()}
    return {"completions": len(typed), "equal_outputs": equal,
            "step_by_step_p50_ms": round(statistics.median(ms[False]), 1),
            "step_by_step_mean_ms": round(statistics.mean(ms[False]), 1),
            "prefill_p50_ms": round(statistics.median(ms[True]), 1),
            "prefill_mean_ms": round(statistics.mean(ms[True]), 1),
            "ratio_of_means": round(statistics.mean(ms[True]) / max(statistics.mean(ms[False]), 1e-9), 3)}


def pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def markdown(results: dict) -> str:
    w, k = results["words"], results["keystrokes"]
    return "\n".join([
        f"# Completion replay ({results['split']}, {results['sentences']} sentences, beam {results['beam']})",
        "", "| measure | value |", "| --- | --- |",
        f"| word prediction accuracy | {w['accuracy_pct']}% of {w['positions']} |",
        f"| next word among {results['alternatives']} alternatives | {w['among_alternatives_pct']}% |",
        f"| cut words: completion starts with the typed letters | {w['cut_spelled_pct']}% of {w['cut']} |",
        f"| cut words: word completed right | {w['cut_accuracy_pct']}% |",
        f"| keystrokes saved | {k['saved_pct']}% ({k['sentences']} sentences) |",
        f"| latency per keystroke p50 / p95 | {k['p50_ms']} / {k['p95_ms']} ms |",
        f"| CPU | {results['cpu']} |", *_paired_rows(results.get("prefill")), ""])


def _paired_rows(paired: dict | None) -> list[str]:
    if not paired:
        return []
    return [f"| forced pieces before the search / step by step, p50 | {paired['prefill_p50_ms']} / "
            f"{paired['step_by_step_p50_ms']} ms (mean ratio {paired['ratio_of_means']}, "
            f"{paired['equal_outputs']} of {paired['completions']} outputs equal) |"]


ARGS: list[tuple[tuple[str, ...], dict]] = [
    (("-c", "--checkpoint"), {"type": Path, "required": True}),
    (("--mirror",), {"type": Path, "required": True, "help": "The Multi30k folder ({split}.{lang}.gz)."}),
    (("--split",), {"default": "test_2016_flickr"}),
    (("--out",), {"type": Path, "required": True}),
    (("--sentences",), {"type": int, "default": 100, "help": "sentences replayed word by word"}),
    (("--keystroke-sentences",), {"type": int, "default": 20, "help": "sentences typed key by key"}),
    (("--alternatives",), {"type": int, "default": 5}),
    (("--beam",), {"type": int, "default": None, "help": "default: the checkpoint's"}),
    (("--paired-prefill",), {"action": "store_true",
                             "help": "time the keystrokes' completions with and without mt.decode.prefill"}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flags, kwargs in ARGS:
        parser.add_argument(*flags, **kwargs)
    args = parser.parse_args()
    loaded = load_model([args.checkpoint], "cpu")
    data = loaded.config.data
    sources = list(read_lines(next(args.mirror.glob(f"{args.split}.{data.src_lang}*"))))[:args.sentences]
    refs = list(read_lines(next(args.mirror.glob(f"{args.split}.{data.tgt_lang}*"))))[:args.sentences]
    completer = Completer(loaded, args.beam)
    totals: dict[str, int] = {}
    for source, ref in zip(sources, refs):
        for key, value in word_positions(completer, source, ref, args.alternatives).items():
            totals[key] = totals.get(key, 0) + value
    keys, chars, seconds, typed = 0, 0, [], []
    for source, ref in list(zip(sources, refs))[:args.keystroke_sentences]:
        pressed, took = type_reference(completer, source, ref, typed)
        keys, chars, seconds = keys + pressed, chars + len(ref), seconds + took
    ms = sorted(1000 * s for s in seconds) or [0.0]
    results = {
        "split": args.split, "sentences": len(sources), "beam": completer.decode.search.beam,
        "alternatives": args.alternatives, "cpu": cpu_name(),
        "words": {"positions": totals.get("words", 0), "accuracy_pct": pct(totals.get("right", 0), totals.get("words", 0)),
                  "among_alternatives_pct": pct(totals.get("among", 0), totals.get("words", 0)),
                  "cut": totals.get("cut", 0), "cut_spelled_pct": pct(totals.get("cut_spelled", 0), totals.get("cut", 0)),
                  "cut_accuracy_pct": pct(totals.get("cut_right", 0), totals.get("cut", 0))},
        "keystrokes": {"sentences": min(len(sources), args.keystroke_sentences), "keys": keys, "characters": chars,
                       "saved_pct": pct(chars - keys, chars), "completions": len(seconds),
                       "p50_ms": round(statistics.median(ms), 1), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1)},
    }
    if args.paired_prefill:
        results["prefill"] = paired_prefill(completer, typed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (args.out / "results.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))


if __name__ == "__main__":
    main()
