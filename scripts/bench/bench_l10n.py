"""Localisation files through a model, checked as translators check them, and the cost of a hostile line.

    python scripts/bench/bench_l10n.py -c runs/multi30k_en_de/checkpoints/averaged.pt \
        --po tests/data/l10n/mousepad.de.po --symbols 10000

1. The human catalogue `--po` is made its own template (every msgstr emptied, the header a
   `.pot`'s), translated by `translate_document` with the callables `mt translate` builds
   (`document_translators`, the checkpoint's decode settings, `--beam` to change it) into the
   checkpoint's target language, and both files are checked with translate-toolkit's
   `pofilter --gnome` (fuzzy, untranslated, unchanged and blank not counted) and
   `msgfmt --check --check-accelerators=_`: failures per check, mt against the human translation.
   chrF (sacreBLEU) of mt's messages against the human ones is printed beside them, accelerators
   out of both: a baseline for the model, not a target.
2. A line of `--symbols` characters of `[` and one word, as a `.txt` document, against the word
   alone: seconds and the source pieces the model searched (read by wrapping the engine's search);
   with `--file-mib`, a document of that many MiB of such lines against its words alone.

One torch thread (`--threads`); the CPU is printed with the figures.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mt.device import cpu_name
from mt.text.documents import translate_document
from mt.text.limits import DocumentLimits
from mt.text.pot import template_of

CHECKS = ("accelerators", "brackets", "numbers", "acronyms", "filepaths", "endpunc", "doublewords", "puncspacing",
          "startcaps")


def pofilter(path: Path, language: str) -> Counter[str]:
    """Failures per check of `pofilter --gnome` on `path` (the issue's measure)."""
    out = path.with_suffix(".pofilter.po")
    subprocess.run([sys.executable, "-m", "translate.filters.pofilter", "--gnome", f"--language={language}",
                    "--progress=none", "--excludefilter=isfuzzy", "--excludefilter=untranslated",
                    "--excludefilter=unchanged", "--excludefilter=blank", "-i", str(path), "-o", str(out)],
                   check=True, capture_output=True)
    return Counter(re.findall(r"^# \(pofilter\) (\w+):", out.read_text() if out.exists() else "", re.M))


def msgfmt_errors(path: Path) -> int:
    found = subprocess.run(["msgfmt", "--check", "--check-accelerators=_", "--use-fuzzy", "-o", "/dev/null", str(path)],
                           capture_output=True, text=True)
    return 0 if found.returncode == 0 else max(1, found.stderr.count(f"{path}:"))


def chrf(human: Path, ours: Path) -> tuple[float, int]:
    """chrF of mt's singular messages against the human ones (accelerators out of both), and how many."""
    import polib
    import sacrebleu

    theirs = {(e.msgctxt, e.msgid): e.msgstr for e in polib.pofile(str(human)) if e.msgstr and not e.fuzzy}
    pairs = [(e.msgstr.replace("_", ""), theirs[(e.msgctxt, e.msgid)].replace("_", ""))
             for e in polib.pofile(str(ours)) if (e.msgctxt, e.msgid) in theirs and e.msgstr]
    return sacrebleu.corpus_chrf([p for p, _ in pairs], [[r for _, r in pairs]]).score, len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--checkpoint", type=Path, required=True)
    parser.add_argument("--po", type=Path, default=Path("tests/data/l10n/mousepad.de.po"))
    parser.add_argument("--symbols", type=int, default=10_000)
    parser.add_argument("--file-mib", type=float, default=0.0,
                        help="also a .txt document of this many MiB of such lines, against its words alone")
    parser.add_argument("--beam", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="folder for the translated catalogue (a temp one)")
    args = parser.parse_args()

    import torch

    from mt.commands.decoding import load_for_target
    from mt.commands.translate import document_translators
    from mt.decode.overrides import DecodeOverrides, apply_overrides
    from mt.text.segment import segmenter_for

    torch.set_num_threads(args.threads)
    loaded, tokenizer = load_for_target([args.checkpoint], "cpu", None)
    decode = apply_overrides(loaded.config.decode, DecodeOverrides(beam=args.beam))  # as `mt translate --beam`
    pair = loaded.config.data.pairs[0]
    engine, searched = loaded.engine, [0]
    search = engine.search_ids

    def counted(src_ids, *a, **k):  # the source pieces each search reads: the work, without a clock
        searched[0] += sum(len(ids) for ids in src_ids)
        return search(src_ids, *a, **k)

    engine.search_ids = counted  # type: ignore[method-assign]
    texts, html = document_translators(engine, tokenizer, decode, loaded.device, segmenter_for(pair.src_lang,
                                                                                               pair.tgt_lang))
    print(f"CPU: {cpu_name()}, {args.threads} torch thread(s); beam {decode.search.beam}; {args.checkpoint}")
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="bench_l10n_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    ours, human = out_dir / f"mt.{pair.tgt_lang}.po", out_dir / f"human.{pair.tgt_lang}.po"
    human.write_bytes(args.po.read_bytes())
    start = time.perf_counter()
    ours.write_bytes(translate_document(template_of(args.po.read_bytes()), "po", texts, html, DocumentLimits(),
                                        target=pair.tgt_lang))
    print(f"{args.po.name}: translated in {time.perf_counter() - start:.1f} s -> {ours}")
    theirs_found, ours_found = pofilter(human, pair.tgt_lang), pofilter(ours, pair.tgt_lang)
    print("\n| pofilter --gnome check | mt | the human translation |\n| --- | ---: | ---: |")
    for check in sorted(set(theirs_found) | set(ours_found), key=lambda c: (-ours_found[c], c)):
        bold = "**" if check in CHECKS else ""
        print(f"| {bold}{check}{bold} | {ours_found[check]} | {theirs_found[check]} |")
    print(f"| all | {sum(ours_found.values())} | {sum(theirs_found.values())} |")
    print(f"\nmsgfmt --check --check-accelerators=_ errors: mt {msgfmt_errors(ours)}, human {msgfmt_errors(human)}")
    score, n = chrf(human, ours)
    print(f"chrF against the human translation: {score:.1f} ({n} messages)")

    for label, line in (("one word", "dogs\n"), (f"{args.symbols:,} symbols and the word",
                                                 "[" * (args.symbols - 5) + " dogs\n")):
        searched[0] = 0
        start = time.perf_counter()
        translate_document(line.encode(), "txt", texts, html, DocumentLimits())
        print(f"{label}: {time.perf_counter() - start:.2f} s, {searched[0]} source pieces searched")
    if args.file_mib:
        line = "[" * (args.symbols - 5) + " dogs"
        lines = max(1, int(args.file_mib * 2**20) // (len(line) + 2))
        for label, text in (("its words alone", "dogs\n\n" * lines),
                            (f"{lines * (len(line) + 2) / 2**20:.1f} MiB of such lines", (line + "\n\n") * lines)):
            searched[0] = 0
            start = time.perf_counter()
            translate_document(text.encode(), "txt", texts, html, DocumentLimits())
            print(f"{lines} paragraphs, {label}: {time.perf_counter() - start:.1f} s, {searched[0]} source pieces searched")


if __name__ == "__main__":
    main()
