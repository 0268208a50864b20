"""What more would buy: read a finished run's own learning curve (metrics.jsonl) and say whether
more budget, more data or a larger model looks most likely to help (`outlook`).

A rough reading of one curve, said as such:
- **still improving**: the validation loss is at its lowest at the end (a schedule that decays the
  learning rate to 0 flattens every curve's end, so flatness there says little) and nothing
  says over-fitting: a longer budget comes first (the estimate halves the last third's BLEU
  gain for a budget twice as long, since these curves flatten roughly log-linearly);
- **over-fitting**: the validation loss's minimum came before `OVERFIT_AT` of the run and rose
  since by `OVERFIT_RISE` or more, or the validation NLL sits `GAP_NATS` above the training NLL:
  the model learns the training pairs faster than what generalises, so more data (or more
  regularisation) comes first, and a larger model would make it worse;
- **flat, not over-fitting**: neither (the loss's best came before the end, without a clear
  rise): the model's capacity is the likeliest limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RISING_BLEU = 0.5  # val BLEU gained over the last third of the run from which a gain is estimated
OVERFIT_AT = 0.8  # the best val loss before this share of the run ...
OVERFIT_RISE = 0.02  # ... and the last one this share above it: over-fitting
GAP_NATS = 0.6  # val NLL this far above train NLL (per token): memorising


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a torn last line
            continue
    return out


def outlook(run_dir: Path) -> list[str]:
    """A few lines on what more would buy, from `run_dir/metrics.jsonl` (lines, not advice to act on
    blindly)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return ["outlook: no metrics.jsonl in the run; nothing to read"]
    records = _records(path)
    valid = [r for r in records if r.get("kind") == "valid" and "nll" in r and "update" in r]
    train = [r for r in records if r.get("kind") == "train" and "nll" in r]
    if len(valid) < 3:
        return [f"outlook: {len(valid)} validation(s) in metrics.jsonl, too few to read a learning curve"]
    last_update = valid[-1]["update"]
    third = next(r for r in valid if r["update"] >= 2 * last_update / 3)
    bleu = [r.get("bleu") for r in valid]
    gain = (bleu[-1] - third["bleu"]) if bleu[-1] is not None and third.get("bleu") is not None else 0.0
    nll = [r["nll"] for r in valid]
    best_i = min(range(len(nll)), key=nll.__getitem__)
    rise = nll[-1] / nll[best_i] - 1
    train_nll = train[-1]["nll"] if train else float("nan")
    gap = nll[-1] - train_nll if train else 0.0
    train_part = f"train NLL {train_nll:.3f}" if train else "no training loss logged (train.log_every)"
    lines = [f"outlook (from this run's {len(valid)} validations; a rough reading of one curve): "
             f"val BLEU {third.get('bleu') or 0:.1f} -> {bleu[-1] or 0:.1f} over the last third, "
             f"val NLL {nll[-1]:.3f} (best {nll[best_i]:.3f} at update {valid[best_i]['update']}), "
             f"{train_part}"]
    rose = rise >= OVERFIT_RISE and valid[best_i]["update"] < OVERFIT_AT * last_update
    if rose or gap >= GAP_NATS:
        sign = f"rose {rise:.0%} from its best" if rose else f"sits {gap:.2f} nats above the training loss"
        lines.append(f"  more data would likely help most: validation loss {sign}, "
                     "so the model fits the training pairs faster than what generalises; "
                     "more budget or a larger model would mostly fit them harder "
                     "(more dropout / label smoothing is the other remedy)")
    elif nll[-1] <= min(nll[:-1]):
        fell = 1 - nll[-1] / third["nll"]
        more = (f"; twice the budget might add roughly {gain / 2:.1f} BLEU "
                "(curves flatten, so less than the last third's gain)" if gain >= RISING_BLEU else "")
        lines.append(f"  more budget would likely help most: the val loss was at its lowest at the end "
                     f"(down {fell:.1%} over the last third, val BLEU {gain:+.1f}, while the learning rate "
                     "decayed) with no sign of over-fitting" + more)
    else:
        lines.append(f"  a larger model would likely help most: val BLEU moved {gain:+.1f} over the last "
                     "third and the losses show no over-fitting, so capacity looks like the limit "
                     "(try the next size, e.g. --set model.d_model=256 --set model.d_ff=1024, "
                     "with a budget to train it)")
    return lines
