"""What software and people send, measured on a checkpoint: protected spans (placeholders, URLs,
e-mail addresses, handles, hashtags, numbers, code) and case styles (ALL CAPS, Title Case, one
shouted word), with `decode.text.protect` / `decode.text.case` on (the default) and off.

    python scripts/experiments/exp_robust_input.py -c run/checkpoints/best.pt \\
        --mirror /work/shared/data/multi30k --split test_2016_flickr --out results/robust

1. App-like strings (`--strings`, default 140): test sentences with one or two spans inserted, the
   kinds and styles in turn (`SPANS`: every style `mt.text.protect` knows), at the sentence's
   start, between two words or before its full stop. Removing the spans gives the sentence back
   exactly. Reported: the share of spans that come back verbatim exactly once; chrF (sacreBLEU,
   `mt.eval.evaluate.score`) of the string's output against the output for the sentence without
   the spans, as it is and with the spans deleted from it (the words around them).
2. Case (`--case-sentences`, default 100, from line 200 on): each sentence in ALL CAPS and in Title Case (every
   word's first letter), and with its longest word shouted. Reported: chrF of the output against
   the output for the sentence as written, case-insensitive (the style is checked apart); the
   share returned in the input's style (all upper; every word starting upper case; the shouted
   word's translation in capitals somewhere).
3. The whole split translated with everything on and everything off: how many lines change, how
   many of them have something to protect or a case style, and how many without one changed (must
   be 0: byte-identical).

Everything is translated by `mt.decode.translate.translate_texts` (what `mt translate` runs), beam
from the checkpoint unless `--beam`. Written to --out: results.json, results.md, samples.tsv (the
app-like strings, their outputs on and off, and the outputs for the plain sentences).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from pathlib import Path

from mt.config import DecodeConfig
from mt.decode.protected import prepare_segments
from mt.decode.translate import translate_texts
from mt.deploy.loading import LoadedModel, load_model
from mt.eval.evaluate import score
from mt.text.segment import segmenter_for
from mt.textio import read_lines

# (kind, spans of that kind in the styles apps write them)
SPANS: list[tuple[str, list[str]]] = [
    ("placeholders", ["%s", "%d", "%1$s", "%(name)s", "{0}", "{name}", "{{ user }}", "${driver}", ":name",
                      "<user>", "%{count}", "{0:N2}", "%.2f", "{user.name}"]),
    ("urls", ["https://example.org/dogs", "http://www.test.de/a?b=1&c=2", "www.example.com/help",
              "https://en.wikipedia.org/wiki/Dog"]),
    ("emails", ["support@example.com", "jane.doe+news@mail.example.co.uk"]),
    ("handles", ["@bob", "@alice@mastodon.social"]),
    ("hashtags", ["#winter", "#dogs2024", "#StreetArt"]),
    ("numbers", ["42", "3.50", "1,000", "10:30", "2024-01-31", "50%"]),
    ("code", ["`ls -la`", "`git push`", "`x = 1`"]),
]


def insert(sentence: str, spans: list[str], rng: random.Random) -> str:
    """`sentence` with each span put at its start, between two words or before its final punctuation."""
    words = sentence.split()
    for span in spans:
        where = rng.choice(["start", "middle", "middle", "end"])
        if where == "start":
            words.insert(0, span)
        elif where == "end" and words[-1][-1:] in ".!?":
            words[-1] = words[-1][:-1]
            words += [span + sentence.rstrip()[-1]]
        else:
            words.insert(rng.randrange(1, len(words)), span)
    return " ".join(words)


def app_strings(sentences: list[str], count: int, seed: int) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(string, the sentence without the spans, [(kind, span)]): kinds and styles in turn, one or two spans."""
    rng = random.Random(seed)
    styles = [(kind, span) for kind, spans in SPANS for span in spans]
    out = []
    for i in range(count):
        sentence = sentences[i % len(sentences)]
        chosen = [styles[i % len(styles)]] + ([styles[(i * 7 + 3) % len(styles)]] if i % 3 == 0 else [])
        out.append((insert(sentence, [span for _, span in chosen], rng), sentence, chosen))
    return out


def chrf(hyps: list[str], refs: list[str], lowercase: bool = False) -> float:
    if lowercase:
        hyps, refs = [h.lower() for h in hyps], [r.lower() for r in refs]
    return round(score(hyps, refs).chrf, 2)


def title(sentence: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in sentence.split())


def shout(sentence: str) -> tuple[str, str]:
    """The sentence with its longest word (letters only, at least 4) in capitals, and that word."""
    words = sentence.split()
    at = max(range(len(words)), key=lambda i: (words[i].strip(".,").isalpha() * len(words[i])))
    words[at] = words[at].upper()
    return " ".join(words), words[at]


def translate(loaded: LoadedModel, texts: list[str], decode: DecodeConfig) -> list[str]:
    return translate_texts(loaded.engine, loaded.tokenizer, texts, decode, device=loaded.device,
                           segmenter=segmenter_for(loaded.config.data.src_lang))


def spans_section(loaded: LoadedModel, strings: list, on: DecodeConfig, off: DecodeConfig) -> tuple[dict, list]:
    texts = [s for s, _, _ in strings]
    plain = translate(loaded, [p for _, p, _ in strings], on)
    out_on, out_off = translate(loaded, texts, on), translate(loaded, texts, off)
    report: dict = {"strings": len(strings), "spans": sum(len(c) for _, _, c in strings)}
    for name, outs in (("on", out_on), ("off", out_off)):
        kept = [out.count(span) == 1 for out, (_, _, chosen) in zip(outs, strings) for _, span in chosen]
        stripped = []
        for out, (_, _, chosen) in zip(outs, strings):
            for _, span in chosen:
                out = out.replace(span, " ")
            stripped.append(" ".join(out.split()))
        by_kind: dict[str, list[bool]] = {}
        for ok, (kind, _) in zip(kept, [c for _, _, chosen in strings for c in chosen]):
            by_kind.setdefault(kind, []).append(ok)
        report[name] = {"kept_exactly_once_pct": round(100 * sum(kept) / len(kept), 2),
                        "kept_by_kind_pct": {k: round(100 * sum(v) / len(v), 1) for k, v in by_kind.items()},
                        "chrf_vs_plain": chrf(outs, plain), "chrf_words_vs_plain": chrf(stripped, plain)}
    rows = [(s, p, a, b, c) for (s, p, _), a, b, c in zip(strings, out_on, out_off, plain)]
    return report, rows


def case_section(loaded: LoadedModel, sentences: list[str], on: DecodeConfig, off: DecodeConfig) -> tuple[dict, list]:
    plain = translate(loaded, sentences, on)
    shouted = [shout(s) for s in sentences]
    forms = {"upper": [s.upper() for s in sentences], "title": [title(s) for s in sentences],
             "shouted": [s for s, _ in shouted]}
    report: dict = {"sentences": len(sentences)}
    samples = []
    for name, texts in forms.items():
        report[name] = {}
        for setting, decode in (("on", on), ("off", off)):
            outs = translate(loaded, texts, decode)
            if name == "upper":
                styled = [o == o.upper() and any(c.isalpha() for c in o) for o in outs]
            elif name == "title":
                styled = [all(not w[:1].isalpha() or w[:1].isupper() for w in o.split()) for o in outs]
            else:
                styled = [any(len(w.strip(".,!?")) >= 3 and w.strip(".,!?").isupper() for w in o.split())
                          for o in outs]
            report[name][setting] = {"chrf_vs_sentence_case_ci": chrf(outs, plain, lowercase=True),
                                     "style_returned_pct": round(100 * sum(styled) / len(styled), 1)}
            if setting == "on":
                samples += [(name, t, o, p) for t, o, p in zip(texts[:3], outs[:3], plain[:3])]
    return report, samples


def identity_section(loaded: LoadedModel, lines: list[str], refs: list[str], on: DecodeConfig,
                     off: DecodeConfig) -> dict:
    out_on, out_off = translate(loaded, lines, on), translate(loaded, lines, off)
    seg = segmenter_for(loaded.config.data.src_lang)
    applies = [not all(p.identity for p in prepare_segments(seg.split(line).segments, loaded.tokenizer, on))
               for line in lines]
    changed = [a != b for a, b in zip(out_on, out_off)]
    return {"lines": len(lines), "something_applies": sum(applies), "changed": sum(changed),
            "changed_where_nothing_applies": sum(c and not a for c, a in zip(changed, applies)),
            "changed_examples": [(line, b, a) for line, a, b, c in zip(lines, out_on, out_off, changed) if c][:5],
            "bleu_on_vs_off": round(score(out_on, out_off).bleu, 2),
            "test_bleu_on": round(score(out_on, refs).bleu, 2), "test_bleu_off": round(score(out_off, refs).bleu, 2),
            "changed_chrf_vs_ref_on": chrf([o for o, c in zip(out_on, changed) if c], [r for r, c in zip(refs, changed) if c]),
            "changed_chrf_vs_ref_off": chrf([o for o, c in zip(out_off, changed) if c],
                                            [r for r, c in zip(refs, changed) if c])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--checkpoint", type=Path, required=True)
    parser.add_argument("--mirror", type=Path, required=True, help="The Multi30k folder ({split}.{lang}.gz).")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--strings", type=int, default=140)
    parser.add_argument("--case-sentences", type=int, default=100)
    parser.add_argument("--beam", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    loaded = load_model([args.checkpoint], "cpu")
    src = loaded.config.data.src_lang
    lines = list(read_lines(next(args.mirror.glob(f"{args.split}.{src}*"))))
    refs = list(read_lines(next(args.mirror.glob(f"{args.split}.{loaded.config.data.tgt_lang}*"))))
    on = loaded.config.decode
    if args.beam is not None:
        on = dataclasses.replace(on, search=dataclasses.replace(on.search, beam=args.beam))
    off = dataclasses.replace(on, text=dataclasses.replace(on.text, protect=(), case=False, ending=False))
    strings = app_strings(lines, args.strings, args.seed)
    spans, rows = spans_section(loaded, strings, on, off)
    case_lines = lines[200:200 + args.case_sentences] or lines[:args.case_sentences]  # other lines than the strings'
    case, samples = case_section(loaded, case_lines, on, off)
    identity = identity_section(loaded, lines, refs, on, off)
    results = {"checkpoint": str(args.checkpoint), "split": args.split, "beam": on.search.beam, "spans": spans,
               "case": case, "identity": identity, "seconds": round(time.perf_counter() - started, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with (args.out / "samples.tsv").open("w", encoding="utf-8") as f:
        f.write("string\tsentence\toutput_on\toutput_off\toutput_for_sentence\n")
        f.writelines("\t".join(row) + "\n" for row in rows)
        f.writelines("\t".join(("case:" + name, text, out, "", plain)) + "\n" for name, text, out, plain in samples)
    (args.out / "results.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))


def markdown(r: dict) -> str:
    s, c, i = r["spans"], r["case"], r["identity"]
    lines = [f"{r['split']}, beam {r['beam']}, {s['strings']} app-like strings with {s['spans']} spans", "",
             "| | spans back verbatim once | chrF vs sentence's output | chrF, words only |", "|---|---|---|---|"]
    lines += [f"| protect {k} | {s[k]['kept_exactly_once_pct']}% | {s[k]['chrf_vs_plain']} | "
              f"{s[k]['chrf_words_vs_plain']} |" for k in ("on", "off")]
    lines += ["", "| case form | chrF vs sentence case (case-insensitive), on / off | style returned, on / off |",
              "|---|---|---|"]
    lines += [f"| {name} | {c[name]['on']['chrf_vs_sentence_case_ci']} / {c[name]['off']['chrf_vs_sentence_case_ci']} "
              f"| {c[name]['on']['style_returned_pct']}% / {c[name]['off']['style_returned_pct']}% |"
              for name in ("upper", "title", "shouted")]
    lines += ["", f"{r['split']}: {i['lines']} lines, something applies in {i['something_applies']}, "
              f"{i['changed']} changed, {i['changed_where_nothing_applies']} changed where nothing applies; "
              f"test BLEU {i['test_bleu_on']} on, {i['test_bleu_off']} off; chrF of the changed lines against "
              f"their references {i['changed_chrf_vs_ref_on']} on, {i['changed_chrf_vs_ref_off']} off", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
