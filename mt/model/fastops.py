"""Attention and dropout as the model calls them, in the form that trains fastest on CPU.

Both keep the maths of the torch functions they stand for; only where and how the work is done
changes (profiles and ratios: docs/performance.md).

- `attention`: `F.scaled_dot_product_attention`, except when training in bf16/fp16 on a CPU. There
  SDPA picks its fused flash kernel, whose backward runs ~6-13x slower than in fp32 and was a third
  of a bf16 training step; the explicit form (scores by a matrix product, softmax in float32,
  probabilities by a matrix product) runs the backward on the bf16 matrix units instead.
  Inference and fp32 keep SDPA. A FlexAttention `BlockMask` in place of the boolean mask (the
  GPU training path, `key_block_mask`) runs `flex_attention`, which skips fully padded key blocks
  and needs no dense (B, 1, 1, S) mask in the kernel: the same maths (tests compare forward and
  backward with masked SDPA on heavily padded batches).
- `dropout` / `dropout_add`: on CPU, `F.dropout` draws one float from torch's mt19937 generator
  per element (`bernoulli_`, ~10% of a training step). Here each element gets 16 random bits
  instead (one 64-bit draw serves four elements), kept when the bits are at or above p·2^16, and
  kept values are scaled by 2^16 / (2^16 - round(p·2^16)): an unbiased dropout whose drop rate is
  p rounded to 1/65536. `dropout_add` fuses the residual sum x + dropout(y) into one pass. Other
  devices keep `F.dropout`. The random streams differ from `F.dropout`'s, so seeded training runs
  do not reproduce ones made before this module (they reproduce each other).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

_BITS = 16  # random bits per dropout decision
_LEVELS = 1 << _BITS


def key_block_mask(key_mask: Tensor, queries: int) -> BlockMask:
    """FlexAttention's block mask for key padding: key_mask (B, S) bool (True = real) -> a BlockMask
    over (B, any head, `queries`, S), built on key_mask's device (given explicitly: its default is CUDA)."""
    def real_key(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return key_mask[b, kv]

    return create_block_mask(real_key, B=key_mask.size(0), H=None, Q_LEN=queries, KV_LEN=key_mask.size(1),
                             device=key_mask.device)


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | BlockMask | None, dropout_p: float,
              is_causal: bool) -> Tensor:
    """Attention of q (B, H, T, d_k) over k/v (B, H, S, d_k) -> (B, H, T, d_k).

    mask: bool, True = attend, broadcastable to (B, H, T, S), or a `key_block_mask` (FlexAttention:
    no dropout), or None; is_causal: query t sees keys <= t (then mask must be None). Rows with no
    key to attend give zeros, as SDPA does in torch >= 2.5.
    """
    if isinstance(mask, BlockMask):
        if dropout_p > 0:
            raise ValueError("attention: FlexAttention has no attention dropout; use a boolean mask")
        return flex_attention(q, k, v, block_mask=mask)
    slow_fused_backward = (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16)
                           and torch.is_grad_enabled() and q.requires_grad)
    if not slow_fused_backward:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=is_causal)
    scores = (q @ k.transpose(-2, -1)).float().mul_(q.size(-1) ** -0.5)  # (B, H, T, S) float32
    if is_causal:
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)
    if mask is not None and not is_causal:
        probs = probs.nan_to_num(0.0)  # fully masked rows: softmax over all -inf is NaN
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p, True)
    return probs.to(v.dtype) @ v


def _keep_scale(y: Tensor, p: float) -> Tensor:
    """Dropout multipliers for y: 0 (dropped) or 1/(1 - p'), y's shape and dtype; p' = round(p·2^16)/2^16."""
    n = y.numel()
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=y.device)
    bits = words.view(torch.int16)[:n].view(y.shape)  # 16 uniform bits per element, as int16
    dropped = round(p * _LEVELS)
    keep = bits >= dropped - _LEVELS // 2  # P(keep) = (2^16 - dropped) / 2^16
    return keep.to(y.dtype).mul_(_LEVELS / (_LEVELS - dropped))


def _fast(y: Tensor, p: float, training: bool) -> bool:
    return training and 0.0 < p < 1.0 and y.device.type == "cpu" and y.numel() > 0


def dropout(y: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout(y, p, training), 16 random bits per element on CPU (see the module docstring)."""
    if not _fast(y, p, training):
        return F.dropout(y, p, training)
    return y * _keep_scale(y, p)


def dropout_add(x: Tensor, y: Tensor, p: float, training: bool) -> Tensor:
    """x + dropout(y, p, training), one fused pass on CPU; x and y of the same shape (B, T, D)."""
    if not _fast(y, p, training):
        return x + F.dropout(y, p, training)
    return torch.addcmul(x, y, _keep_scale(y, p))
