"""Terminology by constrained decoding, measured as Dinu et al. 2019 and the WMT21 terminology task
measure it: a term test built from the test set itself, then term success, BLEU and speed with and
without the terms.

    python scripts/experiments/exp_glossary.py -c run/checkpoints/best.pt \\
        --mirror /work/shared/data/multi30k --split test_2016_flickr --out results/glossary

1. The test set is translated without constraints (beam 5, `--beam`).
2. Each sentence's candidate target terms are reference words the unconstrained output lacks
   (`mt.text.glossary.occurs`): content words (letters only, at least 4 of them, not in `STOP`).
   Its source term is the source word the model's own cross-attention aligns with it on the
   reference forced through the decoder (`mt.decode.align.align_words`, the alignment mt's HTML
   markup transfer uses), when that word is a content word too (letters only, at least 3, not in
   `STOP`). Chosen over a co-occurrence (Dice) dictionary: no training corpus is needed, and the
   pair is the model's own reading of that very sentence. One term per sentence: the longest
   candidate (the first of equal length), whose target pieces the vocabulary can write.
3. The terms are per-sentence glossaries (a word may need different translations in different
   sentences, so no global TSV is built): the search stage gets each sentence's own constraints
   (`translate_wanted`: `mt.decode.pipeline.Search`), so the library's routing decides, as for a
   glossary: sentences with a term take the constrained beam search (mt.decode.constrained), the
   others the plain search.

**Company terms** (`--terms FILE --rewrite FILE`, issue 65): the terms a company chose instead of
the usual words ("man -> Kerl"), which must replace the model's word, not join it:

    python scripts/experiments/exp_glossary.py -c run/checkpoints/best.pt --mirror /work/shared/data/multi30k \\
        --splits test_2017_flickr,test_2017_mscoco --terms scripts/experiments/data/company_terms_en_de.tsv \\
        --rewrite scripts/experiments/data/company_rewrite_de.tsv --out results/company

1. Sentences: those of `--splits` whose source holds a glossary term (`Glossary.match`: lemmas,
   so "women" holds "woman") and whose reference holds, for every term found, one of its usual
   words (`--rewrite`: `target term<TAB>usual word<TAB>replacement`, "Kerl<TAB>Männer<TAB>Kerle").
2. Their references rewritten: each usual word of a term found replaced by its replacement.
3. Translated (beam `--beam`) without the glossary, and with it in each way to keep a term
   (`mt.decode.terms.FIRST_PASS` and this script's `EXPERIMENTAL`): "off" (the term required, nothing avoided: the search before
   issue 65), "avoid" (the word a first greedy pass gave the term avoided), "place" (that too, and
   the output starts as the first pass does up to that word: the term takes its place), "both"
   ("place", and the word the model gives each source term translated alone avoided too), "swap"
   (the library's default: the search's own output with the model's word replaced by the term's
   form the model scores best, no constrained search where that word is found), and "alone" (no
   first pass: every word of 4 letters or more the model writes for each source term translated on
   its own avoided); `--ways` chooses among them.
4. For each: BLEU against the original and the rewritten references; term success (any form the
   glossary lists); the share of kept terms whose sentence also holds one of the term's usual
   words (the model's own word left beside the term); sentences/s; and on up to `--others`
   sentences of the splits without a term, whether the glossary (the way with the best rewritten
   BLEU) left them byte-identical; and, where the glossary gives its terms' gender and number (a
   third column, issue 72: `data/gender_terms_en_de.tsv`, whose terms change gender), the term
   forms whose determiner cannot agree, whose number is not the source word's, or that stand
   beside another noun (`mt.eval.terms.agreement`).

Reported (results.json, results.md in --out; the terms in terms.tsv: line, source, target): term
success unconstrained (0% by construction) and constrained; sacreBLEU (`mt.eval.evaluate.score`)
on the term sentences and on the whole set, with and without the terms; sentences/s of beam 5
with and without the terms on the term sentences; and whether every sentence without a term came
out byte-identical with and without the glossary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from mt.config import DecodeConfig
from mt.data.tokenizer import UNK_ID, Tokenizer
from mt.decode.align import align_words, aligner_for
from mt.decode.engine import Engine, NativeEngine
from mt.decode.steps import Search
from mt.decode.swap import alone_alignments, alone_sources, own_words, replacing
from mt.decode.terms import FIRST_PASS, TermConstraints, glue_pieces, term_constraints, terms_in
from mt.decode.translate import search_found, translate_lines
from mt.decode.wanted import Wanted
from mt.deploy.loading import load_model
from mt.eval.evaluate import score
from mt.eval.terms import agreement, term_success, usual_words_left
from mt.text.glossary import occurs, read_glossary
from mt.textio import read_lines

PUNCT = "\"'.,;:!?()[]{}«»„“”‚‘’-–—/…"
# Function words a length rule lets through (German, English, French: Multi30k's languages).
STOP = frozenset("""
eine einer einem einen eines dass diese dieser dieses diesem diesen sich nicht auch noch oder aber über unter
neben hinter zwischen während wird werden wurde sind sein seine seiner seinem seinen ihre ihrer ihrem ihren
etwas viele vielen einige einigen beim zwei drei vier fünf andere anderen anderer
with from that this there their they them have while into onto over under near next some each other
about behind front what which where when very just also being been were does
avec dans pour sont elle elles leur leurs deux trois quatre autre autres cette sous vers entre une des les
""".split())


def translate_wanted(engine: Engine, tokenizer: Tokenizer, lines: Sequence[str], decode: DecodeConfig,
                     wanted: Sequence[Wanted | list[list[int]]], glue: tuple[int, ...]) -> list[str]:
    """`lines` searched with each one's own constraints (`wanted[i]`: a `Wanted`, or target piece
    sequences each required; empty: the plain search), the search stage of the one translation path
    alone (`mt.decode.translate.search_found`)."""
    if len(lines) != len(wanted):
        raise ValueError(f"{len(lines)} lines but {len(wanted)} constraint lists")
    search = Search(list(lines), decode, None, list(range(len(lines))), list(wanted), glue)  # type: ignore[arg-type]
    return [found.hyps[0][0] for found in search_found(engine, tokenizer, search, rate=False)]


def content(word: str, shortest: int) -> str:
    """`word` without surrounding punctuation if it is a content word at least `shortest` letters long, else ''."""
    word = word.strip(PUNCT)
    return word if word.isalpha() and len(word) >= shortest and word.lower() not in STOP else ""


def pick_terms(sources: list[str], refs: list[str], hyps: list[str], alignments: list[list[int]],
               tokenizer: Tokenizer, limit: int) -> dict[int, tuple[str, str]]:
    """Line -> (source term, target term): step 2 of the module docstring."""
    terms: dict[int, tuple[str, str]] = {}
    for i, (source, ref, hyp, aligned) in enumerate(zip(sources, refs, hyps, alignments)):
        src_words = source.split()
        found = []
        for j, word in enumerate(ref.split()):
            target = content(word, 4)
            if not target or occurs(target, hyp) or not 0 <= aligned[j] < len(src_words):
                continue
            src = content(src_words[aligned[j]], 3)
            if src and occurs(src, source):
                found.append((-len(target), j, src, target))
        for _, _, src, target in sorted(found):
            pieces = tokenizer.encode_tgt([target])[0]
            if UNK_ID not in pieces and len(pieces) < limit:
                terms[i] = (src, target)
                break
    return terms


def timed(fn, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201 - (result, seconds)
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def run(a: argparse.Namespace) -> dict:
    loaded = load_model([a.checkpoint], a.device)
    if not isinstance(loaded.engine, NativeEngine):
        raise SystemExit(f"{a.checkpoint}: an `mt export` cannot align nor constrain; give the .pt checkpoint")
    pair = loaded.config.data.pairs[0]
    src_lang, tgt_lang = a.src or pair.src_lang, a.tgt or pair.tgt_lang
    tokenizer = loaded.tokenizer.for_target(tgt_lang if len(loaded.config.data.pairs) > 1 else None)
    sources = read_lines(a.mirror / f"{a.split}.{src_lang}.gz")
    refs = read_lines(a.mirror / f"{a.split}.{tgt_lang}.gz")
    if a.limit:
        sources, refs = sources[:a.limit], refs[:a.limit]
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=a.beam, n_best=1, sampling=False))
    engine, device = loaded.engine, loaded.device

    def translate(lines: list[str], wanted: list[list[list[int]]] | None = None) -> tuple[list[str], float]:
        if wanted is None:
            return timed(translate_lines, engine, tokenizer, lines, decode, device=device)
        return timed(translate_wanted, engine, tokenizer, lines, decode, wanted, glue)

    plain, _ = translate(sources)
    alignments = align_words(engine.model, tokenizer, sources, refs, device=device)
    terms = pick_terms(sources, refs, plain, alignments, tokenizer, engine.max_positions - 1)
    if not terms:
        raise SystemExit("no sentence has a term (reference content word missing from the output)")
    pieces = {i: tokenizer.encode_tgt([target])[0] for i, (_, target) in terms.items()}
    glue = glue_pieces(tokenizer, tgt_lang)
    kept, _ = translate(sources, [[pieces[i]] if i in terms else [] for i in range(len(sources))])
    rows = sorted(terms)
    term_src, term_ref = [sources[i] for i in rows], [refs[i] for i in rows]
    plain_terms, plain_s = translate(term_src)
    kept_terms, kept_s = translate(term_src, [[pieces[i]] for i in rows])
    others = [i for i in range(len(sources)) if i not in terms]
    other_src = [sources[i] for i in others]  # no term in them: the glossary must cost them nothing
    _, plain_others_s = translate(other_src)
    _, kept_others_s = translate(other_src, [[] for _ in others])

    def success(hyps: list[str]) -> float:
        return round(100.0 * sum(occurs(terms[i][1], hyp) for i, hyp in zip(rows, hyps)) / len(rows), 2)

    def bleu(hyps: list[str], references: list[str]) -> float:
        return round(score(hyps, references).bleu, 2)

    (a.out / "terms.tsv").write_text("".join(f"{i + 1}\t{s}\t{t}\n" for i, (s, t) in sorted(terms.items())),
                                     encoding="utf-8")
    return {
        "checkpoint": str(a.checkpoint), "split": a.split, "pair": f"{src_lang}-{tgt_lang}", "beam": a.beam,
        "sentences": len(sources), "term_sentences": len(rows), "device": str(device),
        "term_source": "cross-attention alignment of the reference forced through the model (mt.decode.align)",
        "term_success": {"unconstrained": success([plain[i] for i in rows]), "constrained": success(kept_terms)},
        "bleu": {"term_sentences": {"unconstrained": bleu(plain_terms, term_ref), "constrained": bleu(kept_terms, term_ref)},
                 "all": {"unconstrained": bleu(plain, refs), "constrained": bleu(kept, refs)}},
        "sentences_per_s": {"unconstrained": round(len(rows) / plain_s, 2), "constrained": round(len(rows) / kept_s, 2)},
        "without_terms": {"sentences": len(others), "identical": sum(plain[i] == kept[i] for i in others),
                          "sentences_per_s": {"unconstrained": round(len(others) / max(plain_others_s, 1e-9), 2),
                                              "with_glossary": round(len(others) / max(kept_others_s, 1e-9), 2)}},
        "same_as_alone": sum(kept[i] == hyp for i, hyp in zip(rows, kept_terms)),
    }


def markdown(r: dict) -> str:
    t, b, s = r["term_success"], r["bleu"], r["sentences_per_s"]
    same = r["without_terms"]
    return "\n".join([
        f"Terminology test on {r['split']} ({r['pair']}, {r['sentences']} sentences, {r['term_sentences']} with a term; "
        f"beam {r['beam']}, {r['device']}); terms from {r['term_source']}.", "",
        "| | without terms | with terms |", "|---|---:|---:|",
        f"| term success (%) | {t['unconstrained']:.2f} | {t['constrained']:.2f} |",
        f"| BLEU, term sentences | {b['term_sentences']['unconstrained']:.2f} | {b['term_sentences']['constrained']:.2f} |",
        f"| BLEU, all sentences | {b['all']['unconstrained']:.2f} | {b['all']['constrained']:.2f} |",
        f"| sentences/s, term sentences | {s['unconstrained']:.2f} | {s['constrained']:.2f} |", "",
        f"Sentences without a term byte-identical with and without the glossary: {same['identical']} of "
        f"{same['sentences']}; their sentences/s {same['sentences_per_s']['unconstrained']:.2f} without it, "
        f"{same['sentences_per_s']['with_glossary']:.2f} with it.", ""])


def rewrite_table(path: Path) -> dict[str, dict[str, str]]:
    """target term -> {usual word: its replacement}."""
    table: dict[str, dict[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            term, usual, replacement = line.split("\t")
            table.setdefault(term, {})[usual] = replacement
    return table


def alone_constraints(terms, engine, tokenizer, lines, decode, device):  # noqa: ANN001, ANN201
    """The "alone" way: each line's constraints avoiding what the model writes for its terms'
    source sides translated on their own (with the words' forms the vocabulary holds)."""
    sources = sorted({t.source for t in terms.glossary.terms})
    alone = dict(zip(sources, translate_lines(engine, tokenizer, sources, decode, device=device)))
    words = {s: [w for w in re.findall(r"\w+", out) if len(w) > 3] for s, out in alone.items()}
    wanted = []
    for line in lines:
        found = terms.glossary.match(line)
        avoid = [w for t in found for w in words[t.source] if not any(occurs(f, w) for f in terms.targets(t))]
        variants = [v for w in avoid for v in (w, w[:1].swapcase() + w[1:])]
        wanted.append(terms.wanted(found, tokenizer.encode_tgt(variants) if variants else []))
    return wanted, alone


def run_company(a: argparse.Namespace) -> dict:
    loaded = load_model([a.checkpoint], a.device)
    if not isinstance(loaded.engine, NativeEngine):
        raise SystemExit(f"{a.checkpoint}: give the .pt checkpoint (an export cannot align nor constrain)")
    pair = loaded.config.data.pairs[0]
    src_lang, tgt_lang = pair.src_lang, pair.tgt_lang
    tokenizer, engine, device = loaded.tokenizer, loaded.engine, loaded.device
    glossary = read_glossary(a.terms).for_pair(src_lang, tgt_lang)
    measured = glossary  # the agreement measure reads the grammar even when the translation may not
    if a.no_grammar:  # the ablation: translate as if the glossary had no grammar column
        glossary = dataclasses.replace(glossary, terms=tuple(dataclasses.replace(t, grammar=()) for t in glossary.terms))
    table = rewrite_table(a.rewrite)
    src, ref, rewritten, others = [], [], [], []
    for split in a.splits.split(","):
        for s, r in zip(read_lines(a.mirror / f"{split}.{src_lang}.gz"), read_lines(a.mirror / f"{split}.{tgt_lang}.gz")):
            found = glossary.match(s)
            if not found:
                others.append(s)
                continue
            if not all(any(occurs(u, r) for u in table.get(t.target, {})) for t in found):
                continue
            swap = {u: v for t in found for u, v in table.get(t.target, {}).items()}
            src.append(s)
            ref.append(r)
            rewritten.append(re.sub(r"\w+", lambda m, swap=swap: swap.get(m.group(), m.group()), r))
    others = others[:a.others]
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=a.beam, n_best=1, sampling=False))
    if not src:
        raise SystemExit("no sentence holds a term whose reference holds one of its usual words")
    plain, plain_s = timed(translate_lines, engine, tokenizer, src, decode, device=device)
    usual = {t: set(words) for t, words in table.items()}
    rows = {"plain": {"hyps": plain, "seconds": plain_s}}
    for way in [w for w in a.ways.split(",") if w != "alone"]:
        if way in EXPERIMENTAL:  # a greedy first pass, then the constrained search for every term sentence
            terms = term_constraints(glossary, tokenizer, engine, target_lang=tgt_lang, first_pass="off")
            started = time.perf_counter()
            wanted = experimental_wanted(way, terms, engine, tokenizer, src, decode)
            hyps = translate_wanted(engine, tokenizer, src, decode, wanted, terms.glue)
            rows[way] = {"hyps": hyps, "seconds": time.perf_counter() - started}
            continue
        terms = term_constraints(glossary, tokenizer, engine, target_lang=tgt_lang, first_pass=way)
        hyps, seconds = timed(translate_lines, engine, tokenizer, src, decode, device=device, glossary=terms)
        rows[way] = {"hyps": hyps, "seconds": seconds}
    alone: dict[str, str] = {}
    if "alone" in a.ways.split(","):
        terms = term_constraints(glossary, tokenizer, engine, target_lang=tgt_lang, first_pass="off")
        started = time.perf_counter()
        wanted, alone = alone_constraints(terms, engine, tokenizer, src, decode, device)
        hyps = translate_wanted(engine, tokenizer, src, decode, wanted, terms.glue)
        rows["alone"] = {"hyps": hyps, "seconds": time.perf_counter() - started}
    out = {"checkpoint": str(a.checkpoint), "pair": f"{src_lang}-{tgt_lang}", "splits": a.splits, "beam": a.beam,
           "sentences": len(src), "alone_translations": alone, "device": str(device),
           "threads": torch.get_num_threads(), "ways": ["plain", *rows.keys() - {"plain"}]}
    for name, row in rows.items():
        ts = term_success(src, row["hyps"], glossary)
        kept, beside = usual_words_left(row["hyps"], src, glossary, usual)
        out[name] = {"agreement": agreement(src, row["hyps"], measured, tgt_lang).to_dict(),
                     "bleu_original": round(score(row["hyps"], ref).bleu, 2),
                     "bleu_rewritten": round(score(row["hyps"], rewritten).bleu, 2),
                     "term_success": ts.to_dict(), "kept": kept, "beside": beside,
                     "beside_rate": round(100.0 * beside / kept, 2) if kept else None,
                     "sentences_per_s": round(len(src) / row["seconds"], 2)}
        (a.out / f"{name}.hyp").write_text("\n".join(row["hyps"]) + "\n", encoding="utf-8")
    (a.out / "ref.rewritten").write_text("\n".join(rewritten) + "\n", encoding="utf-8")
    if others:
        best = max((w for w in rows if w not in ("plain", "alone")), key=lambda w: out[w]["bleu_rewritten"])
        terms = term_constraints(glossary, tokenizer, engine, target_lang=tgt_lang,
                                 first_pass=best if best in FIRST_PASS else "off")
        plain_o = translate_lines(engine, tokenizer, others, decode, device=device)
        kept_o = translate_lines(engine, tokenizer, others, decode, device=device, glossary=terms)
        out["without_terms"] = {"sentences": len(others), "identical": sum(x == y for x, y in zip(plain_o, kept_o)),
                                "way": best}
    return out


EXPERIMENTAL = ("avoid", "place", "both")  # the first passes issue 65 compared and the library left out


def experimental_wanted(way: str, terms: TermConstraints, engine: NativeEngine, tokenizer: Tokenizer,
                        lines: list[str], decode: DecodeConfig) -> list[Wanted]:
    """Each line's constraints by an experimental first pass: a greedy translation of the lines
    holding a term (and, "both", of their terms alone); the word it gave each term avoided
    (`mt.decode.swap.replacing`), the output starting as it does up to that word ("place",
    "both"), the word the model gives the term alone avoided too ("both")."""
    occurrences = terms.occurrences(lines)
    wanted = [terms.wanted(terms_in(found)) for found in occurrences]
    rows = [i for i, w in enumerate(wanted) if w]
    held, found = [lines[i] for i in rows], [occurrences[i] for i in rows]
    sources = alone_sources([terms_in(f) for f in found]) if way == "both" else []
    greedy = dataclasses.replace(decode, search=dataclasses.replace(decode.search, beam=1, n_best=1))
    firsts = translate_lines(engine, tokenizer, [*held, *sources], greedy, device=engine.device)
    align = aligner_for(engine, tokenizer)
    assert align is not None  # run_company takes a .pt checkpoint
    outputs = firsts[len(held):]
    owns = own_words(terms.glossary, sources, outputs, alone_alignments(sources, outputs, align), last=True)
    alone = {source: own[0][1] for source, own in zip(sources, owns) if own}
    first = firsts[:len(held)]
    kept = replacing(terms, held, first, align(held, first) or [[] for _ in held], tokenizer, alone, found,
                     place=way != "avoid")
    for i, w in zip(rows, kept):
        wanted[i] = w
    return wanted


def company_markdown(r: dict) -> str:
    lines = [f"Company terms on {r['splits']} ({r['pair']}, {r['sentences']} sentences holding a term; beam "
             f"{r['beam']}, {r['device']}, {r['threads']} threads)", "",
             "| | BLEU (references) | BLEU (term-rewritten) | term success | own word left beside the term | "
             "sentences/s |", "|---|---:|---:|---:|---:|---:|"]
    for name in [w for w in ("plain", "off", *EXPERIMENTAL, "swap", "alone") if w in r.get("ways", ())]:
        x = r[name]
        ts = x["term_success"]
        lines.append(f"| {name} | {x['bleu_original']:.2f} | {x['bleu_rewritten']:.2f} | {ts['rate']:.2f}% "
                     f"({ts['kept']}/{ts['terms']}) | {x['beside_rate']}% ({x['beside']}/{x['kept']}) | "
                     f"{x['sentences_per_s']:.2f} |")
    if any(r[name]["agreement"]["forms"] for name in r.get("ways", ())):
        lines += ["", "Agreement, where the glossary gives the terms' gender and number (its third column):", "",
                  "| | term forms | determiners that cannot agree | number unlike the source's | "
                  "beside another noun |", "|---|---:|---:|---:|---:|"]
        for name in [w for w in ("plain", "off", *EXPERIMENTAL, "swap", "alone") if w in r.get("ways", ())]:
            x = r[name]["agreement"]
            lines.append(f"| {name} | {x['forms']} | {x['disagreeing_rate']}% ({x['disagreeing']}/{x['phrases']}) | "
                         f"{x['wrong_number_rate']}% ({x['wrong_number']}/{x['numbered']}) | "
                         f"{x['beside_noun_rate']}% ({x['beside_noun']}/{x['forms']}) |")
    if "without_terms" in r:
        w = r["without_terms"]
        lines += ["", f"Sentences without a term byte-identical with the glossary: {w['identical']} of {w['sentences']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-c", "--checkpoint", type=Path, required=True, help="an mt .pt checkpoint")
    p.add_argument("--mirror", type=Path, required=True, help="the Multi30k mirror folder ({split}.{lang}.gz)")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--terms", type=Path, help="company terms: the glossary (TSV, CSV or TBX); needs --rewrite")
    p.add_argument("--rewrite", type=Path, help="company terms: target term<TAB>usual word<TAB>replacement")
    p.add_argument("--splits", default="test_2017_flickr,test_2017_mscoco", help="company terms: the test sets")
    p.add_argument("--others", type=int, default=200, help="company terms: sentences without a term checked")
    p.add_argument("--ways", default="off,avoid,place,both,swap,alone", help="company terms: the ways compared")
    p.add_argument("--no-grammar", action="store_true",
                   help="company terms: translate without the glossary's grammar column, measure agreement with it")
    p.add_argument("--src", default="", help="source language (default: the checkpoint's first pair's)")
    p.add_argument("--tgt", default="", help="target language (default: the checkpoint's first pair's)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--limit", type=int, default=0, help="the first N sentences only (0 = all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.add_argument("--out", type=Path, required=True, help="results.json, results.md and terms.tsv go here")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.terms and not a.rewrite:
        raise SystemExit("--terms needs --rewrite (target term<TAB>usual word<TAB>replacement)")
    report = run_company(a) if a.terms else run(a)
    (a.out / "results.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    table = company_markdown(report) if a.terms else markdown(report)
    (a.out / "results.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
