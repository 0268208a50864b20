"""Subword regularisation: a fresh sampled segmentation of the training split every epoch.

With `tokenizer.sampling_alpha` > 0 the model trains on a different segmentation of each
training sentence every epoch: sentencepiece samples one from the unigram lattice (Kudo 2018;
`tokenizer.sampling_nbest` bounds it to the n best) or drops BPE merges at random (BPE-dropout,
Provilkov et al. 2020). Both papers report the largest gains on small corpora. Validation, test
and translation keep the canonical segmentation.

The prepared cache holds the canonical ids only. The text is recovered once, by decoding them:
sentencepiece's decoding inverts its encoding up to normalisation. A sentence whose decoded text
does not encode back to the cached ids (an <unk>, text normalisation changes) keeps its cached
ids every epoch, and so does a sampled sequence over the training limits (`data.max_len` pieces,
`model.max_positions` - 1). A multi-pair source keeps its target tag in front.

Each epoch's ids are a pure function of (train.seed, epoch): every chunk of CHUNK sentences is
sampled in one thread from a generator seeded by (seed, epoch, side, chunk). A resumed run
therefore trains on exactly the segmentation the interrupted one would have, and every DDP rank
on the same one.

Cost: the text of both sides is held in memory as Python strings (unlike the memory-mapped cache),
and sampling runs in the training process between epochs, about 1 s per epoch for Multi30k's
29k pairs at alpha 0.3 (nbest -1; nbest 64 is ~5x slower). For corpora of many millions of pairs
that is gigabytes and minutes per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mt.data.splits import EncodedSplit, TokenArray
from mt.data.synthetic import SYNTHETIC_TAG
from mt.data.tokenizer import Tokenizer

CHUNK = 8192  # sentences per seeded sampling call: the output does not depend on how chunks are run


@dataclass(frozen=True)
class SamplingSettings:
    """tokenizer.sampling_alpha / sampling_nbest and the per-side length limit in pieces."""

    alpha: float
    nbest: int
    max_len: int  # most pieces a sampled sequence may have (tag included); longer ones keep the cached ids
    seed: int


@dataclass(frozen=True)
class EpochSegmentation:
    """One epoch's training split and how far its segmentation moved from the cached one."""

    split: EncodedSplit
    tokens_ratio: float  # sampled tokens (both sides) / cached tokens
    kept: int  # sequences (of both sides) that kept their cached ids: not invertible or over the limit


class Resegmenter:
    """The training split in a new sampled segmentation per epoch (see the module docstring)."""

    def __init__(self, split: EncodedSplit, tokenizer: Tokenizer, settings: SamplingSettings) -> None:
        """`tokenizer`: the run's (no `src_prefix`: tags are read off the cached sources)."""
        self.split, self.tokenizer, self.settings = split, tokenizer, settings
        tags = set(tokenizer.target_tags().values())
        # a bilingual model's only tag: <BT> (mt.data.synthetic)
        synthetic = tokenizer.control_id(SYNTHETIC_TAG)
        if synthetic is not None:
            tags.add(synthetic)
        # Per side: the text, the tag id in front of each sequence (-1: none) and whether the text
        # encodes back to the cached ids. Cached ids are read again from the split when needed.
        self._sides: dict[str, tuple[TokenArray, list[str], np.ndarray, np.ndarray]] = {}
        for side, array in (("src", split.src), ("tgt", split.tgt)):
            seqs = array.to_lists()
            prefix = np.array([seq[0] if side == "src" and seq and seq[0] in tags else -1 for seq in seqs],
                              dtype=np.int64)
            bodies = [seq[1:] if p >= 0 else seq for seq, p in zip(seqs, prefix.tolist())]
            del seqs
            texts = tokenizer.decode_pieces(side, bodies)
            again = _canonical(tokenizer, side, texts)
            invertible = np.fromiter((a == b for a, b in zip(again, bodies)), dtype=bool, count=len(bodies))
            self._sides[side] = (array, texts, prefix, invertible)
        self._last: tuple[int, EpochSegmentation] | None = None

    def invertible_fraction(self) -> float:
        """The share of sequences (both sides) that are sampled anew each epoch."""
        flags = np.concatenate([side[3] for side in self._sides.values()])
        return float(flags.mean()) if len(flags) else 1.0

    def epoch(self, epoch: int) -> EpochSegmentation:
        """The training split for `epoch` (the same object when asked twice in a row)."""
        if self._last is not None and self._last[0] == epoch:
            return self._last[1]
        arrays, kept, sampled_tokens = {}, 0, 0
        for side_index, (side, (cached, texts, prefix, invertible)) in enumerate(self._sides.items()):
            out: list[list[int]] = []
            for chunk, start in enumerate(range(0, len(texts), CHUNK)):
                seed = _chunk_seed(self.settings.seed, epoch, side_index, chunk)
                out += self.tokenizer.sample_encode(side, texts[start:start + CHUNK],
                                                    alpha=self.settings.alpha, nbest=self.settings.nbest,
                                                    seed=seed)
            lengths = np.fromiter(map(len, out), dtype=np.int64, count=len(out)) + (prefix >= 0)
            for i in np.flatnonzero(~invertible | (lengths > self.settings.max_len)).tolist():
                out[i] = cached[i].tolist()
                kept += 1
            for i in np.flatnonzero(prefix >= 0).tolist():
                if invertible[i] and lengths[i] <= self.settings.max_len:
                    out[i] = [int(prefix[i])] + out[i]
            sampled_tokens += sum(map(len, out))
            arrays[side] = TokenArray.from_sequences(out)
        cached_tokens = len(self.split.src.ids) + len(self.split.tgt.ids)
        result = EpochSegmentation(EncodedSplit(arrays["src"], arrays["tgt"]),
                                   sampled_tokens / max(cached_tokens, 1), kept)
        self._last = (epoch, result)
        return result


def _canonical(tokenizer: Tokenizer, side: str, texts: list[str]) -> list[list[int]]:
    """The canonical (unsampled) ids of `texts` on `side`, without any tag."""
    return tokenizer.encode_src(texts) if side == "src" else tokenizer.encode_tgt(texts)


def _chunk_seed(seed: int, epoch: int, side: int, chunk: int) -> int:
    """A 32-bit seed for one sampling call, spread from (seed, epoch, side, chunk)."""
    return int(np.random.SeedSequence((seed, epoch, side, chunk)).generate_state(1)[0])
