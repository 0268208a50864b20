"""Invariants of mt.model.transformer.Transformer on tiny seeded models (CPU, a few seconds in all)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mt.config import ModelConfig
from mt.data.batching import collate
from mt.errors import MTError
from mt.model.transformer import Transformer, sinusoidal_positions

V = 40
D, H, FF, L = 32, 4, 64, 2


def make(norm: str = "pre", *, tie: bool = True, joint: bool = True, dropout: float = 0.0,
         src_vocab: int = V, activation: str = "relu", seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=D, heads=H, encoder_layers=L, decoder_layers=L, d_ff=FF, dropout=dropout,
                      attention_dropout=dropout, norm=norm, tie_embeddings=tie, activation=activation,
                      max_positions=64)
    return Transformer(cfg, src_vocab, V, joint_vocab=joint)


def toy_batch(seed: int = 0):
    """Three pairs of different lengths (so rows 0 and 2 are padded on both sides)."""
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, V, n).astype(np.int32) for n in (3, 7, 5)]
    tgt = [rng.integers(4, V, n).astype(np.int32) for n in (4, 2, 8)]
    return src, tgt, collate(src, tgt, [0, 1, 2])


def test_sinusoidal_positions_golden_values() -> None:
    pe = sinusoidal_positions(8, 4)
    assert pe.shape == (8, 4)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    # k=1: dims (0,1) use frequency 1, dims (2,3) use 1/10000^(2/4) = 0.01.
    torch.testing.assert_close(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]))
    torch.testing.assert_close(pe[5], torch.tensor([-0.958924, 0.283662, 0.049979, 0.998750]), atol=1e-6, rtol=0)
    model = make()
    assert "pe" not in model.state_dict()  # non-persistent: rebuilt, never stored in checkpoints
    torch.testing.assert_close(model.pe[3], sinusoidal_positions(64, D)[3])


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("explicit_mask", [False, True])
def test_decoder_is_causal(norm: str, explicit_mask: bool) -> None:
    model = make(norm).eval()
    _, _, b = toy_batch()
    memory = model.encode(b.src, b.src_mask)
    tgt_mask = torch.ones_like(b.tgt_in, dtype=torch.bool) if explicit_mask else None
    base = model.decode(b.tgt_in, memory, b.src_mask, tgt_mask)
    for t in range(b.tgt_in.size(1) - 1):
        changed = b.tgt_in.clone()
        changed[:, t + 1:] = torch.randint(4, V, changed[:, t + 1:].shape)
        out = model.decode(changed, memory, b.src_mask, tgt_mask)
        torch.testing.assert_close(out[:, :t + 1], base[:, :t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(out[:, t + 1:], base[:, t + 1:])  # the test can see a change


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padding_invariance(norm: str) -> None:
    model = make(norm).eval()
    srcs, tgts, b = toy_batch()
    memory = model.encode(b.src, b.src_mask)
    log_probs = model(b.src, b.src_mask, b.tgt_in).log_softmax(-1)
    for i in range(3):
        alone = collate([srcs[i]], [tgts[i]], [i])
        s, t = alone.src.size(1), alone.tgt_in.size(1)
        assert b.src_mask[i].sum() == s and b.tgt_mask[i].sum() == t
        torch.testing.assert_close(memory[i, :s], model.encode(alone.src, alone.src_mask)[0], atol=1e-5, rtol=0)
        single = model(alone.src, alone.src_mask, alone.tgt_in).log_softmax(-1)[0]
        torch.testing.assert_close(log_probs[i, :t], single, atol=1e-5, rtol=0)
    assert b.src.size(1) == 8 and b.tgt_in.size(1) == 9  # rows 0 and 2 really were padded


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_incremental_decoding_equals_full(norm: str) -> None:
    model = make(norm, activation="gelu").eval()
    _, _, b = toy_batch(1)
    memory = model.encode(b.src, b.src_mask)
    full = model.decode(b.tgt_in, memory, b.src_mask).log_softmax(-1)  # (B, T, V)
    cache, steps = None, []
    for t in range(b.tgt_in.size(1)):
        log_probs, cache = model.decode_step(b.tgt_in[:, t:t + 1], memory, b.src_mask, cache)
        assert log_probs.dtype == torch.float32 and cache.length == t + 1
        steps.append(log_probs)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=0)


def test_cache_reorder_follows_rows() -> None:
    model = make().eval()
    _, _, b = toy_batch(2)
    memory = model.encode(b.src, b.src_mask)
    cache = None
    for t in range(3):
        _, cache = model.decode_step(b.tgt_in[:, t:t + 1], memory, b.src_mask, cache)
    index = torch.tensor([2, 0, 2, 1])
    cache = cache.reorder(index)
    assert cache.length == 3 and cache.cross_k[0].size(0) == 4
    next_tok = torch.tensor([[5], [6], [7], [8]])
    got, _ = model.decode_step(next_tok, memory[index], b.src_mask[index], cache)
    # Reference: the reordered rows decoded from scratch with the same prefix and next token.
    prefix = torch.cat([b.tgt_in[index, :3], next_tok], dim=1)
    want = model.decode(prefix, memory[index], b.src_mask[index]).log_softmax(-1)[:, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_reorder_beams_equals_full_reorder_within_sentences() -> None:
    """Beams of one sentence share cross-attention entries, so reorder_beams may skip copying them."""
    model = make().eval()
    _, _, b = toy_batch(2)
    rows = torch.tensor([0, 0, 0, 1, 1, 1])  # two sentences x three beams, sentence-major
    memory, src_mask = model.encode(b.src, b.src_mask)[rows], b.src_mask[rows]
    prefixes = torch.randint(4, 20, (6, 3), generator=torch.Generator().manual_seed(1))
    cache = None
    for t in range(3):
        _, cache = model.decode_step(prefixes[:, t:t + 1], memory, src_mask, cache)
    parents = torch.tensor([2, 2, 0, 4, 3, 3])  # every parent within its own sentence's rows
    next_tok = torch.tensor([[5], [6], [7], [8], [9], [10]])
    fast, _ = model.decode_step(next_tok, memory, src_mask, cache.reorder_beams(parents))
    full, _ = model.decode_step(next_tok, memory, src_mask, cache.reorder(parents))
    torch.testing.assert_close(fast, full, atol=0, rtol=0)
    want = model.decode(torch.cat([prefixes[parents], next_tok], 1), memory, src_mask).log_softmax(-1)[:, -1]
    torch.testing.assert_close(fast, want, atol=1e-5, rtol=0)


def test_fast_causal_path_equals_explicit_mask_with_gradients() -> None:
    """is_causal without a key mask == causal AND padding mask, on real positions and in gradients."""
    _, _, b = toy_batch(3)
    grads, outs = [], []
    for explicit in (False, True):
        model = make("post").train()  # dropout 0: deterministic, but the training code path
        memory = model.encode(b.src, b.src_mask)
        logits = model.decode(b.tgt_in, memory, b.src_mask, b.tgt_mask if explicit else None)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), b.tgt_out, ignore_index=0)
        loss.backward()
        outs.append(logits[b.tgt_mask])
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=0)
    for g_fast, g_explicit in zip(*grads):
        torch.testing.assert_close(g_fast, g_explicit, atol=1e-6, rtol=1e-5)


def test_gradients_finite_with_padding_and_empty_rows() -> None:
    model = make("post", dropout=0.1).train()
    srcs, tgts, _ = toy_batch(4)
    b = collate(srcs + [np.array([], np.int32)], tgts + [np.array([], np.int32)], [0, 1, 2, 3])
    src_mask = b.src_mask.clone()
    src_mask[1] = False  # a fully masked source row: SDPA must not turn it into NaN
    logits = model(b.src, src_mask, b.tgt_in)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), b.tgt_out, ignore_index=0)
    loss.backward()
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # The broken row leaks nowhere: other rows match a batch without it.
    model.eval()
    with torch.no_grad():
        keep = torch.tensor([0, 2, 3])
        ref = model(b.src[keep], b.src_mask[keep], b.tgt_in[keep])
        got = model(b.src, src_mask, b.tgt_in)[keep]
    torch.testing.assert_close(got[b.tgt_mask[keep]], ref[b.tgt_mask[keep]], atol=1e-5, rtol=0)


def test_tied_weights_are_one_tensor() -> None:
    joint = make(tie=True, joint=True)
    ptr = joint.tgt_embed.weight.data_ptr()
    assert joint.src_embed.weight.data_ptr() == ptr and joint.out_proj is None
    separate = make(tie=True, joint=False, src_vocab=30)
    assert separate.src_embed.weight.data_ptr() != separate.tgt_embed.weight.data_ptr()
    assert separate.out_proj is None
    untied = make(tie=False, joint=True)
    ptrs = {untied.src_embed.weight.data_ptr(), untied.tgt_embed.weight.data_ptr(), untied.out_proj.weight.data_ptr()}
    assert len(ptrs) == 3
    # The output projection really reads the embedding: zero token 7's row, its logit becomes 0 (no bias).
    _, _, b = toy_batch()
    with torch.no_grad():
        joint.tgt_embed.weight[7] = 0.0
    logits = joint.eval()(b.src, b.src_mask, b.tgt_in)
    assert torch.equal(logits[..., 7], torch.zeros_like(logits[..., 7]))


def _expected_parameters(norm: str, tie: bool, joint: bool, vs: int, vt: int) -> int:
    ln = 2 * D
    attn_self = (D * 3 * D + 3 * D) + (D * D + D)
    attn_cross = (D * D + D) + (D * 2 * D + 2 * D) + (D * D + D)
    ffn = (D * FF + FF) + (FF * D + D)
    enc = L * (attn_self + ffn + 2 * ln)
    dec = L * (attn_self + attn_cross + ffn + 3 * ln)
    final = 2 * ln if norm == "pre" else 0
    if tie and joint:
        emb = vt * D
    elif tie:
        emb = vs * D + vt * D
    else:
        emb = vs * D + vt * D + (vt * D + vt)
    return emb + enc + dec + final


@pytest.mark.parametrize("norm,tie,joint,vs", [("pre", True, True, V), ("post", True, False, 30),
                                               ("pre", False, True, V), ("post", False, False, 30)])
def test_parameter_count_formula(norm: str, tie: bool, joint: bool, vs: int) -> None:
    model = make(norm, tie=tie, joint=joint, src_vocab=vs)
    assert model.num_parameters() == _expected_parameters(norm, tie, joint, vs, V)


def test_init_scales() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=256, heads=4, encoder_layers=1, decoder_layers=1, d_ff=1024)
    model = Transformer(cfg, 4000, 4000, joint_vocab=True)
    emb = model.tgt_embed.weight * math.sqrt(256)
    assert abs(emb.std().item() - 1.0) < 0.02  # unit-variance token inputs, like the positions
    qkv = model.encoder[0].attn.qkv.weight
    bound = math.sqrt(6 / (256 + 256))  # Xavier per (D, D) block, not over the fused (3D, D)
    assert qkv.abs().max().item() <= bound and qkv.abs().max().item() > 0.95 * bound
    assert all(torch.count_nonzero(m.bias) == 0 for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_cross_attention_weights() -> None:
    model = make("post", dropout=0.3).train()
    _, _, b = toy_batch()
    w = model.cross_attention(b.src, b.src_mask, b.tgt_in, 1)
    assert model.training  # mode restored
    assert w.shape == (3, H, b.tgt_in.size(1), b.src.size(1))
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    assert torch.all(w.masked_select(~b.src_mask[:, None, None, :]) == 0)
    with pytest.raises(MTError):
        model.cross_attention(b.src, b.src_mask, b.tgt_in, L)


def test_too_long_input_is_a_user_error() -> None:
    model = make().eval()
    src = torch.full((1, 65), 5)
    with pytest.raises(MTError, match="max_positions"):
        model.encode(src, torch.ones_like(src, dtype=torch.bool))


def test_bf16_autocast_forward_and_decode_step() -> None:
    model = make("pre").eval()
    _, _, b = toy_batch()
    ref = model(b.src, b.src_mask, b.tgt_in)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(b.src, b.src_mask, b.tgt_in)
        log_probs, _ = model.decode_step(b.tgt_in[:, :1], model.encode(b.src, b.src_mask), b.src_mask, None)
    assert logits.dtype == torch.bfloat16 and log_probs.dtype == torch.float32
    torch.testing.assert_close(logits.float(), ref, atol=0.1, rtol=0.05)
