r"""A tiny randomly initialised `transformers` Marian directory in OPUS-MT's layout, for trying
`mt import hf` where no OPUS-MT model can be downloaded (the tests build theirs with it too).

    python -m mt.deploy.tiny_marian runs/opus-mt-tiny \
        --src data/multi30k/train.en.gz --tgt data/multi30k/train.de.gz

It trains `source.spm` and `target.spm` on the two files (unigram, --vocab pieces each), numbers
their pieces in one `vocab.json` as OPUS-MT does (</s> 0, <unk> 1, target-language codes
`>>xx<<`, the pieces, <pad> last; the decoder starts from <pad>), and saves a MarianMTModel
(swish, post-LN, sinusoidal positions, tied embeddings, `scale_embedding`) with random weights,
scaled so that its distributions are peaked, with the MarianTokenizer's files.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import sentencepiece as spm
import torch


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    """A serialized unigram sentencepiece model (sentencepiece's own ids, as OPUS-MT's are)."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2, num_threads=1,
                                   byte_fallback=False)
    return out.getvalue()


def _pieces(model: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))]


def write_tiny_marian(root: Path, src_lines: list[str], tgt_lines: list[str], *,
                      vocab: tuple[int, int] = (60, 80), layers: tuple[int, int] = (1, 1), d_model: int = 32,
                      heads: int = 2, activation: str = "swish", tied: bool = True,
                      scale_embedding: bool = True, seed: int = 0, tags: tuple[str, ...] = (),
                      eos_bias: float = 7.0, langs: tuple[str, str] = ("en", "de")) -> Path:
    """Save the directory `root`; `eos_bias` is added to </s>'s logit bias (random weights stop sooner)."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    root.mkdir(parents=True, exist_ok=True)
    src, tgt = train_spm(src_lines, vocab[0]), train_spm(tgt_lines, vocab[1])
    (root / "source.spm").write_bytes(src)
    (root / "target.spm").write_bytes(tgt)
    pieces = ["</s>", "<unk>"] + [f">>{t}<<" for t in tags]
    seen = set(pieces)
    for p in _pieces(src) + _pieces(tgt):
        if p not in seen:
            pieces.append(p)
            seen.add(p)
    pieces.append("<pad>")
    (root / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
    pad = len(pieces) - 1
    cfg = MarianConfig(vocab_size=len(pieces), d_model=d_model, encoder_layers=layers[0],
                       decoder_layers=layers[1], encoder_attention_heads=heads, decoder_attention_heads=heads,
                       encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model, max_position_embeddings=128,
                       activation_function=activation,
                       pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
                       scale_embedding=scale_embedding, tie_word_embeddings=tied, dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1)
                        + (1.0 if "layer_norm.weight" in name else 0))
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias))
        model.final_logits_bias[0, 0] += eos_bias
    model.save_pretrained(root)
    MarianTokenizer(str(root / "source.spm"), str(root / "target.spm"), str(root / "vocab.json"),
                    source_lang=langs[0], target_lang=langs[1]).save_pretrained(root)
    return root


def main() -> None:
    from mt.textio import read_lines

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--src", type=Path, required=True, help="source-language text (text or .gz)")
    ap.add_argument("--tgt", type=Path, required=True, help="target-language text")
    ap.add_argument("--lines", type=int, default=20000,
                    help="lines of each file the sentencepiece models learn from")
    ap.add_argument("--vocab", type=int, default=4000, help="pieces per sentencepiece model")
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    write_tiny_marian(args.out, read_lines(args.src)[: args.lines], read_lines(args.tgt)[: args.lines],
                      vocab=(args.vocab, args.vocab), layers=(args.layers, args.layers), d_model=args.d_model,
                      heads=4, eos_bias=0.0,
                      langs=(args.src.name.split(".")[-2 if args.src.suffix == ".gz" else -1],
                             args.tgt.name.split(".")[-2 if args.tgt.suffix == ".gz" else -1]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
