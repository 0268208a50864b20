"""`mt import hf DIR -o model.pt`: a local `transformers` Marian directory (OPUS-MT's layout) becomes
an mt checkpoint that translate, evaluate, export, serve and `train --init-from` take.

The directory holds `config.json` (model_type "marian"), the weights (`model.safetensors` or
`pytorch_model.bin`, read by transformers' own loader), `source.spm`, `target.spm` and `vocab.json`
(the one vocabulary both sentencepiece models' pieces are numbered by). The checkpoint's tokenizer
is those two models over that vocabulary (`mt.data.vocab`), reordered to mt's special ids, and
its model config says what Marian's does (`mt.deploy.marian_map` maps the weights):

    config.json                     mt model config
    d_model, *_layers, *_heads, *_ffn_dim, max_position_embeddings   the same dimensions
    activation_function swish/silu, gelu, relu                        activation swish, gelu, relu
    scale_embedding                 scale_embedding
    (position table: recomputed)    positions: halves
    post-LN, no final LayerNorm     norm: post
    tie_word_embeddings             tie_embeddings (and final_logits_bias, a fixed logit bias)
    decoder_start_token_id          mt's BOS (the decoder start)

Anything else that changes what the model computes and has no mapping (separate source and target
vocabularies, a learned position table, a pre-LN variant, other activations) is refused with one
line naming the file and the field. Target-language tokens of multi-target models (`>>fr<<` in
vocab.json) become mt's target tags (`<2fr>`), so `--target-lang fr` asks for French.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import torch

from mt.config import Config, DataConfig, ModelConfig, PairConfig, TokenizerConfig
from mt.config_checks import NAME
from mt.data.tokenizer import Tokenizer
from mt.data.vocab import SPECIALS, vocab_bytes
from mt.deploy.marian_map import ACTIVATIONS, marian_to_mt, vocab_order
from mt.errors import MTError
from mt.model.checkpoint import inference_state, save_checkpoint
from mt.model.transformer import Transformer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
# config.json fields that change the computation, and the one value mt can express
_FIXED = {"share_encoder_decoder_embeddings": True, "normalize_before": False, "add_final_layer_norm": False,
          "normalize_embedding": False, "static_position_embeddings": True, "add_bias_logits": False}
_LANG_CODE = re.compile(r">>(.+)<<")
_NEEDS_HF = "mt import hf: needs the transformers package: pip install -e \".[hf]\""


def read_hf_config(model_dir: Path) -> dict[str, Any]:
    """config.json of a transformers directory; MTError when it is not a Marian seq2seq model."""
    path = model_dir / "config.json"
    if not model_dir.is_dir():
        raise MTError(f"{model_dir}: not a directory")
    if not path.is_file():
        raise MTError(f"{path}: missing: {model_dir} is not a transformers model directory")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MTError(f"{path}: not readable JSON ({e})") from None
    kind = cfg.get("model_type") if isinstance(cfg, dict) else None
    if kind != "marian":
        raise MTError(f"{path}: model_type {kind!r} is not a supported transformers seq2seq model "
                      f"(mt imports 'marian': MarianMTModel, the OPUS-MT layout)")
    return cfg


def _field(cfg: dict[str, Any], path: Path, key: str, default: Any = None) -> Any:
    if key not in cfg and default is None:
        raise MTError(f"{path}: field '{key}' missing")
    return cfg.get(key, default)


def model_config(cfg: dict[str, Any], path: Path) -> ModelConfig:
    """mt's model config for a Marian config.json; MTError naming a field with no mapping."""
    for key, value in _FIXED.items():
        if key in cfg and cfg[key] is not None and bool(cfg[key]) != value:
            raise MTError(f"{path}: field '{key}' = {cfg[key]!r} has no mapping in mt "
                          f"(it supports {value!r})")
    pairs = (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim"))
    for a, b in pairs:
        if _field(cfg, path, a) != _field(cfg, path, b):
            raise MTError(f"{path}: field '{b}' = {cfg[b]} differs from '{a}' = {cfg[a]}: "
                          f"mt uses one value for both")
    act = _field(cfg, path, "activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise MTError(f"{path}: field 'activation_function' = {act!r} has no mapping in mt "
                      f"(it supports {', '.join(ACTIVATIONS)})")
    if cfg.get("decoder_vocab_size") not in (None, cfg.get("vocab_size")):
        raise MTError(f"{path}: field 'decoder_vocab_size' = {cfg['decoder_vocab_size']} "
                      f"differs from 'vocab_size': separate vocabularies have no mapping in mt")
    return ModelConfig(
        d_model=int(_field(cfg, path, "d_model")), heads=int(cfg["encoder_attention_heads"]),
        encoder_layers=int(_field(cfg, path, "encoder_layers")),
        decoder_layers=int(_field(cfg, path, "decoder_layers")),
        d_ff=int(cfg["encoder_ffn_dim"]), dropout=float(cfg.get("dropout", 0.1)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0)),
        activation=ACTIVATIONS[act], norm="post",  # type: ignore[arg-type]
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        max_positions=int(_field(cfg, path, "max_position_embeddings")), positions="halves",
        scale_embedding=bool(cfg.get("scale_embedding", False)), final_logits_bias=True)


def _tokenizer_files(model_dir: Path, cfg: dict[str, Any]) -> tuple[bytes, bytes, dict[str, int]]:
    """source.spm, target.spm and vocab.json, checked against config.json's vocab_size."""
    for name in TOKENIZER_FILES:
        if not (model_dir / name).is_file():
            raise MTError(f"{model_dir / name}: missing "
                          f"(a Marian directory has {', '.join(TOKENIZER_FILES)})")
    if (model_dir / "target_vocab.json").is_file():
        raise MTError(f"{model_dir / 'target_vocab.json'}: "
                      "separate source and target vocabularies have no mapping in mt")
    path = model_dir / "vocab.json"
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MTError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise MTError(f"{path}: not a JSON object of piece -> id")
    size = cfg.get("vocab_size")
    if sorted(vocab.values()) != list(range(len(vocab))) or len(vocab) != size:
        raise MTError(f"{path}: {len(vocab)} pieces with ids {min(vocab.values(), default=0)}.."
                      f"{max(vocab.values(), default=-1)} do not match config.json's vocab_size {size}")
    if "<unk>" not in vocab:
        raise MTError(f"{path}: no '<unk>' piece")
    return (model_dir / "source.spm").read_bytes(), (model_dir / "target.spm").read_bytes(), vocab


def _languages(model_dir: Path, src_lang: str | None, tgt_lang: str | None) -> tuple[str, str]:
    """The pair's languages: the options, else tokenizer_config.json's source_lang / target_lang."""
    saved: dict[str, Any] = {}
    path = model_dir / "tokenizer_config.json"
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
    src, tgt = src_lang or saved.get("source_lang"), tgt_lang or saved.get("target_lang")
    if not (isinstance(src, str) and src and isinstance(tgt, str) and tgt):
        raise MTError(f"{model_dir}: languages unknown (tokenizer_config.json names no "
                      f"source_lang/target_lang): give --src-lang and --tgt-lang")
    return src, tgt


def _load_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """The MarianMTModel state dict, read by transformers (safetensors or pytorch_model.bin)."""
    if not any((model_dir / name).is_file() for name in WEIGHT_FILES):
        raise MTError(f"{model_dir}: no weights ({' or '.join(WEIGHT_FILES)})")
    try:
        from transformers import MarianMTModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise MTError(_NEEDS_HF) from None
    hf_logging.set_verbosity_error()  # the CLI prints one line; no progress bars or load reports
    hf_logging.disable_progress_bar()
    try:
        model = MarianMTModel.from_pretrained(str(model_dir), dtype=torch.float32)
    except (OSError, ValueError, RuntimeError) as e:
        raise MTError(f"{model_dir}: transformers could not load the weights: "
                      f"{str(e).splitlines()[0]}") from None
    return {k: v.detach() for k, v in model.state_dict().items()}


def import_marian(model_dir: Path, out: Path, *, src_lang: str | None = None, tgt_lang: str | None = None,
                  name: str | None = None) -> dict[str, Any]:
    """Write the mt checkpoint of a Marian directory to `out`; returns a summary (sizes, languages, tags)."""
    model_dir = Path(model_dir)
    raw = read_hf_config(model_dir)
    path = model_dir / "config.json"
    mcfg = model_config(raw, path)
    src_spm, tgt_spm, vocab = _tokenizer_files(model_dir, raw)
    src, tgt = _languages(model_dir, src_lang, tgt_lang)
    pad, start, eos = (int(_field(raw, path, k))
                       for k in ("pad_token_id", "decoder_start_token_id", "eos_token_id"))
    order = vocab_order(pad, vocab["<unk>"], start, eos, len(vocab))
    by_id = {i: piece for piece, i in vocab.items()}
    pieces = list(SPECIALS) + [_LANG_CODE.sub(r"<2\1>", by_id[i]) if _LANG_CODE.fullmatch(by_id[i])
                               else by_id[i] for i in order[4:]]
    weights = marian_to_mt(_load_weights(model_dir), layers=(mcfg.encoder_layers, mcfg.decoder_layers),
                           order=order, tied=mcfg.tie_embeddings)
    if not mcfg.tie_embeddings or (order[0] is not None and not weights["final_logits_bias"].any()):
        weights.pop("final_logits_bias", None)  # untied: out_proj's own bias; zeros (an mt export): none
        mcfg = dataclasses.replace(mcfg, final_logits_bias=False)
    tags = [m.group(1) for p in pieces if (m := re.fullmatch(r"<2(.+)>", p))]
    run_name = name or (re.sub(r"[^A-Za-z0-9._-]", "-", model_dir.resolve().name).lstrip(".") or "imported")
    if not NAME.fullmatch(run_name):
        run_name = "imported"
    data = DataConfig(src_lang=src, tgt_lang=tgt)
    if tags:
        data = DataConfig(src_lang=src, tgt_lang=tags[0], target_tags=True,
                          pairs=tuple(PairConfig(path=data.path, src_lang=src, tgt_lang=t) for t in tags))
    cfg = Config(name=run_name, data=data, model=mcfg,
                 tokenizer=TokenizerConfig(vocab_size=len(pieces), joint=False, byte_fallback=False))
    tokenizer = Tokenizer.from_bytes(src_spm, tgt_spm, targets=data.target_langs, vocab=vocab_bytes(pieces))
    model = Transformer(mcfg, len(pieces), len(pieces), joint_vocab=True)
    model.load_state_dict(weights, strict=True)
    state = inference_state(cfg, tokenizer, model)
    state["imported_from"] = {"path": str(model_dir.resolve()), "format": "transformers marian"}
    save_checkpoint(out, state)
    return {"vocab": len(pieces), "src_lang": src, "tgt_lang": tgt, "tags": tags, "model": mcfg,
            "parameters": model.num_parameters()}
