"""`mt export` and `mt translate/evaluate -c DIR` through the real CLI entry point (in-process).

Nothing is trained: a tiny random model whose PAD/BOS/UNK logits are pushed far down (so
CTranslate2's renormalisation over the allowed tokens changes nothing) and whose EOS logit is
raised (so outputs end well before the length limit, where the engines' rules differ).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from test_evaluate import run_cli

from mt.cli import main
from mt.config import Config, DecodeConfig, ModelConfig, SearchConfig, TokenizerConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, train_sentencepiece
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.transformer import Transformer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.requires("ctranslate2")]

WORDS = ("the", "a", "cat", "dog", "sat", "on", "mat", "red", "blue", "house", "tree", "big", "small", "runs",
         "jumps", "over", "under", "green")
LINES = ["the cat sat on the mat", "", "a big red dog runs", "blue house", "   ", "the small tree on a mat",
         "a dog", "red red blue"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import random

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(300)]
    tok = train_sentencepiece(corpus, corpus, TokenizerConfig(vocab_size=40, joint=True, byte_fallback=False))
    cfg = Config(name="toy", model=ModelConfig(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                                               dropout=0.0, norm="pre", tie_embeddings=False, max_positions=64),
                 decode=DecodeConfig(search=SearchConfig(beam=4, length_penalty="average", alpha=1.0, max_len_a=1.5, max_len_b=5)))
    torch.manual_seed(0)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=True).eval()
    with torch.no_grad():
        model.out_proj.bias[[PAD_ID, BOS_ID, UNK_ID]] = -30.0
        model.out_proj.bias[EOS_ID] = 1.5
    path = tmp_path_factory.mktemp("run") / "toy" / "checkpoints" / "best.pt"
    path.parent.mkdir(parents=True)
    save_checkpoint(path, inference_state(cfg, tok, model, update=7, epoch=1))
    return path


@pytest.fixture(scope="module")
def exported(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    mp = pytest.MonkeyPatch()
    out = {}
    try:
        for q in ("none", "int8"):
            out[q] = tmp_path_factory.mktemp("export") / f"ct2-{q}"
            mp.setattr(sys, "argv", ["mt", "export", str(ckpt), "--format", "ctranslate2", "-o", str(out[q]),
                                     "--quantization", q])
            with pytest.raises(SystemExit) as e:
                main()
            assert e.value.code in (0, None)
    finally:
        mp.undo()
    return out


def translate(monkeypatch, capsys, model: Path, inp: Path, *extra: str) -> list[str]:
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", model, "-i", inp, *extra)
    assert code == 0, err
    return out.splitlines()


@pytest.mark.parametrize("beam", ["1", "4"])
def test_exported_translates_like_checkpoint(ckpt, exported, tmp_path, monkeypatch, capsys, beam: str) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    # The loop guard's n-gram ban is CTranslate2's own, applied before its log-softmax: greedy output
    # is the same (beam 1 here, with the default guard), beam scores not where a ban fired (mt/deploy/ct2.py).
    guard = () if beam == "1" else ("--no-repeat-ngram", "0")
    native = translate(monkeypatch, capsys, ckpt, inp, "--beam", beam, *guard)
    assert len(native) == len(LINES) and native[1] == "" and native[4] == "   "  # whitespace kept as it was
    assert any(native)  # not all empty: the comparison means something
    assert translate(monkeypatch, capsys, exported["none"], inp, "--beam", beam, *guard) == native
    assert len(translate(monkeypatch, capsys, exported["int8"], inp, "--beam", beam)) == len(LINES)


def test_exported_nbest_scores_match(ckpt, exported, tmp_path, monkeypatch, capsys) -> None:
    """The 1-best with its score (re-scored by CTranslate2 with the model's own log-probs); lower
    n-best entries may differ where hypotheses reach the length limit (README), so only their count."""
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(LINES[:4]) + "\n", encoding="utf-8")
    native = translate(monkeypatch, capsys, ckpt, inp, "--n-best", "1", "--beam", "4", "--no-repeat-ngram", "0")
    ct2 = translate(monkeypatch, capsys, exported["none"], inp, "--n-best", "1", "--beam", "4", "--no-repeat-ngram", "0")
    assert [line.rsplit(" ||| ", 1)[0] for line in ct2] == [line.rsplit(" ||| ", 1)[0] for line in native]
    for a, b in zip(native, ct2):
        assert abs(float(a.rsplit(" ||| ", 1)[1]) - float(b.rsplit(" ||| ", 1)[1])) < 1e-3
    two = translate(monkeypatch, capsys, exported["none"], inp, "--n-best", "2")
    assert [line.split(" ||| ")[0] for line in two] == ["0", "0", "1", "2", "2", "3", "3"]  # line 1 is empty: one line


def test_evaluate_exported_writes_report(exported, tmp_path, monkeypatch, capsys) -> None:
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", exported["int8"], "--src", src, "--ref", ref,
                             "--out-dir", tmp_path / "eval")
    assert code == 0, err
    assert "BLEU" in out
    reports = list((tmp_path / "eval").glob("*.json"))
    assert len(reports) == 1 and "ct2-int8" in reports[0].name
    assert "bleu" in json.loads(reports[0].read_text())


def test_exported_dir_refuses_gpu_device_and_bad_format(ckpt, exported, tmp_path, monkeypatch, capsys) -> None:
    inp = tmp_path / "in.txt"
    inp.write_text("a dog\n", encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", exported["none"], "-i", inp, "--device", "cuda")
    assert code != 0 and "runs on the CPU" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(monkeypatch, capsys, "export", ckpt, "--format", "onnx", "-o", tmp_path / "x")
    assert code != 0 and "ctranslate2" in err
