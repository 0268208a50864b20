"""Tiny `transformers` Marian directories for tests, built here (no hub access): OPUS-MT's layout
(config.json, model.safetensors, source.spm, target.spm, vocab.json) with random weights.

`marian_dir(root, ...)` trains a source and a target sentencepiece model on the synthetic English-
German pairs of `langdata`, numbers their pieces in one vocabulary as OPUS-MT does (</s> 0, <unk> 1,
the pieces, <pad> last; the decoder starts from <pad>), and saves a randomly initialised
MarianMTModel with weights large enough that its distributions are peaked (greedy and beam
choices are then not decided by float rounding).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
from langdata import pairs

LINES = pairs("de", 600, seed=3)


def _spm(lines: list[str], vocab_size: int) -> bytes:
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2, num_threads=1,
                                   byte_fallback=False)
    return out.getvalue()


def _pieces(model: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def marian_dir(root: Path, *, layers: tuple[int, int] = (1, 1), d_model: int = 32, heads: int = 2,
               activation: str = "swish", tied: bool = True, scale_embedding: bool = True, seed: int = 0,
               tags: tuple[str, ...] = ()) -> Path:
    """A saved tiny MarianMTModel directory with its tokenizer files; returns `root`."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    root.mkdir(parents=True, exist_ok=True)
    src, tgt = _spm([s for s, _ in LINES], 60), _spm([t for _, t in LINES], 80)
    (root / "source.spm").write_bytes(src)
    (root / "target.spm").write_bytes(tgt)
    pieces = ["</s>", "<unk>"] + [f">>{t}<<" for t in tags]
    for p in _pieces(src) + _pieces(tgt):
        if p not in pieces:
            pieces.append(p)
    pieces.append("<pad>")
    (root / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
    pad = len(pieces) - 1
    cfg = MarianConfig(vocab_size=len(pieces), d_model=d_model, encoder_layers=layers[0], decoder_layers=layers[1],
                       encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * d_model,
                       decoder_ffn_dim=2 * d_model, max_position_embeddings=128, activation_function=activation,
                       pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
                       scale_embedding=scale_embedding, tie_word_embeddings=tied, dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if "layer_norm.weight" in name else 0))
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
        model.final_logits_bias[0, 0] += 7.0  # </s> likelier: most random outputs end before the length limit
    model.save_pretrained(root)
    MarianTokenizer(str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json"),
                    source_lang="en", target_lang="de").save_pretrained(root)
    return root
