"""Run an exported CTranslate2 model (see mt/deploy/export.py) with mt's decoding semantics.

`CT2Translator` takes and returns mt token ids, so it can stand in for `mt.decode.search` behind
`mt translate -c DIR` / `mt evaluate -c DIR`. It takes the one `mt.decode.rules.SearchSettings`
mt's searches take (made by `search_settings`, as the engine makes it), and `ct2_options` turns it
into CTranslate2's options for `translate_batch`. How mt's rules map onto CTranslate2's:

- Source EOS: the export sets `add_source_eos`, CTranslate2 appends `</s>` itself; callers pass
  ids without EOS, exactly as to `mt.data.batching.collate_source`. `max_input_length=0`: no silent
  truncation; a source longer than `model.max_positions - 1` is an MTError, as in mt.
- Maximum length: mt allows floor(a * |src| + b) tokens before EOS (|src| counts the source EOS),
  capped at `max_positions - 1`, and forces EOS at that length (`mt.decode.rules.max_output_lengths`,
  the same function). CTranslate2's `max_decoding_length`
  is one value per call and counts steps, the EOS step included. A batch is searched once with
  the longest limit of its sentences; a sentence whose hypotheses all ended before its own limit
  got exactly what a search limited to it gets (the searches agree step by step until then), and
  the others (rare: a hypothesis reached the limit) are searched again, grouped by limit, with
  `max_decoding_length = limit`: a search reaching the limit returns the same `limit` tokens as mt
  (mt's forced EOS only adds a score, which is added here from `score_batch`). Searching every
  limit group apart, as before, made 20-30 small calls per batch: 2x slower in beam 5 and 3x in
  greedy on Multi30k. `min_decoding_length=0`: EOS is allowed at the first step (an empty output), as
  in mt. A limit of 0 gives the empty output without decoding.
- Banned tokens: PAD and BOS (`suppress_sequences`), UNK when `forbid_unk` (`disable_unk`).
  CTranslate2 bans them before its log-softmax, so its log-probs are renormalised over the allowed
  tokens, while mt sets them to -inf after (the model's own log-probs). Greedy output is identical
  (the argmax is unchanged); beam scores differ by log(1 - p(banned)) per step, negligible for a
  trained model (those tokens are never targets) and only able to reorder near-ties.
- Length penalty: CTranslate2 divides by |y|^length_penalty, |y| counting EOS when
  `return_end_token=True` — mt's `average` exactly. mt's `none` (or alpha 0) uses a length penalty
  of 1e-30 (|y|^1e-30 == 1.0 in float32) because an exact 0 switches on CTranslate2's early exit,
  a different stopping rule. mt's `gnmt` ((5+|y|)/6)^alpha has no CTranslate2 equivalent: the
  beam runs with |y|^alpha and the `beam` best finished hypotheses are re-ranked with gnmt.
- Loop guard: `no_repeat_ngram_size` and `repetition_penalty` go to CTranslate2's options of those
  names. Its n-gram ban, like its other bans, comes before its log-softmax: greedy output is mt's
  (the argmax is unchanged), but where a ban fires on a token of large probability (a model that
  loops) beam scores are renormalised and the beam can differ. Its penalty applies to logits (CTRL's
  rule), mt's to log-probs: the same direction, other numbers.
- Stopping: both stop a sentence once it has `beam` finished hypotheses (patience 1), and both
  refill the beam from 2*beam candidates, so with `average`/`none` the n-best lists are mt's.
  At the length limit mt finishes each live hypothesis with a forced EOS while CTranslate2
  finishes its `beam` best candidates of the last step as they are: n-best lists of sentences
  that reach the limit can differ (their first `limit` tokens are kept; greedy is unaffected).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from mt.config import DecodeConfig
from mt.data.tokenizer import EOS_ID
from mt.decode.engine import Results
from mt.decode.rules import SearchSettings, max_output_lengths, search_settings
from mt.decode.wanted import Wanted
from mt.deploy.ct2_prefix import continue_ids
from mt.deploy.export import import_ctranslate2, read_export_info
from mt.errors import MTError

_NO_PENALTY = 1e-30  # |y| ** 1e-30 == 1.0f, without CTranslate2's early exit (see the module docstring)
_BANNED = [["<pad>"], ["<s>"]]


def ct2_options(settings: SearchSettings) -> dict[str, Any]:
    """`settings` as CTranslate2's `translate_batch` options (the module docstring says how each
    maps), all but the length limit, which is each call's."""
    if settings.beam == 1 or settings.length_penalty == "none" or settings.alpha == 0.0:
        penalty = _NO_PENALTY
    else:
        penalty = settings.alpha  # exact for `average`; `gnmt` re-ranks the beam's best
    # gnmt re-ranks CTranslate2's `beam` best, so ask for all of them
    hyps = settings.beam if settings.length_penalty == "gnmt" and settings.beam > 1 else settings.n_best
    return dict(beam_size=settings.beam, patience=1, num_hypotheses=hyps, length_penalty=penalty,
                disable_unk=settings.forbid_unk, suppress_sequences=_BANNED, return_end_token=True,
                return_scores=True, max_input_length=0, min_decoding_length=0,
                no_repeat_ngram_size=settings.no_repeat_ngram_size,
                repetition_penalty=settings.repetition_penalty)


def _vocabulary(model_dir: Path, side: str) -> list[str]:
    for name in (f"{side}_vocabulary.json", "shared_vocabulary.json"):
        path = model_dir / name
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    raise MTError(f"'{model_dir}': no {side} vocabulary ({side}_vocabulary.json or shared_vocabulary.json)")


class CT2Translator:
    """An exported mt model loaded in CTranslate2, speaking mt token ids."""

    def __init__(self, model_dir: Path, *, compute_type: str = "default", threads: int = 0,
                 max_batch_size: int = 64, batch_type: str = "examples") -> None:
        """`compute_type`: CTranslate2's (default = the exported weights' type); `threads`: intra-op
        threads (0 = torch's current count); `max_batch_size`: sentences (batch_type "examples") or
        source tokens (batch_type "tokens") per CTranslate2 batch, 0 = no limit."""
        ct2 = import_ctranslate2()
        self.model_dir = Path(model_dir)
        self.info = read_export_info(self.model_dir)
        self.max_positions = int(self.info["config"]["model"]["max_positions"])
        self.src_vocab = _vocabulary(self.model_dir, "source")
        self.tgt_vocab = _vocabulary(self.model_dir, "target")
        self._tgt_ids = {piece: i for i, piece in enumerate(self.tgt_vocab)}
        if batch_type not in ("examples", "tokens"):
            raise ValueError(f"CT2Translator: batch_type must be 'examples' or 'tokens', got {batch_type!r}")
        self.max_batch_size, self.batch_type = max_batch_size, batch_type
        try:
            self.translator = ct2.Translator(str(self.model_dir), device="cpu", compute_type=compute_type,
                                             intra_threads=threads or torch.get_num_threads())
        except (RuntimeError, ValueError) as e:
            raise MTError(f"'{model_dir}': CTranslate2 cannot load it ({str(e).splitlines()[0]})") from None

    def _src_pieces(self, src_ids: list[list[int]]) -> list[list[str]]:
        out = []
        for ids in src_ids:
            if len(ids) + 1 > self.max_positions:
                raise MTError(f"model: sequence of {len(ids) + 1} tokens exceeds "
                              f"model.max_positions={self.max_positions}")
            out.append([self.src_vocab[int(i)] for i in ids])
        return out

    def _tgt_pieces(self, tgt_ids: list[list[int]]) -> list[list[str]]:
        return [[self.tgt_vocab[int(i)] for i in ids] for ids in tgt_ids]

    def max_lengths(self, src_ids: list[list[int]], settings: SearchSettings) -> list[int]:
        """mt's per-sentence limit (`max_output_lengths`: floor(a * (|x| + 1) + b) in [0, max_len_limit]),
        within max_positions - 1 whatever the settings say."""
        lengths = torch.tensor([len(ids) + 1 for ids in src_ids], dtype=torch.long)
        return max_output_lengths(lengths, settings).clamp(max=self.max_positions - 1).tolist()

    def score_ids(self, src_ids: list[list[int]], tgt_ids: list[list[int]]) -> list[list[float]]:
        """Teacher-forced log-probs of each target `y EOS` (no BOS/EOS in the inputs): len(y) + 1 floats
        each."""
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"score_ids: {len(src_ids)} sources but {len(tgt_ids)} targets")
        if not src_ids:
            return []
        results = self.translator.score_batch(self._src_pieces(src_ids), self._tgt_pieces(tgt_ids),
                                              max_batch_size=self.max_batch_size, batch_type=self.batch_type,
                                              max_input_length=0)
        return [list(r.log_probs) for r in results]

    def translate_ids(self, src_ids: list[list[int]], settings: SearchSettings, *,
                      exact_scores: bool = False) -> list[Results]:
        """For each source (ids without EOS), its `settings.n_best` (tokens without BOS/EOS, score), best
        first.

        beam 1 is greedy search (n_best must be 1; the score is the summed log-prob). Scores follow
        mt's convention: log-prob / length_penalty(|y| + 1). CTranslate2's log-probs are renormalised
        over the allowed tokens; `exact_scores` re-scores the hypotheses found with `score_batch` (one
        teacher-forced pass) to give the model's own log-probs, as mt does, and ranks by those.
        See the module docstring for the parity (the loop guard too: CTranslate2's own options).
        """
        if settings.sampling is not None:
            raise ValueError("translate_ids: CTranslate2 searches; settings.sampling must be None")
        limits = self.max_lengths(src_ids, settings)
        pieces = self._src_pieces(src_ids)
        options = ct2_options(settings)
        groups: dict[int, list[int]] = defaultdict(list)  # limit -> sentences searched again at it
        raw: list[list[tuple[list[int], float, bool]]] = [[] for _ in src_ids]  # (tokens, log-prob, ended)

        def search(members: list[int], limit: int) -> list[Any]:
            return self.translator.translate_batch([pieces[i] for i in members],
                                                   max_batch_size=self.max_batch_size,
                                                   batch_type=self.batch_type, max_decoding_length=limit,
                                                   **options)

        # One search at the batch's longest limit: a sentence whose search ended before its own limit
        # is exactly what a search limited to it finds. The few that got that far (their own limit
        # reached) are searched again, grouped by limit (see the module docstring).
        live = [i for i in range(len(src_ids)) if limits[i] > 0]
        for i in set(range(len(src_ids))) - set(live):  # mt forces EOS at once: the empty output
            raw[i] = [([], math.nan, False)]
        first = dict(zip(live, search(live, max(limits[i] for i in live)))) if live else {}
        # greedy needs no second search: its first `limit` tokens are the limited search's
        redo = [] if settings.beam == 1 else [i for i, res in first.items()
                                              if any(len(hyp) >= limits[i] for hyp in res.hypotheses)]
        for i in redo:
            groups[limits[i]].append(i)
        results = {i: res for i, res in first.items() if i not in set(redo)}
        for limit, members in sorted(groups.items()):
            results.update(zip(members, search(members, limit)))
        ct2_penalty = options["length_penalty"]
        for i, res in results.items():
            for hyp, score in zip(res.hypotheses, res.scores):
                ids = [self._tgt_ids[p] for p in hyp]
                if len(ids) > limits[i]:  # greedy past this sentence's limit: cut there, scored in full below
                    raw[i].append((ids[:limits[i]], math.nan, False))
                    continue
                ended = bool(ids) and ids[-1] == EOS_ID
                tokens = ids[:-1] if ended else ids
                # undo CTranslate2's normalisation: it divided by len(hyp) ** ct2_penalty
                raw[i].append((tokens, float(score) * len(hyp) ** ct2_penalty if hyp else float(score),
                               ended))
        if exact_scores:
            self._rescore(src_ids, raw)
        else:
            self._add_forced_eos(src_ids, raw)
        out = []
        for hyps in raw:
            scored = [(tokens, settings.score(lp, len(tokens))) for tokens, lp, _ in hyps]
            scored.sort(key=lambda h: -h[1])
            out.append(scored[:settings.n_best])
        return out

    def _add_forced_eos(self, src_ids: list[list[int]],
                        raw: list[list[tuple[list[int], float, bool]]]) -> None:
        """Hypotheses stopped by the length limit get mt's forced EOS: their log-prob gains log p(EOS);
        one without a log-prob (NaN: the empty output, a greedy output cut at its limit) gets the
        teacher-forced log-prob of `y EOS`."""
        todo = [(i, j) for i, hyps in enumerate(raw) for j, (_, _, ended) in enumerate(hyps) if not ended]
        if not todo:
            return
        scores = self.score_ids([src_ids[i] for i, _ in todo], [raw[i][j][0] for i, j in todo])
        for (i, j), lps in zip(todo, scores):
            tokens, lp, _ = raw[i][j]
            raw[i][j] = (tokens, (float(sum(lps)) if math.isnan(lp) else lp + lps[-1]), True)

    def _rescore(self, src_ids: list[list[int]], raw: list[list[tuple[list[int], float, bool]]]) -> None:
        """Replace every hypothesis' log-prob by the model's own teacher-forced log-prob of `y EOS`."""
        todo = [(i, j) for i, hyps in enumerate(raw) for j in range(len(hyps))]
        scores = self.score_ids([src_ids[i] for i, _ in todo], [raw[i][j][0] for i, j in todo])
        for (i, j), lps in zip(todo, scores):
            raw[i][j] = (raw[i][j][0], float(sum(lps)), True)

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int] | None = None,
                   on_result: Callable[[int, Results], None] | None = None,
                   constraints: list[list[list[int]]] | list[Wanted] | None = None, glue: Sequence[int] = (),
                   ) -> list[Results]:
        """`mt.decode.engine.Engine`'s search: the 1-best of `decode`'s search (greedy for beam 1), or
        its `n_best` beam hypotheses re-scored with the model's own log-probs (`exact_scores`).
        CTranslate2 returns a batch whole, so `on_result` is not called: every result comes back at once.
        `constraints` (a glossary's terms) are refused (`refusal`): its search cannot keep them; a
        translator's typed prefixes (prefix-only `Wanted`s) are continued (`mt.deploy.ct2_prefix`)."""
        typed = constraints is not None and all(isinstance(w, Wanted) and not w.require and not w.avoid
                                                for w in constraints)
        if constraints is not None and not typed:
            raise MTError(self.refusal)
        if decode.search.sampling:
            raise MTError("--sampling: runs with .pt checkpoints only; "
                          "an exported model searches (greedy/beam)")
        if decode.resources.precision != "fp32":
            raise MTError(f"--precision {decode.resources.precision}: an exported model's precision is its "
                          f"export's --quantization ({self.info.get('quantization')})")
        settings = search_settings(decode.search, n_best=n_best or 1, max_len_limit=self.max_positions - 1,
                                   constrained=typed)
        if typed:  # a translator's typed prefixes (mt.deploy.ct2_prefix), with mt's constrained beam
            wanted = cast(list[Wanted], constraints)
            return continue_ids(self, src_ids, wanted, settings, ct2_options(settings))
        return self.translate_ids(src_ids, settings, exact_scores=n_best is not None)

    constrains = False  # CTranslate2 has no lexically constrained search (mt.decode.constrained)

    @property
    def refusal(self) -> str:
        """The one line saying this engine cannot keep a glossary's terms."""
        return (f"--glossary: '{self.model_dir}' is a CTranslate2 export, whose search cannot be "
                "constrained to a glossary's terms; translate with the .pt checkpoint it was exported from")

    def describe(self) -> dict[str, Any]:
        """What `mt translate/evaluate -c DIR` may print: the export's settings and source checkpoint."""
        keys = ("name", "checkpoint", "update", "epoch", "quantization", "ctranslate2_version")
        return {k: self.info.get(k) for k in keys}
