"""The model card: what a model is, as data (`model_card`) and as Markdown (`model_card_markdown`).

One function builds the card for both of its readers: `mt export` writes it as `MODEL_CARD.md`
into the export directory, and `mt serve` returns it as JSON at `GET /v1/model-card` (the web page's
model panel). The card holds the languages, the model's size (Transformer shape and parameter
count), the training data, the training update, the validation scores stored in the checkpoint and
the test scores of the run's `eval/*.json` reports with their sacreBLEU signatures.

A `CardSource` is what a card is made of, as plain data: a checkpoint's stored fields (or an
export's `mt_export.json`), the parameter count and where its run's `eval/` reports are (found
beside `runs/<name>/checkpoints/`). A loaded model carries one in its provenance
(`mt.deploy.loading`), so the server's HTTP process makes the card without reading a checkpoint;
`model_card_for(path)` makes it from one file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.config_load import moved_decode_keys
from mt.errors import MTError
from mt.model.checkpoint import load_checkpoint

EXPORT_INFO = "mt_export.json"
_REPORT_KEYS = ("bleu", "chrf", "ter", "bleu_signature", "chrf_signature", "ter_signature", "sentences")
_VALID_KEYS = ("bleu", "chrf", "loss", "nll", "ppl", "update")
# what `model_card` reads of a checkpoint (mt_export.json holds the same keys)
_STATE_KEYS = ("config", "pairs", "valid", "joint_vocab", "src_vocab_size", "tgt_vocab_size", "update",
               "epoch", "averaged_updates")


def run_dir_of(checkpoint: Path) -> Path | None:
    """`runs/<name>` for a checkpoint at `runs/<name>/checkpoints/<file>.pt`, else None."""
    parent = Path(checkpoint).resolve().parent
    return parent.parent if parent.name == "checkpoints" else None


def eval_scores(run_dir: Path | None) -> dict[str, dict[str, Any]]:
    """Scores and sacreBLEU signatures of each `<run_dir>/eval/*.json` report (file stem -> scores)."""
    if run_dir is None or not (run_dir / "eval").is_dir():
        return {}
    scores: dict[str, dict[str, Any]] = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a half-written or foreign file is not worth failing an export or a server for
        if isinstance(report, dict):
            picked = {k: report[k] for k in _REPORT_KEYS if k in report}
            if "bleu" in picked or "chrf" in picked:
                scores[path.stem] = picked
    return scores


def parameter_count(state: dict[str, Any]) -> int:
    """Weights of a checkpoint `state`, the shared source/target embedding (joint vocabulary and tied
    embeddings: `Transformer.src_embed is tgt_embed`) counted once, as `model.parameters()` does.
    Checkpoints store copied tensors, so the sharing is read from the config, not from storage."""
    weights = state["model"]
    total = sum(int(t.numel()) for t in weights.values())
    if state["joint_vocab"] and state["config"]["model"]["tie_embeddings"] and "src_embed.weight" in weights:
        total -= int(weights["src_embed.weight"].numel())
    return total


def _languages(state: dict[str, Any]) -> dict[str, str]:
    """Source and target language(s): a multi-pair model's pairs (`state["pairs"]`) joined by ', '."""
    pairs = state.get("pairs") or []
    if not pairs:
        data = state["config"]["data"]
        return {"source": data["src_lang"], "target": data["tgt_lang"]}
    return {"source": ", ".join(dict.fromkeys(p["src_lang"] for p in pairs)),
            "target": ", ".join(dict.fromkeys(p["tgt_lang"] for p in pairs))}


def model_card(state: dict[str, Any], *, checkpoint: str, scores: dict[str, dict[str, Any]],
               parameters: int | None) -> dict[str, Any]:
    """The card (a JSON-able dict) of a checkpoint `state` (as `load_checkpoint` returns it, or the
    same keys from `mt_export.json`). `parameters`: the weight count, None when unknown."""
    cfg = state["config"]
    m, data = cfg["model"], cfg["data"]
    d = moved_decode_keys(cfg["decode"])["search"]  # an older file's flat decode keys read as sections
    valid = state.get("valid") if isinstance(state.get("valid"), dict) else {}
    return {
        "name": cfg.get("name", ""),
        "checkpoint": checkpoint,
        "languages": _languages(state),
        "model": {"parameters": parameters, "d_model": m["d_model"], "heads": m["heads"],
                  "encoder_layers": m["encoder_layers"], "decoder_layers": m["decoder_layers"],
                  "d_ff": m["d_ff"],
                  "norm": m["norm"], "activation": m["activation"], "tie_embeddings": m["tie_embeddings"]},
        "vocabulary": {"joint": bool(state["joint_vocab"]), "source": int(state["src_vocab_size"]),
                       "target": int(state["tgt_vocab_size"])},
        "training_data": {"format": data.get("format", ""), "path": data.get("path", ""),
                          "hub_name": data.get("hub_name", ""), "train_split": data.get("train_split", ""),
                          "valid_split": data.get("valid_split", ""),
                          "train_limit": data.get("train_limit", 0)},
        "update": int(state.get("update", 0)),
        "averaged_updates": [int(u) for u in state.get("averaged_updates") or []],  # [] unless an average
        "epoch": int(state.get("epoch", 0)),
        "validation": {k: valid[k] for k in _VALID_KEYS if k in valid},
        "test_scores": scores,
        "decode": {"beam": d["beam"], "length_penalty": d["length_penalty"], "alpha": d["alpha"],
                   "max_len_a": d["max_len_a"], "max_len_b": d["max_len_b"]},
    }


@dataclass(frozen=True)
class CardSource:
    """What a model's card is made of, as plain (picklable) data; `card()` makes the card."""

    fields: dict[str, Any]  # the checkpoint's fields `model_card` reads, or an export's mt_export.json
    checkpoint: str  # the checkpoint the card names
    parameters: int | None
    scores: dict[str, dict[str, Any]] | None  # an export's stored test scores; None: read from run_dir
    run_dir: Path | None  # where the checkpoint's run is (its eval/ reports are read when the card is made)

    def card(self) -> dict[str, Any]:
        """The card (reads the run's eval/*.json reports, never the checkpoint)."""
        scores = self.scores if self.scores is not None else eval_scores(self.run_dir)
        return model_card(self.fields, checkpoint=self.checkpoint, scores=scores, parameters=self.parameters)


def checkpoint_card_source(state: dict[str, Any], path: Path) -> CardSource:
    """The card source of a loaded checkpoint `state` read from `path`."""
    fields = {key: state[key] for key in _STATE_KEYS if key in state}
    return CardSource(fields, str(Path(path).resolve()), parameter_count(state), None, run_dir_of(path))


def export_card_source(info: dict[str, Any], path: Path) -> CardSource:
    """The card source of the `mt export` directory `path` whose mt_export.json holds `info`."""
    return CardSource(info, info.get("checkpoint", str(path)), info.get("parameters"), info.get("scores", {}),
                      None)


def model_card_for(path: Path) -> dict[str, Any]:
    """The card of a `.pt` checkpoint or of an `mt export` directory (reads the file)."""
    path = Path(path)
    if path.is_dir():
        info_path = path / EXPORT_INFO
        if not info_path.is_file():
            raise MTError(f"'{path}': not an mt export (no {EXPORT_INFO})")
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise MTError(f"'{info_path}': unreadable ({e})") from None
        return export_card_source(info, path).card()
    return checkpoint_card_source(load_checkpoint(path), path).card()


def _num(value: Any, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def model_card_markdown(card: dict[str, Any], *, title: str, extra: list[str] = ()) -> str:
    """`card` as the Markdown of MODEL_CARD.md; `extra`: more bullet lines (e.g. the export format)."""
    m, v, d, t = card["model"], card["vocabulary"], card["decode"], card["training_data"]
    params = f"{m['parameters']:,} parameters, " if m.get("parameters") else ""
    data = t["hub_name"] or t["path"]
    lines = [
        f"# {title}", "",
        f"- source checkpoint: `{card['checkpoint']}` (update {card['update']}, epoch {card['epoch']}"
        + (f"; the average of updates {', '.join(map(str, card['averaged_updates']))})"
           if card.get("averaged_updates") else ")"),
        f"- languages: {card['languages']['source']} -> {card['languages']['target']}",
        (f"- Transformer: {params}d_model {m['d_model']}, {m['heads']} heads, {m['encoder_layers']}+"
         f"{m['decoder_layers']} layers, d_ff {m['d_ff']}, {m['norm']}-LN, {m['activation']}, "
         f"tied embeddings {m['tie_embeddings']}"),
        (f"- vocabulary: {'joint' if v['joint'] else 'separate'} sentencepiece "
         f"({v['source']} / {v['target']} pieces)"),
        (f"- training data: {data} ({t['format']}), split {t['train_split']}"
         + (f", first {t['train_limit']} pairs" if t["train_limit"] else "")
         + f"; validation split {t['valid_split']}"),
        *extra,
        (f"- mt decoding defaults: beam {d['beam']}, length penalty {d['length_penalty']} "
         f"(alpha {d['alpha']}), max length {d['max_len_a']} * |src| + {d['max_len_b']}"),
        "", "## Validation (stored in the checkpoint)", "",
    ]
    val = card["validation"]
    lines.append(f"BLEU {_num(val.get('bleu'))}, chrF {_num(val.get('chrf'))}, "
                 f"perplexity {_num(val.get('ppl'))} at update {val.get('update', card['update'])}"
                 if val else "none stored")
    lines += ["", "## Scores (from the run's eval reports)", ""]
    if card["test_scores"]:
        lines += ["| report | BLEU | chrF | TER | BLEU signature |", "|---|---|---|---|---|"]
        for name, s in card["test_scores"].items():
            lines.append(f"| {name} | {s.get('bleu', '')} | {s.get('chrf', '')} | {s.get('ter', '')} "
                         f"| `{s.get('bleu_signature', '')}` |")
    else:
        lines.append("none found")
    return "\n".join(lines) + "\n"
