"""Pictures of a run: learning curves from metrics.jsonl and a cross-attention heatmap.

`plot_run(run_dir)` writes `run_dir/plots/curves.png` (train loss, val loss and val BLEU against
updates and against wall-clock minutes) and, with `attention=True`, `attention.png`: one
decoder layer's cross-attention (averaged over heads) for one sentence, source subwords on the
x axis, the model's own output subwords on the y axis.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from mt.config import Config
from mt.data.batching import collate_source
from mt.data.corpus import read_split
from mt.data.tokenizer import BOS_ID, Tokenizer
from mt.decode.engine import search_batch
from mt.errors import MTError, MTWarning
from mt.model.checkpoint import load_for_inference
from mt.model.transformer import Transformer

log = logging.getLogger(__name__)  # stage reports; the CLI shows them, a server may not


def read_metrics(path: Path) -> list[dict]:
    """All records of a metrics.jsonl file; a malformed line is an error naming the line.

    A final line without its newline that does not parse is a write cut short (kill -9, full
    disk): it is skipped with a warning, so one torn record never makes a run unreadable.
    """
    if not path.is_file():
        raise MTError(f"metrics file '{path}' does not exist (train the run first)")
    lines = path.read_bytes().split(b"\n")  # the last item is b"" when the file ends in a newline
    records = []
    for number, raw in enumerate(lines, start=1):
        torn = number == len(lines)  # only the unterminated last line can be a write cut short
        try:
            line = raw.decode("utf-8")
            if line.strip():
                records.append(json.loads(line))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if torn:
                warnings.warn(f"metrics file '{path}', line {number}: incomplete (an interrupted write); "
                              f"skipped", MTWarning, stacklevel=2)
                continue
            raise MTError(f"metrics file '{path}', line {number}: not valid JSON") from None
    return records


def _series(records: list[dict], kind: str, key: str) -> tuple[list[float], list[float], list[float]]:
    """(updates, wall minutes, values) of `key` over the records of one kind that have it."""
    rows = [r for r in records if r.get("kind") == kind and r.get(key) is not None]
    return ([r["update"] for r in rows], [r["wall"] / 60 for r in rows], [r[key] for r in rows])


def plot_curves(records: list[dict], out: Path, title: str) -> None:
    """Loss (train and val) and val BLEU against updates (top row) and wall time (bottom row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for row, (x_index, x_label) in enumerate([(0, "updates"), (1, "wall-clock minutes")]):
        loss_ax, bleu_ax = axes[row]
        for kind, key, label in [("train", "loss", "train loss (smoothed)"),
                                 ("train", "nll", "train NLL"), ("valid", "nll", "val NLL")]:
            series = _series(records, kind, key)
            if series[2]:
                loss_ax.plot(series[x_index], series[2], label=label, marker="o" if kind == "valid" else None,
                             markersize=3)
        loss_ax.set_xlabel(x_label)
        loss_ax.set_ylabel("loss per target token (nats)")
        loss_ax.grid(alpha=0.3)
        loss_ax.legend()
        series = _series(records, "valid", "bleu")
        if series[2]:
            bleu_ax.plot(series[x_index], series[2], marker="o", markersize=3, color="tab:green",
                         label="val BLEU")
        chrf = _series(records, "valid", "chrf")
        if chrf[2]:
            bleu_ax.plot(chrf[x_index], chrf[2], marker="s", markersize=3, color="tab:purple",
                         label="val chrF")
        bleu_ax.set_xlabel(x_label)
        bleu_ax.set_ylabel("score")
        bleu_ax.grid(alpha=0.3)
        bleu_ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_attention(loaded: tuple[Transformer, Tokenizer, Config], sentence: str, layer: int,
                   out: Path) -> str:
    """Heatmap of decoder layer `layer`'s cross-attention for `sentence` under a loaded checkpoint
    (`load_for_inference`'s model, tokenizer, config); returns the translation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, tokenizer, cfg = loaded
    n_layers = cfg.model.decoder_layers
    if not -n_layers <= layer < n_layers:
        raise MTError(f"--layer {layer}: the model has {n_layers} decoder layers")
    layer = layer % n_layers
    src_ids = tokenizer.encode_src([sentence])[0]
    if len(src_ids) <= len(tokenizer.src_prefix):  # nothing but a target tag
        raise MTError("attention plot: the sentence is empty")
    src, src_mask = collate_source([src_ids])
    with torch.inference_mode():
        best = search_batch(model, src, src_mask, cfg.decode)[0]  # the output `mt translate` gives
        tgt_in = torch.tensor([[BOS_ID] + best], dtype=torch.long)
        weights = model.cross_attention(src, src_mask, tgt_in, layer)[0].mean(dim=0)  # (T, S)
    # The source ends with EOS (mt.data.batching); row t is the attention used to predict output
    # token t from BOS + the tokens before it, so the last row is the one that predicted EOS.
    src_labels = tokenizer.src_pieces(sentence) + ["</s>"]
    tgt_labels = tokenizer.tgt_pieces(best) + ["</s>"]
    weights = weights.numpy()

    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(src_labels) + 2), max(4, 0.4 * len(tgt_labels) + 1.5)))
    image = ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    ax.set_xticks(range(len(src_labels)), src_labels, rotation=60, ha="right", fontsize=9)
    ax.set_yticks(range(len(tgt_labels)), tgt_labels, fontsize=9)
    ax.set_xlabel("source subwords")
    ax.set_ylabel("output subwords")
    ax.set_title(f"cross-attention, decoder layer {layer + 1}/{n_layers}, mean over heads")
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return tokenizer.decode_tgt([best])[0]


def plot_run(run_dir: Path, *, attention: bool, sentence: str | None, layer: int, checkpoint: Path | None,
             load: Callable[[Path], tuple[Transformer, Tokenizer, Config]] = (
                 lambda path: load_for_inference(path, "cpu")),
             ) -> list[Path]:
    """Write the run's PNG plots into run_dir/plots and return their paths; the attention plot's
    model (`checkpoint`, default best.pt) comes from `load` (`mt plot`: `mt.deploy.loading.load_model`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise MTError(f"run directory '{run_dir}' does not exist")
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    curves = out_dir / "curves.png"
    plot_curves(read_metrics(run_dir / "metrics.jsonl"), curves, title=run_dir.name)
    written = [curves]
    log.info(f"wrote {curves}")
    if attention:
        model, tokenizer, cfg = load(checkpoint or run_dir / "checkpoints" / "best.pt")
        pair = cfg.data.pairs[0]  # the model's first pair, with its target tag when the model has tags
        loaded = (model, tokenizer.for_target(pair.tgt_lang), cfg)
        if sentence is None:
            sentence = read_split(pair, pair.valid_split)[0][0]
        heatmap = out_dir / "attention.png"
        translation = plot_attention(loaded, sentence, layer, heatmap)
        log.info(f"wrote {heatmap}  ({sentence!r} -> {translation!r})")
        written.append(heatmap)
    return written
