"""Attention without dense masks, the GPU training path (issue 63), proven on the CPU.

- decoder self-attention: `is_causal=True` and no mask; right padding of the target cannot reach a
  real position, and padded positions are out of the loss (checked through the trainer's loss);
- encoder self-attention and cross-attention with `attention_kernel = "flex"`: FlexAttention
  block masks, equal in forward and backward to today's masked SDPA on heavily padded batches
  (eager flex on the CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.attention.flex_attention as flex_module

import mt.model.layers
from mt.config import ModelConfig
from mt.data.batching import Batch, collate
from mt.data.tokenizer import PAD_ID
from mt.model.fastops import BlockMask
from mt.model.transformer import Transformer
from mt.train.step import batch_loss

V, D, H, L = 50, 32, 4, 2


def model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=D, heads=H, encoder_layers=L, decoder_layers=L, d_ff=64, dropout=0.0,
                      attention_dropout=0.0, norm="pre", max_positions=64)
    return Transformer(cfg, V, V, joint_vocab=True).train()


def padded_batch(seed: int = 0) -> Batch:
    """Eight pairs of lengths 1..30 on both sides, in one batch: most rows are mostly padding."""
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, V, n) for n in (1, 30, 2, 5, 3, 17, 1, 8)]
    tgt = [rng.integers(4, V, n) for n in (29, 1, 4, 2, 12, 1, 6, 3)]
    return collate(src, tgt, np.arange(8))


def loss_and_grads(net: Transformer, b: Batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
    net.zero_grad(set_to_none=True)
    loss, _, _ = batch_loss(net, net, b, 0.1)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in net.parameters()]


def test_target_padding_reaches_neither_real_positions_nor_the_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random token ids in every padded target position (and in a whole padded row's inputs) change
    neither the trainer's loss nor any gradient: causal attention hides them from real queries and
    the loss drops their rows. Without the causal mask the same change shows (the test can see it)."""
    b = padded_batch()
    rng = torch.Generator().manual_seed(1)
    noisy = torch.randint(4, V, b.tgt_in.shape, generator=rng)
    changed = Batch(b.src, b.src_mask, torch.where(b.tgt_mask, b.tgt_in, noisy), b.tgt_out, b.tgt_mask,
                    b.indices, b.num_tgt_tokens, b.real_targets)
    assert (changed.tgt_in != b.tgt_in).sum() > 100  # most of the batch is padding
    net = model()
    loss, grads = loss_and_grads(net, b)
    loss2, grads2 = loss_and_grads(net, changed)
    assert torch.equal(loss, loss2)
    for g, g2 in zip(grads, grads2):
        torch.testing.assert_close(g, g2, atol=1e-6, rtol=1e-5)
    assert (b.tgt_out[~b.tgt_mask] == PAD_ID).all()  # the loss's targets there are PAD
    real_attention = mt.model.layers.attention
    monkeypatch.setattr(mt.model.layers, "attention",
                        lambda q, k, v, mask, p, is_causal: real_attention(q, k, v, mask, p, False))
    leaky, _ = loss_and_grads(net, b)
    leaky2, _ = loss_and_grads(net, changed)
    assert not torch.allclose(leaky, leaky2)


def spy_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, bool]]:
    calls: list[tuple[Any, bool]] = []
    real = mt.model.layers.attention

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, p: float, is_causal: bool) -> torch.Tensor:
        calls.append((mask, is_causal))
        return real(q, k, v, mask, p, is_causal)

    monkeypatch.setattr(mt.model.layers, "attention", spy)
    return calls


@pytest.mark.parametrize("kernel", ["sdpa", "flex"])
def test_decoder_self_attention_passes_no_mask(kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per layer: encoder self-attention, then decoder self- and cross-attention. The decoder's
    self-attention gets attn_mask None and is_causal; the others the key padding, as a block mask
    with the flex kernel."""
    calls = spy_calls(monkeypatch)
    net = model()
    net.attention_kernel = kernel
    b = padded_batch()
    with torch.no_grad():
        net(b.src, b.src_mask, b.tgt_in)
    assert len(calls) == 3 * L
    encoder, decoder = calls[:L], calls[L:]
    for mask, causal in encoder + decoder[1::2]:
        assert not causal and isinstance(mask, BlockMask if kernel == "flex" else torch.Tensor)
    for mask, causal in decoder[0::2]:
        assert mask is None and causal


def test_flex_block_masks_equal_masked_sdpa_forward_and_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flex kernel (eager, on the CPU) against masked SDPA: the same loss and gradients."""
    # torch refuses flex backward on the CPU because it has no compiled CPU backward kernel; the
    # eager reference implementation run here is the same on every device
    monkeypatch.setattr(flex_module, "_validate_device", lambda *args: None)
    b = padded_batch(2)
    results = {}
    for kernel in ("sdpa", "flex"):
        net = model(3)
        net.attention_kernel = kernel
        results[kernel] = loss_and_grads(net, b)
    (loss, grads), (flex_loss, flex_grads) = results["sdpa"], results["flex"]
    torch.testing.assert_close(flex_loss, loss, atol=1e-5, rtol=1e-6)
    for g, fg in zip(grads, flex_grads):
        torch.testing.assert_close(fg, g, atol=1e-5, rtol=1e-4)
    net = model(3)  # eval mode (validation, search) keeps SDPA's dense mask
    net.attention_kernel = "flex"
    assert isinstance(net.eval().key_mask(b.src_mask, 4), torch.Tensor)
