"""What a glossary costs on the sentences that hold its terms: `translate_lines` with and without it.

The sentences of `--splits` whose source holds a term of `--terms` (`Glossary.match`) are
translated plainly and with the glossary in each `--ways` (`mt.decode.terms.FIRST_PASS`), in
alternating order, `--repeat` times each; the least wall and CPU time of each is kept (on a
shared machine other jobs only add time; CPU time, this process's, is the steadier with one
thread) and printed with its ratio to plain: the speed bound of issue 65 ("≥ 0.5× plain").

    .venv/bin/python scripts/bench/bench_glossary.py -c runs/multi30k_en_de/checkpoints/averaged.pt \\
        --mirror ../shared/data/multi30k --terms scripts/experiments/data/company_terms_en_de.tsv
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import time
from pathlib import Path

import torch

from mt.decode.terms import FIRST_PASS, term_constraints
from mt.decode.translate import translate_lines
from mt.deploy.loading import load_model
from mt.device import cpu_name
from mt.text.glossary import read_glossary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-c", "--checkpoint", type=Path, required=True)
    p.add_argument("--mirror", type=Path, required=True, help="a folder of SPLIT.LANG.gz files")
    p.add_argument("--splits", default="test_2017_flickr,test_2017_mscoco")
    p.add_argument("--terms", type=Path, required=True, help="a glossary (TSV, CSV or TBX)")
    p.add_argument("--ways", default="swap", help=f"comma-separated, of {', '.join(FIRST_PASS)}")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    loaded = load_model([a.checkpoint], "cpu")
    pair = loaded.config.data.pairs[0]
    glossary = read_glossary(a.terms).for_pair(pair.src_lang, pair.tgt_lang)
    lines = [line for split in a.splits.split(",")
             for line in gzip.open(a.mirror / f"{split}.{pair.src_lang}.gz", "rt", encoding="utf-8").read().splitlines()
             if glossary.match(line)]
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=a.beam, n_best=1, sampling=False))
    runs = {"plain": None} | {way: term_constraints(glossary, loaded.tokenizer, loaded.engine,
                                                    target_lang=pair.tgt_lang, first_pass=way)
                              for way in a.ways.split(",")}
    translate_lines(loaded.engine, loaded.tokenizer, lines[:20], decode, device="cpu")  # warm up
    best = {name: (float("inf"), float("inf")) for name in runs}
    for _ in range(a.repeat):
        for name, terms in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            translate_lines(loaded.engine, loaded.tokenizer, lines, decode, device="cpu", glossary=terms)
            taken = (time.perf_counter() - wall, time.process_time() - cpu)
            best[name] = (min(best[name][0], taken[0]), min(best[name][1], taken[1]))
    print(f"{len(lines)} sentences holding a term, beam {a.beam}, {a.threads} thread(s), {cpu_name()}")
    for name, (wall, cpu) in best.items():
        print(f"{name:6s} {len(lines) / wall:7.2f} sentences/s (wall {wall:.2f} s, cpu {cpu:.2f} s) "
              f"{best['plain'][0] / wall:.2f}x plain by wall, {best['plain'][1] / cpu:.2f}x by cpu")


if __name__ == "__main__":
    main()
