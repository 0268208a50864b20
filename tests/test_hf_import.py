"""`mt import hf`: tiny random MarianMTModel directories (built by tests/support/hfdirs.py, nothing downloaded)
become mt checkpoints that score, search and tokenize exactly as transformers does."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_evaluate import run_cli

from conftest import require
from mt.data.tokenizer import EOS_ID
from mt.decode.beam import beam_search
from mt.decode.rules import SearchSettings
from mt.decode.search import greedy_search
from mt.deploy.hf_import import import_marian
from mt.deploy.marian_map import vocab_order
from mt.errors import MTError
from mt.model.checkpoint import load_for_inference
from tests.support.hfdirs import LINES, marian_dir

pytestmark = pytest.mark.requires("transformers", "safetensors")

SHAPES = [  # (encoder, decoder) layers, heads, activation, tied
    dict(layers=(1, 1), heads=2, activation="swish", tied=True),
    dict(layers=(2, 1), heads=4, activation="gelu", tied=False),
    dict(layers=(1, 2), heads=1, activation="relu", tied=True, scale_embedding=False),
]


def _batch(ids: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, ids))
    t = torch.tensor([seq + [pad] * (width - len(seq)) for seq in ids])
    mask = torch.tensor([[True] * len(seq) + [False] * (width - len(seq)) for seq in ids])
    return t, mask


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory, one_thread) -> list[tuple]:
    """For each shape: (transformers model, MarianTokenizer, mt model, mt tokenizer, mt id -> Marian id)."""
    transformers = require("transformers")
    out = []
    for i, shape in enumerate(SHAPES):
        root = tmp_path_factory.mktemp(f"marian{i}")
        d = marian_dir(root / "hf", seed=i, **shape)
        import_marian(d, root / "model.pt")
        hf = transformers.MarianMTModel.from_pretrained(d).eval()
        cfg = json.loads((d / "config.json").read_text())
        order = vocab_order(cfg["pad_token_id"], 1, cfg["decoder_start_token_id"], cfg["eos_token_id"], cfg["vocab_size"])
        model, tok, _ = load_for_inference(root / "model.pt", "cpu")
        out.append((hf, transformers.MarianTokenizer.from_pretrained(d), model.eval(), tok, order, d))
    return out


def test_log_probs_equal(imported: list[tuple]) -> None:
    src, tgt = [s for s, _ in LINES[:8]], [t for _, t in LINES[:8]]
    for hf, hf_tok, model, tok, order, _ in imported:
        enc = hf_tok(src, text_target=tgt, return_tensors="pt", padding=True)
        labels = enc["labels"]
        with torch.no_grad():
            want = hf(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                      labels=labels).logits.log_softmax(-1)  # (B, T, V_marian)
            s, s_mask = _batch([ids + [EOS_ID] for ids in tok.encode_src(src)], 0)
            y = tok.encode_tgt(tgt)
            t_in, _ = _batch([[2] + ids for ids in y], 0)
            got = model(s, s_mask, t_in).log_softmax(-1)  # (B, T, V_mt)
        real = [k for k, i in enumerate(order) if i is not None]
        for b, ids in enumerate(y):
            n = len(ids) + 1
            assert torch.allclose(got[b, :n, real], want[b, :n, [order[k] for k in real]], atol=1e-4)
            assert (got[b, :n, 0] < -1000).all() or order[0] is not None  # the never-predicted PAD row


def test_greedy_and_beam_equal_generate(imported: list[tuple]) -> None:
    src = [s for s, _ in LINES[20:36]]
    differing, cut = 0, 0
    for hf, hf_tok, model, tok, order, _ in imported:
        enc = hf_tok(src, return_tensors="pt", padding=True)
        s, s_mask = _batch([ids + [EOS_ID] for ids in tok.encode_src(src)], 0)
        with torch.no_grad():
            ours = greedy_search(model, s, s_mask,
                                 SearchSettings(max_len_a=0.0, max_len_b=12, forbid_unk=False))
            theirs = hf.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=13)
            for seq, row in zip(ours, theirs.tolist()):
                row = [i for i in row[1:] if i != hf.config.pad_token_id]
                assert [order[k] for k in seq] + [0] == row or [order[k] for k in seq] == row[:-1]
            beams = beam_search(model, s, s_mask,
                                SearchSettings(beam=4, alpha=1.0, length_penalty="average", max_len_a=0.0,
                                               max_len_b=12, n_best=1, forbid_unk=False))
            theirs = hf.generate(**enc, num_beams=4, do_sample=False, max_new_tokens=13, length_penalty=1.0,
                                 early_stopping=True)
            for hyps, row in zip(beams, theirs.tolist()):
                row = [i for i in row[1:] if i not in (hf.config.pad_token_id, 0)]
                if len(row) == 12 or len(hyps[0].tokens) == 12:  # cut at the limit: EOS scored differently
                    cut += 1
                else:
                    differing += [order[k] for k in hyps[0].tokens] != row
    # transformers' forced EOS at max_length adds log-prob 0, mt's adds log p(</s>) (README: models in and out)
    assert differing == 0 and cut < len(src) * 3 // 2, f"{differing} beam outputs differ from generate(num_beams=4), {cut} cut"


def test_tokenization_of_1000_lines_equals_marian_tokenizer(imported: list[tuple]) -> None:
    from tests.support.langdata import RARE, pairs

    extra = list(RARE.values()) + ["", "  two  spaces ", "ÄÖÜ ß 123"]
    lines = [s for s, _ in pairs("de", 1000 - len(extra), seed=11)] + extra
    _, hf_tok, _, tok, order, _ = imported[0]
    theirs = hf_tok(lines)["input_ids"]
    ours = tok.encode_src(lines)
    assert len(ours) == 1000
    assert [[order[k] for k in seq] + [0] for seq in ours] == theirs
    targets = [t for _, t in pairs("de", 1000, seed=12)]
    assert [[order[k] for k in seq] + [0] for seq in tok.encode_tgt(targets)] == hf_tok(text_target=targets)["input_ids"]


def test_cli_import_and_translate(imported: list[tuple], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture) -> None:
    d, out = imported[0][5], tmp_path / "m.pt"
    code, stdout, err = run_cli(monkeypatch, capsys, "import", "hf", d, "-o", out)
    assert code == 0 and "en->de" in stdout, err
    (tmp_path / "in.txt").write_text("the teacher reads a book .\n")
    code, stdout, err = run_cli(monkeypatch, capsys, "translate", "-c", out, "-i", tmp_path / "in.txt", "--beam", "1")
    assert code == 0 and len(stdout.splitlines()) == 1, err


@pytest.mark.parametrize("break_it, message", [
    ("not_seq2seq", "model_type 'bert' is not a supported transformers seq2seq model"),
    ("no_source_spm", "source.spm: missing"),
    ("vocab_mismatch", "do not match config.json's vocab_size"),
    ("unmapped_field", "field 'activation_function' = 'gelu_new' has no mapping"),
    ("no_config", "config.json: missing"),
])
def test_bad_directories_one_line(imported: list[tuple], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture, break_it: str, message: str) -> None:
    d = tmp_path / "hf"
    shutil.copytree(imported[0][5], d)
    cfg = json.loads((d / "config.json").read_text())
    if break_it == "not_seq2seq":
        cfg["model_type"] = "bert"
    elif break_it == "unmapped_field":
        cfg["activation_function"] = "gelu_new"
    elif break_it == "vocab_mismatch":
        cfg["vocab_size"] = cfg["decoder_vocab_size"] = cfg["vocab_size"] + 3
    (d / "config.json").write_text(json.dumps(cfg))
    if break_it == "no_source_spm":
        (d / "source.spm").unlink()
    if break_it == "no_config":
        (d / "config.json").unlink()
    with pytest.raises(MTError, match=message.replace("(", r"\(")):
        import_marian(d, tmp_path / "out.pt")
    code, _, err = run_cli(monkeypatch, capsys, "import", "hf", d, "-o", tmp_path / "o.pt")
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_imported_model_exports_to_ctranslate2(tmp_path: Path) -> None:
    """The new options (halves positions, swish, the logit bias, the shared vocabulary) reach
    CTranslate2 too: the export translates as the checkpoint does."""
    require("ctranslate2")
    from mt.decode.translate import translate_lines
    from mt.deploy.export import export_ctranslate2
    from mt.deploy.loading import load_model

    import_marian(marian_dir(tmp_path / "hf", seed=4, eos_bias=-2.0), tmp_path / "m.pt")
    model, tok, cfg = load_for_inference(tmp_path / "m.pt", "cpu")
    ct2 = load_model([export_ctranslate2(tmp_path / "m.pt", tmp_path / "ct2")], "cpu")
    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=1, max_len_a=0.0, max_len_b=12))
    src = [s for s, _ in LINES[60:72]]
    ours = translate_lines(model, tok, src, decode, device="cpu")
    assert any(ours) and translate_lines(ct2.engine, ct2.tokenizer, src, decode, device="cpu") == ours
