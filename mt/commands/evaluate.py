"""`mt evaluate`: flag checks, the BLEU tokenizer, and the scores, samples and tables it prints
(the work is mt.eval.evaluate's; the decoding flags are mt.commands.decoding's)."""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mt.commands.decoding import glossary_for_model, read_glossary_flag
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.eval.bleu import bleu_tokenizer_for
from mt.eval.evaluate import (
    EvalSet,
    Scores,
    default_out_dir,
    eval_sets,
    evaluate_set,
    read_file_set,
    score_files,
    write_report,
)
from mt.text.glossary import Glossary
from mt.textio import read_lines

# --------------------------------------------------------------------------- mt evaluate


def _print_scores(scores: Scores) -> None:
    print(f"  BLEU {scores.bleu:6.2f}  {scores.bleu_signature}")
    print(f"       {scores.bleu_detail}")
    print(f"  chrF {scores.chrf:6.2f}  {scores.chrf_signature}")
    print(f"  TER  {scores.ter:6.2f}  {scores.ter_signature}")


def _print_samples(test: EvalSet, hyps: list[str], samples: int) -> None:
    picked = sorted(random.Random(0).sample(range(len(hyps)), min(samples, len(hyps))))
    for i in picked:
        print(f"  [{i + 1}] SRC: {test.src[i]}")
        print(f"       REF: {test.ref[i]}")
        print(f"       HYP: {hyps[i]}")


def _print_table(rows: list[tuple[str, Scores]]) -> None:
    width = max(len("split"), *(len(label) for label, _ in rows))
    print(f"{'split':<{width}} | {'BLEU':>6} | {'chrF':>6} | {'TER':>6}")
    print(f"{'-' * width}-+-{'-' * 6}-+-{'-' * 6}-+-{'-' * 6}")
    for label, s in rows:
        print(f"{label:<{width}} | {s.bleu:6.2f} | {s.chrf:6.2f} | {s.ter:6.2f}")


def _suffix_language(path: Path) -> str:
    """'test.ja' -> 'ja', 'newstest.zh.gz' -> 'zh', 'refs.txt' -> 'txt' (which maps to 13a)."""
    suffixes = [x.lstrip(".") for x in path.suffixes if x != ".gz"]
    return suffixes[-1] if suffixes else ""


def _compare(systems: list[tuple[str, list[str]]], refs: list[str], tokenize: str, out: Path) -> None:
    """Print and write (`out`, JSON) the paired bootstrap comparison of `systems` (the first the
    baseline)."""
    from mt.eval.compare import paired_bootstrap

    result = paired_bootstrap(systems, refs, tokenize=tokenize)
    print(f"paired bootstrap resampling ({result.samples} resamples, sacreBLEU), "
          f"{result.sentences} sentences; p against the first system:")
    for line in result.table():
        print(f"  {line}")
    print(f"  BLEU {result.bleu_signature}")
    print(f"  chrF {result.chrf_signature}")
    write_report(out, result.to_dict())
    print(f"  report: {out}")


def _score_hyps(hyps: Sequence[Path], ref: Path | None, out_dir: Path | None, tokenize: str | None) -> None:
    """--hyp (repeatable) with --ref: score each file; two or more are compared (the first is the
    baseline)."""
    if ref is None:
        raise MTError("--hyp needs --ref: the reference translations to score against")
    bleu_tokenize = bleu_tokenizer_for(_suffix_language(ref), tokenize or "")
    # Every file is read before any report is written: a missing or unreadable one fails alone.
    texts, refs = [read_lines(h) for h in hyps], read_lines(ref)
    for hyp in hyps:
        result = score_files(hyp, ref, out_dir, bleu_tokenize=bleu_tokenize)
        print(f"{hyp} ({result.sentences} sentences) against {ref}")
        _print_scores(result.scores)
        print(f"  report: {result.report_path}")
    if len(hyps) > 1:
        _compare(list(zip(map(str, hyps), texts)), refs, bleu_tokenize,
                 (out_dir or Path("eval")) / "comparison.json")


def evaluate_command(
    checkpoints: Sequence[Path],
    *,
    splits: Sequence[str],
    src: Path | None,
    ref: Path | None,
    hyp: Sequence[Path] = (),
    out_dir: Path | None,
    overrides: DecodeOverrides,
    samples: int,
    device: str,
    tokenize: str | None = None,
    target_lang: str | None = None,
    compare: Sequence[str] = (),
    glossary: Path | None = None,
) -> None:
    """`mt evaluate`: translate splits of the checkpoint's corpus (--split, repeatable) or a
    --src file, score against the references, print scores with signatures (a table when there
    are several sets) and `samples` example translations, and write `<label>.<ckpt>.beam<K>.hyp`
    plus a JSON report beside it in `out_dir`. Several checkpoints are evaluated as one ensemble
    (`<ckpt>` joins their names with '+'). With --hyp/--ref only scores (no checkpoint); two or
    more --hyp files, or --compare models beside -c, are compared with sacreBLEU's paired
    bootstrap resampling (mt.eval.compare; the first system is the baseline).
    BLEU's tokenizer: `tokenize` (--tokenize) if given, else the checkpoint's `decode.bleu_tokenize`,
    else chosen for its `data.tgt_lang`; with --hyp/--ref the language is the reference file's
    suffix (`test.ja` -> ja). A multi-pair model scores each --split in every pair that has it (only
    the pairs into `target_lang` when given), labelled `en-fr/test_2016_flickr`, each with its tag
    and its target language's BLEU tokenizer; --src/--ref need --target-lang when it has several targets.
    With `glossary` (--glossary terms.tsv) sentences holding a term are translated keeping it, and
    each set's term success (mt.eval.terms) is printed beside BLEU and written to its report. Each set's
    sentence confidences are ranked against sentence chrF (Spearman, printed and in the report).
    `overrides`: the decode flags (--beam, --alpha, --precision and the loop guard's;
    `mt.decode.overrides`)."""
    if samples < 0:
        raise MTError(f"--samples: must be at least 0, got {samples}")
    if hyp:
        if checkpoints or splits or src is not None or compare:
            raise MTError("--hyp scores existing translations; do not combine it with --checkpoint, "
                          "--compare, --split or --src")
        _score_hyps(hyp, ref, out_dir, tokenize)
        return
    if not checkpoints:
        raise MTError("give --checkpoint with --split or --src/--ref, "
                      "or --hyp/--ref to score existing translations")
    if (src is None) != (ref is None):
        raise MTError("--src and --ref go together (or use --split, or --hyp with --ref)")
    if not splits and src is None:
        raise MTError("nothing to evaluate: give --split NAME (repeatable) or --src/--ref")

    # User files are read (and checked) before the slower model load.
    files = [read_file_set(src, ref)] if src is not None and ref is not None else []
    terms_file = read_glossary_flag(glossary)
    systems = [list(checkpoints)] + [[Path(p) for p in c.split(",") if p] for c in compare]
    outputs: list[dict[str, tuple[list[str], EvalSet, str]]] = []
    for i, system in enumerate(systems):
        where = out_dir / f"system{i + 1}" if out_dir is not None and compare else out_dir
        outputs.append(_evaluate_system(system, splits, files, where, overrides, samples=samples,
                                        device=device, tokenize=tokenize, target_lang=target_lang,
                                        glossary=terms_file))
    if compare:
        names = ["+".join(str(p) for p in system) for system in systems]
        for label, (_, test, bleu_tokenize) in outputs[0].items():
            if any(label not in o for o in outputs[1:]):
                raise MTError(f"--compare: '{label}' is not a test set of every model")
            print()
            print(f"{label}:")
            base = out_dir if out_dir is not None else default_out_dir(checkpoints[0])
            _compare([(n, o[label][0]) for n, o in zip(names, outputs)], test.ref, bleu_tokenize,
                     base / f"comparison.{label.replace('/', '_')}.json")


def _evaluate_system(checkpoints: Sequence[Path], splits: Sequence[str], files: list[EvalSet],
                     out_dir: Path | None, overrides: DecodeOverrides, *, samples: int, device: str,
                     tokenize: str | None, target_lang: str | None, glossary: Glossary | None = None,
                     ) -> dict[str, tuple[list[str], EvalSet, str]]:
    """Translate and score every set with one model (an ensemble of `checkpoints`); prints as it goes
    and returns each set's (hypotheses, set, BLEU tokenizer) by label."""
    started = time.perf_counter()
    loaded = load_model(checkpoints, device)
    load_s = time.perf_counter() - started
    model, tokenizer, cfg, dev = loaded.engine, loaded.tokenizer, loaded.config, loaded.device
    tests = eval_sets(cfg, tokenizer, splits, files, target_lang, tokenize)
    decode = apply_overrides(cfg.decode, dataclasses.replace(overrides, n_best=1))  # scores the 1-best
    pair = next((p for p in cfg.data.pairs if target_lang in (None, p.tgt_lang)), cfg.data.pairs[0])
    terms = glossary_for_model(glossary, loaded, tokenizer, (pair.src_lang, pair.tgt_lang), decode)
    out_dir = out_dir if out_dir is not None else default_out_dir(checkpoints[0])
    shas, inits = list(loaded.provenance.sha256s), list(loaded.provenance.init_from)
    for path, init in zip(checkpoints, inits):
        if init is not None:
            sha = f"sha256 {init['sha256'][:12]}, " if init.get("sha256") else ""
            update = f"update {init['update']}" if init.get("update") is not None else "update unknown"
            print(f"{path}: fine-tuned from {init['path']} ({sha}{update})")
    s = decode.search
    how = f"sampling (seed {s.seed})" if s.sampling else f"beam {s.beam}, alpha {s.alpha}"
    if len(checkpoints) > 1:
        how += f", ensemble of {len(checkpoints)} checkpoints"
    rows: list[tuple[str, Scores]] = []
    out: dict[str, tuple[list[str], EvalSet, str]] = {}
    for test, tokenizer, bleu_tokenize in tests:
        result = evaluate_set(model, tokenizer, test, decode, device=dev, checkpoints=checkpoints,
                              checkpoint_sha256s=shas, load_s=load_s, out_dir=out_dir,
                              progress=sys.stderr.isatty(), bleu_tokenize=bleu_tokenize, init_from=inits,
                              glossary=terms)
        n, seconds = len(result.hyps), result.translate_s
        print(f"{test.label}: {n} sentences in {seconds:.1f} s ({n / max(seconds, 1e-9):.1f} sent/s), {how}")
        _print_scores(result.scores)
        if result.terms is not None:
            print(f"  terms {result.terms.line()}")
        if result.confidence is not None:
            c = result.confidence
            calibration = "" if c["calibrated"] else " (default calibration)"
            print(f"  confidence: Spearman {c['spearman_chrf']:.3f} with sentence chrF; mean {c['mean']}, "
                  f"{c['low_share']:.1%} below {c['low']}{calibration}")
        if result.placement is not None:
            p = result.placement
            print(f"  term placement: {p['exclusive']} of {p['slots']} usual words replaced by the term; "
                  f"term sentences' BLEU {p['bleu_original']:.2f} (references), "
                  f"{p['bleu_rewritten']:.2f} (term-rewritten)")
        print(f"  hypotheses: {result.hyp_path}  report: {result.report_path}")
        if samples:
            _print_samples(test, result.hyps, samples)
        rows.append((test.label, result.scores))
        out[test.label] = (result.hyps, test, bleu_tokenize)
    if len(rows) > 1:
        print()
        _print_table(rows)
    return out
