"""averaged.pt: the mean of the newest periodic checkpoints (`train.average_last`), kept only when
it beats best.pt on val, so whichever file `make evaluate` picks was chosen on the validation set.

With train.fit_alpha (and a beam to fit) the two are compared as the fit will decode: beam search
at the configured alpha on the fit's val lines (`mt.train.decode_fit.beam_bleu`, up to 1,500).
Validation's greedy BLEU on valid_max_sentences (the recipe's 300) is too noisy to tell apart two
models a few hundred updates apart: on the 1-hour Zen 4 run it kept best.pt from update 14,296
(greedy 42.01 against the average's 41.47); beam 5 at alpha 0.6 on all 1,014 val lines prefers
the average of updates 15,008-17,152 (41.00 against 40.73), which, refitted (alpha 0.8), scores
39.71 / 32.33 / 27.00 on the three test sets against best.pt's 38.33 / 30.86 / 26.71. Without
the fit, validation's own metric decides (`selection_metric`, as for best.pt).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from mt.config import DecodeConfig, TrainConfig
from mt.model.checkpoint import Checkpoint, CheckpointFiles, read_checkpoint
from mt.train.decode_fit import beam_bleu, fit_sentences, fits
from mt.train.log import TrainLog
from mt.train.validate import Validator, metric_name, selection_metric


def average_or_best(best: Path, files: CheckpointFiles, validator: Validator, t: TrainConfig,
                    decode: DecodeConfig, device: torch.device, log: TrainLog, best_metric: float,
                    where: dict[str, Any]) -> tuple[Path, dict[float, float]]:
    """averaged.pt of the newest `t.average_last` periodic checkpoints when it validates at least
    as well as `best` (best.pt, whose selection metric is `best_metric`), else `best`; and the
    chosen model's beam val BLEU at the configured alpha ({alpha: BLEU}, for the fit; empty when
    the choice was not made by beam search). `where` (update, epoch, wall) goes into the metrics
    record of the average's validation."""
    sources = files.periodic()[-t.average_last:]
    if len(sources) < 2:
        log.info(f"averaging skipped: {len(sources)} periodic checkpoint(s)")
        return best, {}
    candidate, state = files.average_candidate(sources)
    model = Checkpoint(candidate, "", state).model(device)  # the mean as written, not read back
    record = validator(model)
    # averaged.pt's own scores
    metric, valid = selection_metric(record), {**record, "update": state["update"]}
    record.update(kind="averaged", **where, sources=[p.name for p in sources])
    name = metric_name(t.valid_bleu)
    validation = f"{name} {abs(metric):.2f}, best.pt {abs(best_metric):.2f}"
    if t.fit_alpha and fits(decode):
        started = time.perf_counter()
        averaged_bleu = beam_bleu(model, validator, decode, decode.search.alpha)
        best_bleu = beam_bleu(read_checkpoint(best).model(device), validator, decode, decode.search.alpha)
        keep = averaged_bleu >= best_bleu
        record.update(beam_bleu=averaged_bleu, best_beam_bleu=best_bleu)
        how = (f"beam {decode.search.beam} val BLEU on {fit_sentences(validator):,} sentences "
               f"{averaged_bleu:.2f}, "
               f"best.pt {best_bleu:.2f}, {time.perf_counter() - started:.0f}s; validation's {validation}")
        known = {decode.search.alpha: averaged_bleu if keep else best_bleu}
    else:
        keep, how, known = metric >= best_metric, validation, {}
    log.metrics(record)
    files.keep_averaged(candidate, state, valid if keep else None)
    if keep:
        log.info(f"averaged {len(sources)} checkpoints -> {files.averaged} ({how})")
        return files.averaged, known
    log.info(f"averaged checkpoints validate worse ({how}): not written; use best.pt")
    return best, known
