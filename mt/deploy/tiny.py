"""A tiny random-weight mt checkpoint, built in seconds with no corpus: for fuzzing and memory
benchmarks of `mt translate` and `mt serve` (the tests' `random_ckpt`, scripts/bench/ and
scripts/stress/), where what matters is the plumbing, not translation quality; and to try `mt serve`
without training anything:

    python -m mt.deploy.tiny out.pt
    mt serve -c out.pt

The tokenizer is a joint sentencepiece model trained on seeded synthetic sentences in several
scripts (Latin with diacritics, Greek, Cyrillic, a little CJK); anything else a user types maps
to <unk>. Decoding is greedy with output length at most 0.5 x |source| + 5 pieces, so random
weights (which rarely pick EOS) still finish quickly.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch

from mt.config import Config
from mt.config_load import config_from_dict
from mt.data.tokenizer import train_sentencepiece
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.transformer import Transformer

_ALPHABETS = ("abcdefghijklmnopqrstuvwxyz", "äöüßéèàçñ", "αβγδεζηθικλμνξοπρστυφχψω",
              "абвгдежзийклмнопрстуфхцчшщыэюя",
              "的一是不了人我在有他这中大来上国个到说们")


def tiny_config(name: str = "tiny-random", src_lang: str = "en", tgt_lang: str = "de") -> Config:
    """The config stored in the checkpoint (d_model 32, 1+1 layers, 256 positions, greedy, short outputs)."""
    return config_from_dict({
        "name": name,
        "data": {"src_lang": src_lang, "tgt_lang": tgt_lang},
        "tokenizer": {"vocab_size": 400, "joint": True},
        "model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 64,
                  "dropout": 0.0, "max_positions": 256},
        "decode": {"search": {"beam": 1, "max_len_a": 0.5, "max_len_b": 5},
                   "resources": {"max_tokens": 4000}},
    })


def synthetic_sentences(n: int, seed: int) -> list[str]:
    """`n` seeded sentences of random words, each word from one of `_ALPHABETS`."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(1, 12)):
            alphabet = rng.choice(_ALPHABETS)
            words.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 7))))
        lines.append(" ".join(words) + rng.choice(["", ".", "?", "!", ","]))
    return lines


def write_random_checkpoint(path: Path, *, seed: int = 0, src_lang: str = "en", tgt_lang: str = "de") -> Path:
    """Train the tiny tokenizer, initialise the model from `seed`, save an inference checkpoint at
    `path` (its config says it translates `src_lang` into `tgt_lang`)."""
    cfg = tiny_config(src_lang=src_lang, tgt_lang=tgt_lang)
    sample = synthetic_sentences(3000, seed)
    tokenizer = train_sentencepiece(sample, sample, cfg.tokenizer)
    torch.manual_seed(seed)
    model = Transformer(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        joint_vocab=tokenizer.joint)
    save_checkpoint(path, inference_state(cfg, tokenizer, model))
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m mt.deploy.tiny OUT.pt")
    print(write_random_checkpoint(Path(sys.argv[1])))
