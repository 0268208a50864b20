"""Word alignment from the model's own cross-attention: which source word each target word
translates, for putting inline markup (`<b>`, `<a>`, a document's bold run) on the right words.

A sentence pair (source, its translation) is run through the teacher-forced decoder once
(`Transformer.cross_attention`); the attention probabilities of one decoder layer, averaged over
its heads, say for every target piece how much it looked at every source piece. Pieces are summed
into whitespace-separated words (a sentencepiece word starts at a piece with the ▁ mark, so words
here are the same words `str.split()` gives), and each target word is aligned to the source word
it attends to most. The target tag of a multi-pair model and the source's EOS are left out: the
EOS soaks up attention when nothing in particular is being translated.

Which layer and which row: the attention row that *predicts* target piece t (row t, input = the
piece before it), or the row where piece t is the decoder's *input* (row t + 1: "shift-att", Chen
et al. 2020, which found it aligns better in vanilla post-LN Transformers). On mt's demo model
(pre-LN, 3 decoder layers; 1,181 updates) the predicting row, averaged over heads and layers,
put a bold word on its translation in 93.5% of 840 test_2016_flickr cases (66.0% by position; the
shifted row 26.8%): `ALIGN_LAYER_FROM_TOP` and `SHIFT` hold that choice (scripts/bench/bench_markup.py;
the table is in docs/guides/documents.md). Without alignment training (Marian's / Bergamot's guided alignment
head) this is a heuristic: good enough to put a link on the word that translates it in most
sentences, not a word aligner to evaluate against AER.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from mt.data.batching import collate_source
from mt.data.tokenizer import BOS_ID, PAD_ID, Tokenizer
from mt.decode.engine import Engine, NativeEngine
from mt.model.ensemble import Ensemble, max_positions
from mt.model.transformer import Transformer

WORD_START = "\u2581"  # sentencepiece's word-boundary mark
ALIGN_LAYER_FROM_TOP = 0  # 0 = every decoder layer averaged; 1 = the last layer, 2 = the one below it, ...
SHIFT = False  # align target piece t with the attention row where it is the decoder's input
MAX_PAIRS_PER_BATCH = 32


def piece_words(pieces: Sequence[str], skip: int = 0) -> list[int]:
    """The word index of each piece (-1 for the first `skip` pieces: a target tag): a word starts
    at a piece with the ▁ mark, or at the first real piece."""
    words, current = [], -1
    for i, piece in enumerate(pieces):
        if i < skip:
            words.append(-1)
            continue
        if piece.startswith(WORD_START) or current < 0:
            current += 1
        words.append(current)
    return words


def _word_scores(probs: torch.Tensor, src_words: list[int], tgt_words: list[int]) -> torch.Tensor:
    """Attention (T, S) over pieces -> (target words, source words), pieces summed (rows averaged)."""
    n_src, n_tgt = max(src_words) + 1, max(tgt_words) + 1
    src_map = torch.zeros(probs.shape[1], n_src)
    for s, w in enumerate(src_words):
        if w >= 0:
            src_map[s, w] = 1.0
    tgt_map = torch.zeros(n_tgt, probs.shape[0])
    for t, w in enumerate(tgt_words):
        tgt_map[w, t] = 1.0
    tgt_map = tgt_map / tgt_map.sum(dim=1, keepdim=True).clamp(min=1.0)
    return tgt_map @ probs @ src_map


def align_words(model: Transformer | Ensemble, tokenizer: Tokenizer, sources: Sequence[str],
                targets: Sequence[str], *, device: torch.device | str = "cpu",
                layer_from_top: int = ALIGN_LAYER_FROM_TOP, shift: bool = SHIFT) -> list[list[int]]:
    """For each (source, target) pair: one entry per word of `target.split()`, the index of the
    source word (of `source.split()`) it aligns to, or -1 (an empty side). An ensemble aligns with
    its first member. Sources or targets longer than the model reads are cut to fit (the words past
    the cut are -1)."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    net = model.members[0] if isinstance(model, Ensemble) else model
    layers = len(net.decoder)
    chosen = range(layers) if layer_from_top == 0 else [layers - max(1, min(layer_from_top, layers))]
    limit = max_positions(net) - 1
    src_ids = [seq[:limit] for seq in tokenizer.encode_src(list(sources))]
    tgt_ids = [seq[:limit - 1] for seq in tokenizer.encode_tgt(list(targets))]
    tag = len(tokenizer.src_prefix)
    out: list[list[int]] = [[-1] * len(target.split()) for target in targets]
    todo = [i for i in range(len(sources)) if len(src_ids[i]) > tag and tgt_ids[i] and sources[i].split()]
    for at in range(0, len(todo), MAX_PAIRS_PER_BATCH):
        rows = todo[at:at + MAX_PAIRS_PER_BATCH]
        src, src_mask = collate_source([src_ids[i] for i in rows])
        width = max(len(tgt_ids[i]) for i in rows) + 1
        tgt_in = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
        for b, i in enumerate(rows):
            tgt_in[b, :len(tgt_ids[i]) + 1] = torch.tensor([BOS_ID, *tgt_ids[i]])
        # (B, T, S): heads (and layers) averaged
        probs = sum(net.cross_attention(src.to(device), src_mask.to(device), tgt_in.to(device), layer).float()
                    .mean(dim=1).cpu() for layer in chosen) / len(chosen)
        for b, i in enumerate(rows):
            n_src, n_tgt = len(src_ids[i]), len(tgt_ids[i])
            # Row 0 has BOS as input and predicts piece 0; row t + 1 has piece t as input.
            rows_of = probs[b, 1:n_tgt + 1] if shift else probs[b, :n_tgt]  # (n_tgt, S)
            src_words = piece_words(tokenizer.src_pieces(sources[i])[:n_src], skip=tag)
            tgt_words = piece_words(tokenizer.tgt_pieces(tgt_ids[i]))
            scores = _word_scores(rows_of[:, :n_src], src_words, tgt_words)  # (target words, source words)
            best = scores.argmax(dim=1).tolist()
            n_words = min(len(out[i]), len(best))
            out[i][:n_words] = best[:n_words]
    return out


def aligner_for(engine: Engine,
                tokenizer: Tokenizer) -> Callable[[list[str], list[str]], list[list[int]]] | None:
    """`align_words` bound to this engine's model and tokenizer (what `mt.text.html.render_fragments`
    takes), or None for an engine with no attention to read (a CTranslate2 export)."""
    if not isinstance(engine, NativeEngine):
        return None
    return lambda sources, targets: align_words(engine.model, tokenizer, sources, targets,
                                                device=engine.device)

