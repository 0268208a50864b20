"""mt.model.fastops: the explicit bf16 attention equals SDPA, the 16-bit dropout is an unbiased dropout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mt.model.fastops import attention, dropout, dropout_add


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(3, 2, 5, 8).to(dtype).requires_grad_(True) for _ in range(3))


@pytest.mark.parametrize("causal", [True, False])
def test_bf16_training_attention_matches_sdpa(causal: bool) -> None:
    # The explicit path (bf16, grad enabled, CPU) against SDPA in float32 on the same inputs:
    # outputs and gradients agree to bf16 precision; a row with no key to attend is all zero.
    mask = None
    if not causal:
        mask = torch.ones(3, 1, 1, 5, dtype=torch.bool)
        mask[1, ..., 3:] = False
        mask[2] = False  # a source with no real token: zeros, as SDPA gives
    q, k, v = _qkv(torch.bfloat16)
    out = attention(q, k, v, mask, 0.0, causal)
    out.float().square().sum().backward()
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask, is_causal=causal)
    ref.square().sum().backward()
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref, atol=3e-2, rtol=3e-2)
    for got, want in ((q.grad, q32.grad), (k.grad, k32.grad), (v.grad, v32.grad)):
        assert torch.allclose(got.float(), want, atol=6e-2, rtol=6e-2)
    if mask is not None:
        assert out[2].abs().max() == 0 and q.grad[2].abs().max() == 0


def test_fp32_and_inference_attention_is_sdpa() -> None:
    q, k, v = _qkv(torch.float32)
    assert torch.equal(attention(q, k, v, None, 0.0, True), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    with torch.no_grad():
        q16, k16, v16 = (t.bfloat16() for t in (q, k, v))
        assert torch.equal(attention(q16, k16, v16, None, 0.0, True),
                           F.scaled_dot_product_attention(q16, k16, v16, is_causal=True))


def test_dropout_is_unbiased_with_the_asked_rate() -> None:
    torch.manual_seed(0)
    y = torch.full((1000, 1000), 2.0)
    out = dropout(y, 0.1, True)
    kept = out != 0
    rate = 1 - kept.float().mean().item()
    assert abs(rate - 0.1) < 5 * (0.1 * 0.9 / 1e6) ** 0.5  # five standard deviations
    scale = 65536 / (65536 - round(0.1 * 65536))
    assert torch.allclose(out[kept], torch.tensor(2.0 * scale))
    assert abs(out.mean().item() - 2.0) < 0.01


def test_dropout_off_cases_return_the_input() -> None:
    y = torch.randn(4, 5)
    assert torch.equal(dropout(y, 0.1, False), y) and torch.equal(dropout(y, 0.0, True), y)
    assert torch.equal(dropout_add(y, y, 0.1, False), y + y)
    assert dropout(y, 1.0, True).abs().max() == 0  # F.dropout's convention: everything dropped


def test_dropout_add_is_x_plus_dropout_and_reproducible() -> None:
    x, y = torch.randn(6, 7, 8), torch.randn(6, 7, 8, requires_grad=True)
    torch.manual_seed(3)
    fused = dropout_add(x, y, 0.3, True)
    torch.manual_seed(3)
    plain = x + dropout(y.detach(), 0.3, True)
    assert torch.allclose(fused, plain)
    fused.sum().backward()  # the gradient is the mask scale: 0 where dropped, 1/(1-p') where kept
    assert torch.allclose(y.grad, (plain - x) / y.detach())
    torch.manual_seed(3)
    assert torch.equal(dropout_add(x, y.detach(), 0.3, True), fused.detach())


def test_dropout_works_in_bf16() -> None:
    y = torch.ones(64, 64, dtype=torch.bfloat16)
    out = dropout(y, 0.2, True)
    assert out.dtype == torch.bfloat16 and 0.1 < (out == 0).float().mean().item() < 0.3
