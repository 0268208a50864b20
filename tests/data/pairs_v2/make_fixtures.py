"""How the files in this folder were made: prepared caches and checkpoints as mt wrote them at
commit 47f86fc (cache version 2, checkpoints whose config has `data.pairs: []` for a bilingual
model), before a bilingual config became one untagged pair (issue 33). tests/test_old_files.py
checks that today's code rebuilds such caches byte for byte and loads such checkpoints.

They cannot be rebuilt by today's code (that is their point): to remake them, check out 47f86fc
and run `PYTHONPATH=<that checkout>:. python tests/data/pairs_v2/make_fixtures.py` from this repo
(that checkout's mt, this one's tests.support.langdata).
The corpora are not stored: `corpus(root, lang)` writes them again, byte for byte.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tests.support.langdata import pairs as lang_pairs
from tests.support.langdata import write_text_corpus

HERE = Path(__file__).resolve().parent

SIZES = {"de": 120, "ru": 60}  # training pairs; 20 val and 20 test pairs each
MODEL = {"d_model": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 32, "dropout": 0.0,
         "max_positions": 64}
DECODE = {"beam": 1, "max_len_a": 1.0, "max_len_b": 5}
LINES = ["He reads a book at home.", "", "Does the cat drink tea today?", "Look, we buy bread!"]


def corpus(root: Path, lang: str) -> Path:
    """The en-`lang` text corpus (train, val, test) the fixtures were prepared from, under root/en-lang."""
    n = SIZES[lang]
    rows = lang_pairs(lang, n + 40, seed=3)
    return write_text_corpus(root / f"en-{lang}", "en", lang,
                             {"train": rows[:n], "val": rows[n:n + 20], "test": rows[n + 20:]})


def raw_config(name: str, root: Path, runs: Path) -> dict:
    """The config of fixture `name` ("bilingual" or "multi") reading corpora under `root`."""
    if name == "bilingual":
        data = {"path": str(root / "en-de"), "src_lang": "en", "tgt_lang": "de", "test_splits": ["test"]}
        vocab = 100
    else:
        data = {"test_splits": ["test"], "pair_temperature": 2.0,
                "pairs": [{"path": str(root / "en-de"), "src_lang": "en", "tgt_lang": "de"},
                          {"path": str(root / "en-ru"), "src_lang": "en", "tgt_lang": "ru"}]}
        vocab = 160
    return {"name": name, "run_root": str(runs), "data": data,
            "tokenizer": {"vocab_size": vocab, "byte_fallback": False}, "model": MODEL, "decode": DECODE}


def main() -> None:
    import torch

    from mt.config_load import config_from_dict
    from mt.data.pairs import prepare_run
    from mt.data.tokenizer import Tokenizer
    from mt.decode.translate import translate_lines
    from mt.model.checkpoint import inference_state, save_checkpoint
    from mt.model.transformer import Transformer

    expected: dict[str, dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for lang in SIZES:
            corpus(root, lang)
        for name in ("bilingual", "multi"):
            cfg = config_from_dict(raw_config(name, root, root / "runs"))
            run = prepare_run(cfg)
            dest = HERE / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(run, dest)
            tokenizer = Tokenizer.from_files(run)
            torch.manual_seed(0)
            model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                                joint_vocab=tokenizer.joint).eval()
            save_checkpoint(HERE / f"{name}.pt", inference_state(cfg, tokenizer, model, update=7))
            targets = [p.tgt_lang for p in cfg.data.pairs] or [None]
            expected[name] = {str(lang): translate_lines(model, tokenizer.for_target(lang) if lang else tokenizer,
                                                         LINES, cfg.decode, device="cpu")
                              for lang in targets}
    (HERE / "expected.json").write_text(json.dumps({"lines": LINES, "translations": expected}, indent=1,
                                                   ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
