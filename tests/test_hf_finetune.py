"""An imported OPUS-MT-style model fine-tuned end to end through the real CLI: `mt import hf` (its
library call; tests/test_hf_import.py runs the command),
`mt prepare` / `mt train --init-from` (its two sentencepiece models and shared vocabulary reused,
none trained), `mt evaluate`, and `mt serve` answering with `mt translate`'s text."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import httpx
import pytest
import yaml
from test_evaluate import run_cli
from test_serve import server

from mt.decode.translate import translate_texts
from mt.deploy.hf_import import import_marian
from mt.model.checkpoint import load_for_inference, read_checkpoint
from mt.text.segment import segmenter_for
from tests.support.hfdirs import marian_dir

pytestmark = pytest.mark.requires("transformers", "safetensors", "httpx", "fastapi", "uvicorn")


def test_import_finetune_evaluate_serve(tmp_path: Path, multi30k_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    def cli(*args: object) -> str:  # in this process (the CLI's own code path, no interpreter start-up)
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, out + err
        return out

    import_marian(marian_dir(tmp_path / "opus-mt-tiny", seed=9), tmp_path / "base.pt")
    cfg = tmp_path / "ft.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "ft", "run_root": str(tmp_path / "runs"),
        "data": {"path": str(multi30k_dir), "src_lang": "en", "tgt_lang": "de", "train_limit": 200},
        "train": {"max_updates": 3, "valid_every": 0, "valid_bleu": False, "log_every": 1, "threads": 1,
                  "warmup": 2, "precision": "fp32", "max_tokens": 1024, "init_from": str(tmp_path / "base.pt")}}))
    out = cli("prepare", cfg)
    assert "reusing the tokenizer" in out and "trained unigram sentencepiece" not in out
    cli("train", cfg)
    last = tmp_path / "runs" / "ft" / "checkpoints" / "last.pt"
    tuned, base = read_checkpoint(last), read_checkpoint(tmp_path / "base.pt")
    assert tuned.update == 3 and tuned.tokenizer.model_bytes() == base.tokenizer.model_bytes()
    assert tuned.config.model == base.config.model and tuned.init_from["sha256"]

    lines = [line.decode() for line in gzip.open(multi30k_dir / "val.en.gz").read().splitlines()[:20]]
    refs = [line.decode() for line in gzip.open(multi30k_dir / "val.de.gz").read().splitlines()[:20]]
    (tmp_path / "src.en").write_text("\n".join(lines) + "\n")
    (tmp_path / "ref.de").write_text("\n".join(refs) + "\n")
    out = cli("evaluate", "-c", last, "--src", tmp_path / "src.en", "--ref", tmp_path / "ref.de", "--beam", "1",
              "--out-dir", tmp_path / "eval")
    assert "BLEU" in out
    with server(last, "--beam", "1") as (url, _):
        got = httpx.post(url + "/translate", json={"q": lines[:3], "source": "en", "target": "de"}, timeout=60)
    model, tok, _ = load_for_inference(last, "cpu")
    want = translate_texts(model, tok, lines[:3], dataclasses.replace(tuned.config.decode, search=dataclasses.replace(tuned.config.decode.search, beam=1)), device="cpu",
                           segmenter=segmenter_for("en", "de"))  # what mt translate writes
    assert got.status_code == 200 and got.json()["translatedText"] == want
