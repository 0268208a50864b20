"""Dual conditional cross-entropy (mt.eval.dualxent) and `mt data clean --forward --backward`:
the cost is Junczys-Dowmunt's formula over the two directions' forced-decoding scores, pairs both
models find likely rank first, and the command keeps the best share, naming the rest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mt.config import DecodeConfig, ResourcesConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.forced import score_pairs
from mt.deploy.loading import load_model
from mt.eval.dualxent import Direction, DualXent, dual_xent_cost

REPO = Path(__file__).resolve().parents[1]
SRC = ["abc def", "αβγ δεζ ηθ", "的一是 不了", "абв где жз", "xyz", "äöü ßé"]
TGT = ["def abc", "δεζ αβγ", "不了 的", "жз абв", "zyx uvw", "éß üöä"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from mt.deploy.tiny import write_random_checkpoint
    root = tmp_path_factory.mktemp("dualxent")
    return {"fwd": write_random_checkpoint(root / "fwd.pt", seed=0),
            "bwd": write_random_checkpoint(root / "bwd.pt", seed=1, src_lang="de", tgt_lang="en")}


def direction(path: Path) -> Direction:
    loaded = load_model([path], "cpu")
    return Direction(loaded.engine.model, loaded.tokenizer, loaded.engine.max_positions)


def test_cost_is_the_formula_over_both_directions(checkpoints: dict[str, Path], one_thread: None) -> None:
    fwd, bwd = direction(checkpoints["fwd"]), direction(checkpoints["bwd"])
    decode = DecodeConfig(resources=ResourcesConfig(max_tokens=4000))
    got = DualXent(fwd, bwd, decode, "cpu").costs(SRC, TGT)
    h_a = np.array([-s.per_token for s in score_pairs(fwd.model, fwd.tokenizer, SRC, TGT, decode,
                                                       max_positions=fwd.max_positions, device="cpu")])
    h_b = np.array([-s.per_token for s in score_pairs(bwd.model, bwd.tokenizer, TGT, SRC, decode,
                                                       max_positions=bwd.max_positions, device="cpu")])
    assert np.allclose(got, np.abs(h_a - h_b) + (h_a + h_b) / 2, atol=1e-6)
    assert np.allclose(DualXent(fwd, bwd, decode, "cpu")(SRC, TGT), np.exp(-got), atol=1e-6)  # higher = better
    swapped = DualXent(bwd, fwd, decode, "cpu").costs(SRC, TGT)  # each model scoring the other's direction
    assert not np.allclose(got, swapped)
    assert dual_xent_cost(np.array([1.0]), np.array([3.0]))[0] == pytest.approx(4.0)


class CopyModel(torch.nn.Module):
    """A search-interface double that predicts, at target position t, the source token at t: it
    finds a pair likely exactly when the target repeats the source (EOS included)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        batch, width = tgt_in.shape
        logits = torch.zeros(batch, width, self.vocab)
        at = src[:, :width] if src.shape[1] >= width else torch.nn.functional.pad(src, (0, width - src.shape[1]))
        return logits.scatter(2, at.unsqueeze(2), 12.0)


def test_pairs_both_models_find_likely_rank_first(checkpoints: dict[str, Path]) -> None:
    tokenizer: Tokenizer = load_model([checkpoints["fwd"]], "cpu").tokenizer
    model = Direction(CopyModel(tokenizer.tgt_vocab_size), tokenizer, 256)  # type: ignore[arg-type]
    scores = DualXent(model, model, DecodeConfig(), "cpu")(SRC, [SRC[0], *TGT[1:]])
    assert scores[0] > 0.9 and scores[0] == scores.max() and all(scores[1:] < 0.1)


def test_data_clean_keeps_the_best_scoring_share(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mt.cli import app

    root = tmp_path / "in"
    root.mkdir()
    (root / "train.en").write_text("".join(s + "\n" for s in SRC), encoding="utf-8")
    (root / "train.de").write_text("".join(t + "\n" for t in TGT), encoding="utf-8")
    args = ["data", "clean", str(root), "-o", str(tmp_path / "out"), "--set", "clean.rules=[duplicate]",
            "--forward", str(checkpoints["fwd"]), "--backward", str(checkpoints["bwd"]), "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--keep", "0.5", "--dropped-file"])
    assert result.exit_code == 0, result.output
    kept = (tmp_path / "out" / "train.en").read_text(encoding="utf-8").splitlines()
    report = json.loads((tmp_path / "out" / "clean_report.json").read_text())
    assert len(kept) == 3 and report["dropped"] == {"dual_xent": 3} and report["scores"]["scored"] == 6
    dropped = [json.loads(line) for line in (tmp_path / "out" / "clean_dropped.jsonl").read_text().splitlines()]
    cutoff = report["scores"]["cutoff"]
    assert all(float(d["detail"].split()[1]) < cutoff + 1e-4 for d in dropped)
    assert sorted([d["src"] for d in dropped] + kept) == sorted(SRC)
    wrong = CliRunner().invoke(app, [*args[:-4], "--backward", str(checkpoints["fwd"]), "--keep", "0.5"])
    assert wrong.exit_code != 0 and "translates en-de, not de-en" in str(wrong.exception or wrong.output)
