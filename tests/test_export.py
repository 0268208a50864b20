"""CTranslate2 export: the exported model computes mt's log-probs, greedy and beam outputs.

Random tiny models (LayerNorms and biases perturbed so that no parameter is at its trivial
init) check per-token log-probs for every architecture option; a tiny model trained for a few
hundred updates on a reverse task checks greedy and beam search output against `mt.decode.search`.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mt.config import Config, ModelConfig, TokenizerConfig
from mt.data.batching import collate, collate_source
from mt.data.tokenizer import Tokenizer, train_sentencepiece
from mt.decode.beam import beam_search
from mt.decode.rules import SearchSettings
from mt.decode.search import greedy_search
from mt.deploy.card import model_card_for
from mt.deploy.ct2 import CT2Translator
from mt.deploy.export import export_ctranslate2, is_export_dir, read_export_info
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.transformer import Transformer

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.requires("ctranslate2")]

WORDS = ("the", "a", "cat", "dog", "sat", "on", "mat", "red", "blue", "house", "tree", "big", "small", "runs",
         "jumps", "over", "under", "green")


def _lines(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizers() -> dict[bool, Tokenizer]:
    """joint (40 pieces) and separate (40 source / 32 target pieces) sentencepiece models."""
    lines = _lines(0)
    joint = train_sentencepiece(lines, lines, TokenizerConfig(vocab_size=40, joint=True, byte_fallback=False))
    tgt = train_sentencepiece(lines, lines, TokenizerConfig(vocab_size=32, joint=True, byte_fallback=False))
    separate = Tokenizer.from_bytes(joint.model_bytes()["src"], tgt.model_bytes()["src"])
    assert (separate.src_vocab_size, separate.tgt_vocab_size) == (40, 32)
    return {True: joint, False: separate}


def _config(norm: str, activation: str, tie: bool, *, max_positions: int = 64) -> Config:
    return Config(name="toy", model=ModelConfig(d_model=32, heads=4, encoder_layers=2, decoder_layers=2, d_ff=64,
                                                dropout=0.0, norm=norm, activation=activation,
                                                tie_embeddings=tie, max_positions=max_positions))


def _random_model(cfg: Config, tok: Tokenizer, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint).eval()
    with torch.no_grad():  # LayerNorm gains/biases and linear biases away from their init values
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _export(tmp: Path, cfg: Config, tok: Tokenizer, model: Transformer, *, quantization: str = "none") -> Path:
    ckpt = tmp / "runs" / cfg.name / "checkpoints" / "best.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(ckpt, inference_state(cfg, tok, model, update=123, epoch=4))
    return export_ctranslate2(ckpt, tmp / f"ct2-{quantization}", quantization=quantization)


def _mt_log_probs(model: Transformer, src: list[list[int]], tgt: list[list[int]]) -> list[list[float]]:
    batch = collate([np.array(s, dtype=np.int32) for s in src], [np.array(t, dtype=np.int32) for t in tgt],
                    list(range(len(src))))
    with torch.no_grad():
        lp = model(batch.src, batch.src_mask, batch.tgt_in).float().log_softmax(-1)
    picked = lp.gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
    return [picked[i, : len(t) + 1].tolist() for i, t in enumerate(tgt)]


@pytest.mark.parametrize("joint", [True, False], ids=["joint", "separate"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_scores_match_teacher_forced_log_probs(tmp_path: Path, tokenizers: dict[bool, Tokenizer], norm: str,
                                               activation: str, tie: bool, joint: bool) -> None:
    tok = tokenizers[joint]
    cfg = _config(norm, activation, tie)
    model = _random_model(cfg, tok)
    ct2 = CT2Translator(_export(tmp_path, cfg, tok, model), threads=1)
    lines = _lines(1, 6)
    src, tgt = tok.encode_src(lines), tok.encode_tgt(list(reversed(lines)))
    tgt[0] = []  # an empty target: only EOS is scored
    ours, theirs = _mt_log_probs(model, src, tgt), ct2.score_ids(src, tgt)
    for a, b in zip(ours, theirs):
        assert len(a) == len(b)
        assert np.allclose(a, b, atol=1e-4, rtol=0), (a, b)
    # greedy is token-identical even on an untrained model (banned tokens do not move the argmax)
    src_t, src_mask = collate_source(src)
    with torch.no_grad():
        expected = greedy_search(model, src_t, src_mask,
                                 SearchSettings(max_len_a=1.0, max_len_b=3, forbid_unk=True))
    got = ct2.translate_ids(src, SearchSettings(beam=1, alpha=0.0, length_penalty="none", max_len_a=1.0,
                                                max_len_b=3, n_best=1, forbid_unk=True))
    assert [h[0][0] for h in got] == expected


# --- a briefly trained model: reverse the source ids -------------------------------------------

V_SRC = 40


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tokenizers: dict[bool, Tokenizer]):
    """(model, tokenizer, exported dir, test sources) of a model trained to reverse its input."""
    tok = tokenizers[True]
    cfg = _config("pre", "relu", True)
    torch.manual_seed(0)
    model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    model.train()
    for _ in range(250):
        src = [rng.integers(4, V_SRC, rng.integers(2, 8)).astype(np.int32) for _ in range(32)]
        batch = collate(src, [s[::-1].copy() for s in src], list(range(32)))
        logits = model(batch.src, batch.src_mask, batch.tgt_in)
        # plain cross-entropy: no label-smoothing mass on PAD/BOS, which CTranslate2 renormalises away
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = _export(tmp_path_factory.mktemp("trained"), cfg, tok, model)
    tests = [rng.integers(4, V_SRC, n).tolist() for n in (2, 3, 5, 6, 7, 7, 4, 3)]
    return model, tok, out, tests


def test_trained_model_greedy_identical(trained) -> None:
    model, _, out, tests = trained
    ct2 = CT2Translator(out, threads=1)
    src, src_mask = collate_source(tests)
    for a, b in ((1.0, 2), (0.0, 3), (1.0, -5)):  # the last two hit the length limit (and limit 0)
        with torch.no_grad():
            expected = greedy_search(model, src, src_mask,
                                     SearchSettings(max_len_a=a, max_len_b=b, forbid_unk=True))
        got = ct2.translate_ids(tests, SearchSettings(beam=1, alpha=0.0, length_penalty="none", max_len_a=a,
                                                      max_len_b=b, n_best=1, forbid_unk=True))
        assert [h[0][0] for h in got] == expected


@pytest.mark.parametrize("kind,alpha,n_best", [("average", 1.0, 4), ("average", 0.6, 1), ("none", 0.0, 2),
                                               ("gnmt", 0.6, 1)])
def test_trained_model_beam_identical(trained, kind: str, alpha: float, n_best: int) -> None:
    model, _, out, tests = trained
    ct2 = CT2Translator(out, threads=1)
    src, src_mask = collate_source(tests)
    with torch.no_grad():
        expected = beam_search(model, src, src_mask,
                               SearchSettings(beam=4, alpha=alpha, length_penalty=kind, max_len_a=1.5,
                                              max_len_b=5, n_best=n_best, forbid_unk=True))
    got = ct2.translate_ids(tests, SearchSettings(beam=4, alpha=alpha, length_penalty=kind, max_len_a=1.5,
                                                  max_len_b=5, n_best=n_best,
                                                  forbid_unk=True), exact_scores=True)
    fast = ct2.translate_ids(tests, SearchSettings(beam=4, alpha=alpha, length_penalty=kind, max_len_a=1.5,
                                                   max_len_b=5, n_best=n_best, forbid_unk=True))
    for exp, hyps, approx in zip(expected, got, fast):
        assert [h.tokens for h in exp] == [tokens for tokens, _ in hyps]
        assert np.allclose([h.score for h in exp], [s for _, s in hyps], atol=1e-4, rtol=0)
        # without re-scoring, CTranslate2 renormalises over the allowed tokens: close, not equal
        assert [h.tokens for h in exp] == [tokens for tokens, _ in approx]
        assert np.allclose([h.score for h in exp], [s for _, s in approx], atol=0, rtol=0.05)


def test_trained_model_learned_the_task(trained) -> None:
    _, _, out, tests = trained
    got = CT2Translator(out, threads=1).translate_ids(tests,
                                                      SearchSettings(beam=4, alpha=1.0,
                                                                     length_penalty="average", max_len_a=1.5,
                                                                     max_len_b=5, n_best=1, forbid_unk=True))
    assert sum(h[0][0] == t[::-1] for h, t in zip(got, tests)) >= len(tests) // 2


def test_int8_export_translates(trained, tmp_path: Path) -> None:
    model, tok, _, tests = trained
    out = _export(tmp_path, _config("pre", "relu", True), tok, model, quantization="int8")
    assert read_export_info(out)["quantization"] == "int8"
    got = CT2Translator(out, threads=1).translate_ids(tests,
                                                      SearchSettings(beam=4, alpha=1.0,
                                                                     length_penalty="average", max_len_a=1.5,
                                                                     max_len_b=5, n_best=1, forbid_unk=True))
    assert len(got) == len(tests)
    assert all(len(h) == 1 and len(h[0][0]) > 0 for h in got)


def test_export_directory_contents(tmp_path: Path, tokenizers: dict[bool, Tokenizer]) -> None:
    tok = tokenizers[False]
    cfg = _config("post", "relu", False)
    eval_dir = tmp_path / "runs" / cfg.name / "eval"
    eval_dir.mkdir(parents=True)
    (eval_dir / "test2016.best.beam5.json").write_text(json.dumps({"bleu": 35.4, "chrf": 61.2, "ter": 47.0}))
    out = _export(tmp_path, cfg, tok, _random_model(cfg, tok))
    names = {p.name for p in out.iterdir()}
    assert {"model.bin", "config.json", "source_vocabulary.json", "target_vocabulary.json", "spm.src.model",
            "spm.tgt.model", "mt_export.json", "MODEL_CARD.md"} <= names
    assert is_export_dir(out) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    info = read_export_info(out)
    assert (info["update"], info["epoch"], info["joint_vocab"]) == (123, 4, False)
    assert info["scores"] == {"test2016.best.beam5": {"bleu": 35.4, "chrf": 61.2, "ter": 47.0}}
    assert info["config"]["model"]["norm"] == "post"
    assert json.loads((out / "config.json").read_text())["add_source_eos"] is True
    assert "35.4" in (out / "MODEL_CARD.md").read_text()
    vocab = json.loads((out / "target_vocabulary.json").read_text())
    assert vocab[:4] == ["<pad>", "<unk>", "<s>", "</s>"] and len(vocab) == 32


def test_model_card_is_one_function_for_checkpoint_export_and_markdown(tmp_path: Path,
                                                                        tokenizers: dict[bool, Tokenizer]) -> None:
    """`mt serve`'s /v1/model-card (the loaded model's card source, as model_card_for makes it from the
    .pt or the export dir) and MODEL_CARD.md agree, both written out here by hand from what the model
    was made of."""
    import ctranslate2

    tok = tokenizers[True]
    cfg = _config("pre", "gelu", True)
    eval_dir = tmp_path / "runs" / cfg.name / "eval"
    eval_dir.mkdir(parents=True)
    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.0"
    (eval_dir / "test2016.json").write_text(json.dumps({"bleu": 35.4, "chrf": 61.2, "ter": 47.0,
                                                        "bleu_signature": signature, "hyps": ["x"]}))
    (eval_dir / "broken.json").write_text("{half")
    model = _random_model(cfg, tok)
    out = _export(tmp_path, cfg, tok, model)
    ckpt = tmp_path / "runs" / cfg.name / "checkpoints" / "best.pt"
    card = model_card_for(ckpt)
    assert model_card_for(out) == card
    # d_model 32, 2+2 layers, d_ff 64, one 40-piece vocabulary shared by both sides and the output:
    # embedding 40*32 = 1,280; encoder layer: attention 4*(32*32+32) = 4,224, feed-forward
    # 32*64+64+64*32+32 = 4,192, 2 LayerNorms 128 -> 8,544; decoder layer: 2 attentions 8,448 +
    # 4,192 + 3 LayerNorms 192 = 12,832; final LayerNorms (pre-LN) 2*64 = 128.
    parameters = 1280 + 2 * 8544 + 2 * 12832 + 128
    assert parameters == 44160 == sum(p.numel() for p in model.parameters())  # tied: counted once
    assert card["checkpoint"] == str(ckpt.resolve())
    assert card["model"] == {"parameters": parameters, "d_model": 32, "heads": 4, "encoder_layers": 2,
                             "decoder_layers": 2, "d_ff": 64, "norm": "pre", "activation": "gelu",
                             "tie_embeddings": True}
    assert card["vocabulary"] == {"joint": True, "source": 40, "target": 40}
    assert card["languages"] == {"source": "en", "target": "de"}
    assert (card["update"], card["epoch"], card["validation"]) == (123, 4, {})
    for path in (ckpt, out):  # what `mt serve` serves: made from the loaded model's provenance
        assert load_model([path], "cpu").provenance.card_source.card() == card
    assert card["test_scores"] == {"test2016": {"bleu": 35.4, "chrf": 61.2, "ter": 47.0, "bleu_signature": signature}}
    assert card["decode"] == {"beam": 5, "length_penalty": "gnmt", "alpha": 0.6, "max_len_a": 1.5, "max_len_b": 10}
    assert json.loads(json.dumps(card)) == card  # JSON-able as served
    text = (out / "MODEL_CARD.md").read_text()
    assert text.startswith(f"""# toy — mt model exported to CTranslate2

- source checkpoint: `{ckpt.resolve()}` (update 123, epoch 4)
- languages: en -> de
- Transformer: 44,160 parameters, d_model 32, 4 heads, 2+2 layers, d_ff 64, pre-LN, gelu, tied embeddings True
- vocabulary: joint sentencepiece (40 / 40 pieces)
- training data: data/multi30k (text), split train; validation split val
- tokenizer files: spm.model
- weights: float32; CTranslate2 {ctranslate2.__version__}
- the model appends `</s>` to each source itself (config `add_source_eos`): pass plain pieces
- mt decoding defaults: beam 5, length penalty gnmt (alpha 0.6), max length 1.5 * |src| + 10

## Validation (stored in the checkpoint)

none stored

## Scores (from the run's eval reports)

| report | BLEU | chrF | TER | BLEU signature |
|---|---|---|---|---|
| test2016 | 35.4 | 61.2 | 47.0 | `{signature}` |

## Use
"""), text
    with pytest.raises(MTError, match="not an mt export"):
        model_card_for(tmp_path)


def test_export_refuses_non_empty_dir_unless_forced(tmp_path: Path, tokenizers: dict[bool, Tokenizer]) -> None:
    tok = tokenizers[True]
    cfg = _config("pre", "gelu", True)
    out = _export(tmp_path, cfg, tok, _random_model(cfg, tok))
    ckpt = tmp_path / "runs" / cfg.name / "checkpoints" / "best.pt"
    with pytest.raises(MTError, match="not empty"):
        export_ctranslate2(ckpt, out, quantization="none")
    (out / "stale.txt").write_text("x")
    export_ctranslate2(ckpt, out, quantization="int16", force=True)
    assert not (out / "stale.txt").exists() and read_export_info(out)["quantization"] == "int16"
    with pytest.raises(MTError, match="quantization"):
        export_ctranslate2(ckpt, tmp_path / "x", quantization="float8")


def test_too_long_source_is_a_user_error(trained) -> None:
    _, _, out, _ = trained
    with pytest.raises(MTError, match="max_positions"):
        CT2Translator(out, threads=1).translate_ids([[5] * 64],
                                                    SearchSettings(beam=1, alpha=0.0, length_penalty="none",
                                                                   max_len_a=1.0, max_len_b=0, n_best=1,
                                                                   forbid_unk=True))


def test_export_without_ctranslate2_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    with pytest.raises(MTError) as err:
        export_ctranslate2(tmp_path / "missing.pt", tmp_path / "out", quantization="int8")
    assert str(err.value) == 'mt export: needs the ctranslate2 package: pip install -e ".[ct2]"'
