"""The weight mapping between mt's Transformer and `transformers`' MarianMTModel, both ways.

Both are post-LN encoder-decoders with sinusoidal positions and no final LayerNorm
(modeling_marian.py: MarianEncoderLayer is LN(x + attn(x)), LN(x + fc2(act(fc1(x)))); the logits
are lm_head(h) + final_logits_bias). Per layer:

    mt                                  Marian
    encoder.i.attn.qkv    (rows q|k|v)  model.encoder.layers.i.self_attn.{q,k,v}_proj
    encoder.i.attn.out                  ...self_attn.out_proj
    encoder.i.norm_attn                 ...self_attn_layer_norm
    encoder.i.ff.up / ff.down           ...fc1 / fc2
    encoder.i.norm_ff                   ...final_layer_norm
    decoder.i.self_attn.qkv / out       model.decoder.layers.i.self_attn.{q,k,v}_proj / out_proj
    decoder.i.norm_self                 ...self_attn_layer_norm
    decoder.i.cross_attn.q / kv (k|v)   ...encoder_attn.q_proj / {k,v}_proj
    decoder.i.cross_attn.out            ...encoder_attn.out_proj
    decoder.i.norm_cross / norm_ff      ...encoder_attn_layer_norm / final_layer_norm
    src_embed / tgt_embed               model.shared (one matrix when shared) or encoder/decoder.embed_tokens
    out_proj.weight / .bias             lm_head.weight / final_logits_bias
                                        (tied: tgt_embed, final_logits_bias buffer)

Two re-indexings connect them:

- Vocabulary rows (`vocab_order`): mt's ids 0..3 are <pad>, <unk>, <s>, </s>, and its decoder
  starts from <s>. Marian (OPUS-MT) starts the decoder from its pad token and has no <s>. mt row 2
  (its BOS, the decoder start) is Marian's `decoder_start_token_id` row; when that is also Marian's
  pad (OPUS-MT), mt row 0 is a new row that nothing reads as input (padding is masked) and whose
  logit bias is DEAD_LOGIT, so its probability is exactly 0 in float32 and every other log-prob
  equals Marian's. A model with a distinct pad (what `mt export --format hf` writes) maps 1:1.
- Residual dimensions (`residual_order`): transformers recomputes Marian's position table (sines in
  the first half, cosines in the second: `model.positions: halves`). An mt model with the paper's
  interleaved table is exported with every residual-stream dimension permuted so its table becomes
  Marian's: embedding columns, the input columns of every Linear reading the stream, the output
  rows and biases of every Linear writing it, and LayerNorm weights and biases. LayerNorm, attention
  and the logits h·E^T are unchanged by one permutation applied to all of them, so the outputs are
  equal.

It also owns the activation names (`ACTIVATIONS`): config.json's `activation_function` -> mt's
`model.activation`, which `mt import hf` reads and `mt export --format hf` writes (mt's names are
Marian's own).
"""

from __future__ import annotations

import torch
from torch import Tensor

DEAD_LOGIT = -1.0e4  # exp(-1e4) == 0 in float32: a row that can never be predicted
# Marian's activation_function -> mt's model.activation (silu is swish's other name); each of mt's
# names maps to itself, so export writes ACTIVATIONS[model.activation].
ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}

# (mt name, Marian name, how the residual stream enters: "in" columns read it, "out" rows write it, "norm")
_ENC = (("attn.out", "self_attn.out_proj", "out"), ("norm_attn", "self_attn_layer_norm", "norm"),
        ("ff.up", "fc1", "in"), ("ff.down", "fc2", "out"), ("norm_ff", "final_layer_norm", "norm"))
_DEC = (("self_attn.out", "self_attn.out_proj", "out"), ("norm_self", "self_attn_layer_norm", "norm"),
        ("cross_attn.q", "encoder_attn.q_proj", "in"), ("cross_attn.out", "encoder_attn.out_proj", "out"),
        ("norm_cross", "encoder_attn_layer_norm", "norm"), ("ff.up", "fc1", "in"), ("ff.down", "fc2", "out"),
        ("norm_ff", "final_layer_norm", "norm"))
_FUSED = (("encoder", "attn.qkv", "self_attn", "qkv"), ("decoder", "self_attn.qkv", "self_attn", "qkv"),
          ("decoder", "cross_attn.kv", "encoder_attn", "kv"))


def residual_order(d_model: int) -> Tensor:
    """Marian dimension j holds mt dimension order[j]: the even (sine) dimensions of mt's interleaved
    table, then the odd (cosine) ones.  # (d_model,) long"""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def vocab_order(pad: int, unk: int, start: int, eos: int, size: int) -> list[int | None]:
    """For each mt id, the Marian id whose row it takes (None: the new never-predicted PAD row).
    mt ids 0..3 are PAD, UNK, BOS (= Marian's decoder start), EOS; the rest keep Marian's order."""
    head = [None if pad == start else pad, unk, start, eos]
    used = {i for i in head if i is not None}
    return head + [i for i in range(size) if i not in used]


def _rows(t: Tensor, order: list[int | None], fill: float) -> Tensor:
    """t (V_marian, ...) -> (len(order), ...): row k is t[order[k]], or `fill` where order[k] is None."""
    out = torch.full((len(order), *t.shape[1:]), fill, dtype=t.dtype)
    idx = [k for k, i in enumerate(order) if i is not None]
    out[idx] = t[[order[k] for k in idx]]
    return out


def _permute(t: Tensor, role: str, perm: Tensor | None, inverse: bool) -> Tensor:
    """Apply the residual permutation to one tensor by its role ("in": columns, "out"/"norm": rows)."""
    if perm is None:
        return t.clone()
    p = torch.argsort(perm) if inverse else perm
    if role == "in" and t.dim() == 2:
        return t[:, p].clone()
    if role == "in":  # the bias of a Linear that reads the stream: not in residual space
        return t.clone()
    return t[p].clone()


def marian_to_mt(sd: dict[str, Tensor], *, layers: tuple[int, int], order: list[int | None],
                 tied: bool) -> dict[str, Tensor]:
    """A MarianMTModel state dict -> mt Transformer weights (`order`: `vocab_order`). tied: lm_head
    is the decoder embedding (and the encoder's)."""
    out: dict[str, Tensor] = {}
    for stack, prefix, n, table in (("encoder", "model.encoder.layers", layers[0], _ENC),
                                    ("decoder", "model.decoder.layers", layers[1], _DEC)):
        for i in range(n):
            for ours, theirs, _ in table:
                for kind in ("weight", "bias"):
                    out[f"{stack}.{i}.{ours}.{kind}"] = sd[f"{prefix}.{i}.{theirs}.{kind}"].clone()
    for stack, ours, theirs, parts in _FUSED:
        prefix = f"model.{stack}.layers"
        for i in range(layers[0] if stack == "encoder" else layers[1]):
            for kind in ("weight", "bias"):
                out[f"{stack}.{i}.{ours}.{kind}"] = torch.cat(
                    [sd[f"{prefix}.{i}.{theirs}.{c}_proj.{kind}"] for c in parts])
    # the matrices the encoder and decoder read (transformers 5 unties them from model.shared unless tied)
    src = sd.get("model.encoder.embed_tokens.weight", sd["model.shared.weight"])
    tgt = sd.get("model.decoder.embed_tokens.weight", sd["model.shared.weight"])
    bias = sd["final_logits_bias"].reshape(-1)
    out["tgt_embed.weight"] = _rows(tgt, order, 0.0)
    out["src_embed.weight"] = _rows(src, order, 0.0)
    if tied:
        out["final_logits_bias"] = _rows(bias, order, DEAD_LOGIT)
    else:
        out["out_proj.weight"] = _rows(sd["lm_head.weight"], order, 0.0)
        out["out_proj.bias"] = _rows(bias, order, DEAD_LOGIT)
    return out


def mt_to_marian(w: dict[str, Tensor], *, layers: tuple[int, int], tied: bool,
                 perm: Tensor | None) -> dict[str, Tensor]:
    """mt Transformer weights (a joint vocabulary) -> a MarianMTModel state dict with the same
    vocabulary order; `perm`: `residual_order` for an interleaved position table, None for `halves`.
    Untied, the encoder and decoder embeddings and lm_head are three matrices (model.shared unused)."""
    sd: dict[str, Tensor] = {}
    for stack, prefix, n, table in (("encoder", "model.encoder.layers", layers[0], _ENC),
                                    ("decoder", "model.decoder.layers", layers[1], _DEC)):
        for i in range(n):
            for ours, theirs, role in table:
                for kind in ("weight", "bias"):
                    sd[f"{prefix}.{i}.{theirs}.{kind}"] = _permute(w[f"{stack}.{i}.{ours}.{kind}"],
                                                                   role, perm, False)
    for stack, ours, theirs, parts in _FUSED:
        for i in range(layers[0] if stack == "encoder" else layers[1]):
            weight, bias = w[f"{stack}.{i}.{ours}.weight"], w[f"{stack}.{i}.{ours}.bias"]
            for c, wc, bc in zip(parts, weight.chunk(len(parts)), bias.chunk(len(parts))):
                sd[f"model.{stack}.layers.{i}.{theirs}.{c}_proj.weight"] = _permute(wc, "in", perm, False)
                sd[f"model.{stack}.layers.{i}.{theirs}.{c}_proj.bias"] = bc.clone()
    src, tgt = (_permute(w["src_embed.weight"], "in", perm, False),
                _permute(w["tgt_embed.weight"], "in", perm, False))
    (sd["model.shared.weight"], sd["model.encoder.embed_tokens.weight"],
     sd["model.decoder.embed_tokens.weight"]) = (tgt, tgt, tgt) if tied else (src, src, tgt)
    if tied:
        sd["lm_head.weight"] = tgt
        bias = w.get("final_logits_bias", torch.zeros(tgt.size(0)))
    else:
        sd["lm_head.weight"] = _permute(w["out_proj.weight"], "in", perm, False)
        bias = w["out_proj.bias"]
    sd["final_logits_bias"] = bias.reshape(1, -1).clone()
    return sd
