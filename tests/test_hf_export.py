"""`mt export --format hf`: tiny random mt models of each exportable layout become transformers
directories whose MarianMTModel scores and searches as mt does, whose tokenizer and generate give
`mt translate`'s text, and which import back to the same weights; pre-LN is refused in one line."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest
import torch
from test_evaluate import run_cli

from conftest import require
from mt.config import TokenizerConfig
from mt.config_load import config_from_dict
from mt.data.tokenizer import EOS_ID, Tokenizer, train_sentencepiece
from mt.decode.rules import SearchSettings
from mt.decode.search import greedy_search
from mt.decode.translate import translate_lines
from mt.deploy.hf_export import export_hf
from mt.deploy.hf_import import import_marian
from mt.errors import MTError
from mt.model.checkpoint import inference_state, load_for_inference, read_checkpoint, save_checkpoint
from mt.model.transformer import Transformer
from tests.support.hfdirs import LINES, marian_dir

pytestmark = pytest.mark.requires("transformers", "safetensors")

LAYOUTS = {  # mt model options of each exportable layout (all post-LN)
    "interleaved-tied-relu": dict(activation="relu"),
    "halves-untied-swish": dict(activation="swish", positions="halves", tie_embeddings=False),
    "gelu-unscaled-bias": dict(activation="gelu", scale_embedding=False, final_logits_bias=True),
}
SRC = [s for s, _ in LINES[40:56]]
BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


@functools.cache
def _tokenizer(tok_cfg: TokenizerConfig, targets: tuple[str, ...], tags: bool) -> Tokenizer:
    return train_sentencepiece([s for s, _ in LINES], [t for _, t in LINES], tok_cfg, targets, tags=tags)


def write_model(path: Path, seed: int, model: dict, *, norm: str = "post", pairs: bool = False) -> Path:
    """A tiny random mt checkpoint with peaked distributions (weights scaled up, </s> favoured)."""
    data = {"src_lang": "en", "tgt_lang": "de"}
    if pairs:
        data = {"pairs": [{"path": "x", "src_lang": "en", "tgt_lang": "de"}, {"path": "x", "src_lang": "en", "tgt_lang": "fr"}]}
    cfg = config_from_dict({"name": f"m{seed}", "data": data, "tokenizer": {"vocab_size": 320, "joint": True},
                            "model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 2, "d_ff": 64,
                                      "dropout": 0.0, "max_positions": 64, "norm": norm, **model},
                            "decode": {"beam": 1, "max_len_a": 0.0, "max_len_b": 12}})
    tok = _tokenizer(cfg.tokenizer, cfg.data.target_langs, pairs)
    torch.manual_seed(seed)
    net = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=True)
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.mul_(2.0 if p.dim() > 1 else 1.0).add_(0.1 * torch.randn_like(p) if "norm" in name else 0)
        net.tgt_embed.weight[EOS_ID] *= 2.0
        if cfg.model.final_logits_bias:
            net.final_logits_bias.copy_(torch.randn_like(net.final_logits_bias))
    save_checkpoint(path, inference_state(cfg, tok.for_target("de") if pairs else tok, net))
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, one_thread) -> dict[str, tuple]:
    """layout -> (mt checkpoint, transformers directory)."""
    require("transformers")
    root = tmp_path_factory.mktemp("export")
    out = {}
    for i, (name, model) in enumerate(LAYOUTS.items()):
        ckpt = write_model(root / f"{name}.pt", i, model)
        out[name] = (ckpt, export_hf(ckpt, root / name))
    return out


def test_transformers_scores_and_translates_as_mt(exported: dict[str, tuple]) -> None:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    for name, (ckpt, d) in exported.items():
        model, tok, cfg = load_for_inference(ckpt, "cpu")
        hf, hf_tok = AutoModelForSeq2SeqLM.from_pretrained(d).eval(), AutoTokenizer.from_pretrained(d)
        batch = hf_tok(SRC, return_tensors="pt", padding=True)
        assert batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist() == tok.encode_src(SRC[:1])[0] + [EOS_ID]
        src_ids = [ids + [EOS_ID] for ids in tok.encode_src(SRC)]
        width = max(map(len, src_ids))
        s = torch.tensor([ids + [0] * (width - len(ids)) for ids in src_ids])
        mask = s.ne(0)
        with torch.no_grad():
            ours = greedy_search(model.eval(), s, mask,
                                 SearchSettings(max_len_a=0.0, max_len_b=12, forbid_unk=True,
                                                no_repeat_ngram_size=cfg.decode.search.no_repeat_ngram_size))  # generation_config has it
            gen = hf.generate(**batch, num_beams=1, max_new_tokens=13)
            for seq, row in zip(ours, gen.tolist()):
                assert [i for i in row[1:] if i not in (0, EOS_ID)] == seq, name
            t_in = torch.tensor([[2] + seq + [0] * (13 - len(seq)) for seq in ours])
            want = model(s, mask, t_in).log_softmax(-1)
            got = hf(**batch, decoder_input_ids=t_in).logits.log_softmax(-1)
        for b, seq in enumerate(ours):  # the real positions: BOS + the greedy output
            n = len(seq) + 1
            assert (got[b, :n] - want[b, :n]).abs().max() < 1e-4, (name, (got[b, :n] - want[b, :n]).abs().max())
        # mt writes one line per translation: byte pieces of line breaks (random models emit them) become spaces;
        texts = [t.translate(BREAKS) for t in hf_tok.batch_decode(gen, skip_special_tokens=True)]
        # MarianTokenizer also strips the ends of the text (a final "▁" piece leaves a space in mt's)
        assert texts == [t.strip() for t in translate_lines(model, tok, SRC, cfg.decode, device="cpu")], name


def test_round_trip_same_weights(exported: dict[str, tuple], tmp_path: Path) -> None:
    ckpt, d = exported["halves-untied-swish"]
    import_marian(d, tmp_path / "back.pt")
    before, after = read_checkpoint(ckpt), read_checkpoint(tmp_path / "back.pt")
    assert before.config.model == after.config.model
    assert before.weights.keys() == after.weights.keys()
    assert all(torch.equal(before.weights[k], after.weights[k]) for k in before.weights)
    # an imported OPUS-MT-style model (pad = decoder start, a never-predicted row) goes out and back unchanged
    opus = marian_dir(tmp_path / "opus", seed=5)
    import_marian(opus, tmp_path / "a.pt")
    import_marian(export_hf(tmp_path / "a.pt", tmp_path / "out"), tmp_path / "b.pt")
    a, b = read_checkpoint(tmp_path / "a.pt"), read_checkpoint(tmp_path / "b.pt")
    assert all(torch.equal(a.weights[k], b.weights[k]) for k in a.weights) and a.tokenizer.model_bytes() == b.tokenizer.model_bytes()


def test_multi_pair_model_exports_its_target_tags(tmp_path: Path) -> None:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    d = export_hf(write_model(tmp_path / "multi.pt", 7, {}, pairs=True), tmp_path / "multi")
    vocab = json.loads((d / "vocab.json").read_text())
    assert ">>de<<" in vocab and ">>fr<<" in vocab
    model, tok, cfg = load_for_inference(tmp_path / "multi.pt", "cpu")
    hf, hf_tok = AutoModelForSeq2SeqLM.from_pretrained(d).eval(), AutoTokenizer.from_pretrained(d)
    fr = tok.for_target("fr")
    assert hf_tok([">>fr<<" + SRC[0]])["input_ids"][0] == fr.encode_src(SRC[:1])[0] + [EOS_ID]
    batch = hf_tok([">>fr<<" + line for line in SRC[:6]], return_tensors="pt", padding=True)
    with torch.no_grad():
        texts = hf_tok.batch_decode(hf.generate(**batch, num_beams=1, max_new_tokens=13), skip_special_tokens=True)
    ours = translate_lines(model, fr, SRC[:6], cfg.decode, device="cpu")
    assert [t.translate(BREAKS) for t in texts] == [t.strip() for t in ours]
    card = (d / "README.md").read_text()
    assert card.startswith("---\nlanguage:\n- en\n- de\n- fr\nlicense:") and "pipeline_tag: translation" in card


def test_pre_ln_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    pre = write_model(tmp_path / "pre.pt", 3, {}, norm="pre")
    with pytest.raises(MTError, match="pre-LN models"):
        export_hf(pre, tmp_path / "pre")
    code, _, err = run_cli(monkeypatch, capsys, "export", pre, "--format", "hf", "-o", tmp_path / "x")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pre-LN" in err, err
    assert not (tmp_path / "x").exists()


def test_export_says_what_it_cannot_match_and_names_no_local_path(tmp_path: Path) -> None:
    """Issue 45, item 8: GNMT's α = 0.6 was exported as transformers' length_penalty 1.0 (|y|^1:
    long outputs favoured) while the guide said beam search stops "as mt does", and the README
    carried the checkpoint's absolute path."""
    require("transformers")
    from mt.deploy.hf_export import hf_length_penalty

    assert hf_length_penalty("average", 0.7, 64) == 0.7 and hf_length_penalty("none", 0.6, 64) == 0.0
    p = hf_length_penalty("gnmt", 0.6, 64)
    assert 0.3 < p < 0.6  # GNMT grows like log(5 + |y|): a smaller exponent than 1

    def misfit(q: float) -> float:  # the log-penalty's largest difference from GNMT's over 2..64 (up to a constant)
        lengths = range(2, 65)
        gaps = [0.6 * math.log((5 + n) / 6) - q * math.log(n) for n in lengths]
        return max(abs(gap - sum(gaps) / len(gaps)) for gap in gaps)

    assert misfit(p) < 0.25 and misfit(p) < misfit(1.0) / 5  # 0.21 against the old export's 1.64
    ckpt = write_model(tmp_path / "run" / "m.pt", 0, {})
    exported = export_hf(ckpt, tmp_path / "hf")
    readme = (exported / "README.md").read_text(encoding="utf-8")
    assert str(tmp_path) not in readme and "m.pt" in readme and f"`length_penalty: {p}`" in readme
    generation = json.loads((exported / "generation_config.json").read_text())
    assert generation.get("length_penalty", p) == p  # beam 1 in this config: no beam settings written
