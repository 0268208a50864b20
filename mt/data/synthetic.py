"""Synthetic training data (back-translation, distillation) mixed with the real pairs.

`data.synthetic` lists corpus folders of synthetic pairs, each holding the text-format files
`train.{src_lang}` and `train.{tgt_lang}` (what `mt backtranslate` and `mt distill` write; tsv
and jsonl `train.tsv` / `train.jsonl` are read too). `mt prepare` encodes them after the real
training split into the same `train` arrays, filtered by the same length limits (empty pairs,
`data.max_len`, `data.max_len_ratio`, `model.max_positions`) but not by `clean.rules` (a synthetic
side is a model's output: the language-ID, copy and number rules would judge the model, not
the data), and records them in the manifest (`synthetic`: sentences, tag id, folders); the real
pairs come first.

With `data.synthetic_tag` (the default) every synthetic source starts with the tag `<BT>`
(Caswell et al. 2019, "Tagged Back-Translation"): a sentencepiece *control* piece of the source
model, like the `<2xx>` target tags, so encoding text never produces it, a literal "<BT>" in a
line is ordinary pieces, and decoding drops it. Real sources carry no tag, so `mt translate`
needs none and never writes one.

`data.synthetic_ratio` R sets the mix of every epoch (the sampler of `mt.data.batching` draws
it, seeded per epoch): 0 keeps the natural proportions (every pair once); R > 0 makes the
epoch hold R synthetic examples per real one by upsampling the real side (whole copies plus a
seeded draw of the rest) when there is more synthetic data than R times the real, else by
drawing R x real synthetic examples. The ratio shapes epochs, not the cache: changing it does
not re-encode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mt.config import Config, PairConfig
from mt.data import corpus
from mt.data.encode import encode_split, worker_pool
from mt.data.pairwriter import SPLIT
from mt.data.tokenizer import Tokenizer
from mt.errors import MTError
from mt.textio import iter_lines

SYNTHETIC_TAG = "<BT>"  # the control piece that marks synthetic sources


def control_symbols(cfg: Config) -> list[str]:
    """The source model's extra control pieces this config needs: [<BT>] with tagged synthetic data."""
    return [SYNTHETIC_TAG] if cfg.data.synthetic and cfg.data.synthetic_tag else []


def synthetic_pairs(cfg: Config) -> list[PairConfig]:
    """One `PairConfig` per `data.synthetic` folder, in the languages of the model's one pair; the
    format is found from the files (text, tsv or jsonl; plain or .gz). MTError for a folder
    without them, or a config of several pairs."""
    if not cfg.data.synthetic:
        return []
    if len(cfg.data.pairs) > 1:
        raise MTError("data.synthetic: synthetic data is supported for a model of one language pair, "
                      f"not {len(cfg.data.pairs)} (data.pairs)")
    pair = cfg.data.pairs[0]
    out = []
    for path in cfg.data.synthetic:
        if not Path(path).is_dir():
            raise MTError(f"data.synthetic '{path}': not a folder "
                          f"(expected the -o folder of mt backtranslate or mt distill)")
        found = None
        for fmt in ("text", "tsv", "jsonl"):
            candidate = PairConfig(path=str(path), src_lang=pair.src_lang, tgt_lang=pair.tgt_lang, format=fmt,
                                   train_split=SPLIT, valid_split=SPLIT, test_splits=())
            if corpus.split_available(candidate, SPLIT):
                found = candidate
                break
        if found is None:
            raise MTError(f"data.synthetic '{path}': no {SPLIT}.{pair.src_lang} + {SPLIT}.{pair.tgt_lang} "
                          f"(or {SPLIT}.tsv / {SPLIT}.jsonl) in it")
        out.append(found)
    return out


def mono_lines(path: Path, lang: str) -> Iterator[str]:
    """The monolingual lines of `path`: a text file (plain or .gz) one sentence a line, or the target
    side of a parallel `.tsv` / `.jsonl` file (plain or .gz; jsonl rows {"src", "tgt"} or
    {"translation": {..., lang: ...}}), as mt's corpus formats read them."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".tsv"):
        return (tgt for _, tgt in corpus.iter_tsv(path))  # the corpus readers' own parsers
    if name.endswith(".jsonl"):
        pair = PairConfig(path=str(path.parent), src_lang=lang, tgt_lang=lang, format="jsonl")
        return (tgt for _, tgt in corpus.iter_jsonl(path, pair))
    return iter_lines(path)


def fingerprint_inputs(cfg: Config) -> dict[str, Any]:
    """The cache fingerprint's share of synthetic data: its files (path, size, mtime) and tag setting."""
    if not cfg.data.synthetic:
        return {}
    files = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
             for pair in synthetic_pairs(cfg) for p in corpus.split_files(pair, SPLIT)]
    return {"synthetic": files, "synthetic_tag": cfg.data.synthetic_tag}


def tagged(tokenizer: Tokenizer, cfg: Config) -> Tokenizer:
    """`tokenizer` that puts the <BT> id before every source (itself without data.synthetic_tag)."""
    if not cfg.data.synthetic_tag:
        return tokenizer
    tag = tokenizer.control_id(SYNTHETIC_TAG)
    if tag is None:
        raise MTError(f"data.synthetic_tag: the tokenizer has no {SYNTHETIC_TAG} piece "
                      f"(a reused tokenizer trained without synthetic data); set data.synthetic_tag=false")
    return tokenizer.with_prefix([*tokenizer.src_prefix, tag])


def encode_synthetic(
    cfg: Config, tokenizer: Tokenizer, staging: Path
) -> tuple[list[str], dict[str, dict[str, int]], dict[str, Any] | None]:
    """Encode every `data.synthetic` corpus into `staging` as parts `synthetic.<i>` of the training
    split (the length limits only, not clean.rules; tagged with data.synthetic_tag). Returns (part
    names, their counts, the manifest's `synthetic` record); ([], {}, None) without synthetic data."""
    pairs = synthetic_pairs(cfg)
    if not pairs:
        return [], {}, None
    tok = tagged(tokenizer.for_target(cfg.data.pairs[0].tgt_lang), cfg)
    limits = corpus.CleanLimits.from_config(cfg.data, cfg.model.max_positions)
    workers = cfg.tokenizer.workers
    parts, stats, reports = [], {}, []
    pool = worker_pool(tok, workers)
    try:
        for i, pair in enumerate(pairs):
            name = f"synthetic.{i}"
            s, rep, _ = encode_split(corpus.iter_split(pair, SPLIT), limits, cfg.model.max_positions - 1, tok,
                                     pool, workers, staging, name)
            if rep.kept == 0:
                raise MTError(f"data.synthetic '{pair.path}': no sentence pairs left after cleaning "
                              f"({rep.summary()})")
            parts.append(name)
            stats[name] = s
            reports.append({"path": pair.path, "format": pair.format, "sentences": s["sentences"],
                            **rep.to_dict()})
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    record = {"sentences": sum(s["sentences"] for s in stats.values()),
              "tag": tok.src_prefix[-1] if cfg.data.synthetic_tag else None, "corpora": reports}
    return parts, stats, record


@dataclasses.dataclass(frozen=True)
class EpochMix:
    """How many real and synthetic examples one epoch draws (`counts` per part of the split)."""

    sizes: list[int]  # sentences of each part: the real pairs', then the synthetic block's
    counts: list[int]  # examples drawn per part per epoch
    tagged: bool

    def describe(self) -> str:
        """The training log's line, e.g. 'real 10000 x1.90 = 19000, synthetic 19000 x1.00 = 19000
        (tagged <BT>) per epoch: 1.00 synthetic per real'."""
        real_n, syn_n = sum(self.sizes[:-1]), self.sizes[-1]
        real_m, syn_m = sum(self.counts[:-1]), self.counts[-1]
        tag = f"tagged {SYNTHETIC_TAG}" if self.tagged else "untagged"
        return (f"synthetic data: real {real_n} x{real_m / real_n:.2f} = {real_m}, synthetic {syn_n} "
                f"x{syn_m / syn_n:.2f} = {syn_m} ({tag}) per epoch: "
                f"{syn_m / real_m:.2f} synthetic per real example")


def epoch_mix(real_counts: list[int], synthetic: int, ratio: float, tagged: bool) -> EpochMix:
    """The epoch's draw of `real_counts` (each real pair's examples per epoch, summing to the real
    size N) and `synthetic` synthetic sentences S with `data.synthetic_ratio` R (module docstring):
    R = 0: (N, S); S >= R N: the real side scaled up to S / R; else S' = R N synthetic."""
    real = sum(real_counts)
    if ratio <= 0:
        syn_m, scale = synthetic, 1.0
    elif synthetic >= ratio * real:
        syn_m, scale = synthetic, synthetic / ratio / real
    else:
        syn_m, scale = max(1, round(ratio * real)), 1.0
    counts = [max(1, round(c * scale)) for c in real_counts]
    return EpochMix(sizes=[*real_counts, synthetic], counts=[*counts, syn_m], tagged=tagged)
