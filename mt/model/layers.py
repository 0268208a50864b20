"""The Transformer's building blocks: multi-head self- and cross-attention (fused projections),
the position-wise feed-forward sublayer, residual LayerNorm (pre- or post-norm) and the encoder and
decoder layers, with the decoder layer's one-position `step` over a key/value cache.

`mt.model.transformer` assembles them into the model; its docstring gives the masks' polarity, the
attention kernels and the initialisation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.config import ModelConfig
from mt.model.fastops import BlockMask, attention, dropout_add


def key_padding_mask(mask: Tensor) -> Tensor:
    """A (B, S) bool padding mask over keys -> (B, 1, 1, S): the same keys for every head and query."""
    return mask[:, None, None, :]


def merge_heads(y: Tensor) -> Tensor:
    """Per-head outputs (B, H, T, d_k) -> (B, T, H * d_k), heads side by side."""
    B, H, T, d_k = y.shape
    return y.transpose(1, 2).reshape(B, T, H * d_k)


def attend_one(q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor | None) -> Tensor:
    """Attention of single queries q (B, H, 1, d_k) over k/v (B, H, S, d_k) of any strides
    (batched matmuls read the cache's time-major views in place); key_mask (B, 1, 1, S) bool
    (True = attend) or None -> (B, H, 1, d_k). A row without any real key would give NaN; search
    never builds one (every source ends with EOS)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (B, H, 1, S)
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1), v)


def xavier_blocks(weight: Tensor, blocks: int) -> None:
    """Xavier-uniform init of a fused (blocks*d_out, d_in) weight, one (d_out, d_in) block at a time."""
    for chunk in weight.data.chunk(blocks, dim=0):
        nn.init.xavier_uniform_(chunk)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection."""

    def __init__(self, d_model: int, heads: int, attention_dropout: float) -> None:
        super().__init__()
        self.heads, self.d_k, self.attention_dropout = heads, d_model // heads, attention_dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, D) -> q, k, v, each (B, H, T, d_k)."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.d_k).permute(2, 0, 3, 1, 4)
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | BlockMask | None,
               is_causal: bool) -> Tensor:
        """Attention of (B, H, T, d_k) queries over (B, H, S, d_k) keys/values -> (B, T, D)."""
        p = self.attention_dropout if self.training else 0.0
        y = attention(q, k, v, mask, p, is_causal)
        return self.out(merge_heads(y))  # (B, T, D)

    def forward(self, x: Tensor, mask: Tensor | BlockMask | None, is_causal: bool = False) -> Tensor:
        """x (B, T, D), mask broadcastable to (B, H, T, T), a block mask, or None -> (B, T, D)."""
        q, k, v = self.project(x)
        return self.attend(q, k, v, mask, is_causal)


class CrossAttention(nn.Module):
    """Multi-head attention of decoder queries over encoder memory; fused K/V projection."""

    def __init__(self, d_model: int, heads: int, attention_dropout: float) -> None:
        super().__init__()
        self.heads, self.d_k, self.attention_dropout = heads, d_model // heads, attention_dropout
        self.q = nn.Linear(d_model, d_model)
        self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (B, S, D) -> k, v, each (B, H, S, d_k); computed once per sentence in search."""
        B, S, _ = memory.shape
        k, v = self.kv(memory).view(B, S, 2, self.heads, self.d_k).permute(2, 0, 3, 1, 4)
        return k, v

    def query(self, x: Tensor) -> Tensor:
        """x (B, T, D) -> (B, H, T, d_k)."""
        B, T, _ = x.shape
        return self.q(x).view(B, T, self.heads, self.d_k).transpose(1, 2)

    def forward(self, x: Tensor, k: Tensor, v: Tensor, src_mask: Tensor | BlockMask) -> Tensor:
        """x (B, T, D), k/v (B, H, S, d_k), src_mask (B, 1, 1, S) or a block mask -> (B, T, D)."""
        p = self.attention_dropout if self.training else 0.0
        y = attention(self.query(x), k, v, src_mask, p, False)
        return self.out(merge_heads(y))  # (B, T, D)

    def weights(self, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        """Explicit attention probabilities (B, H, T, S); rows with no real key are all zero."""
        k, _ = self.memory_kv(memory)
        scores = self.query(x) @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, T, S)
        probs = scores.float().masked_fill(~src_mask, float("-inf")).softmax(dim=-1)
        return probs.nan_to_num(0.0)


class FeedForward(nn.Module):
    """Position-wise Linear -> ReLU/GELU (exact, erf)/swish (SiLU) -> Linear."""

    def __init__(self, d_model: int, d_ff: int, activation: str) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)
        self.act = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))  # (B, T, D)


class ResidualNorm(nn.LayerNorm):
    """The LayerNorm of one sublayer and the residual connection around it (the Annotated
    Transformer's SublayerConnection). Pre-LN: x + drop(f(LN(x))). Post-LN (the paper): LN(x + drop(f(x))).

    It is the sublayer's LayerNorm itself (a subclass), so the state-dict keys stay those of a
    plain LayerNorm attribute (`decoder.0.norm_self.weight`). `around(x, f)` runs the whole
    sublayer; `input` and `add` are its two halves, for a caller that needs what f computes inside
    (incremental decoding keeps the self-attention keys/values).
    """

    def __init__(self, d_model: int, *, pre_norm: bool, dropout: float) -> None:
        super().__init__(d_model)
        self.pre_norm, self.dropout = pre_norm, dropout

    def input(self, x: Tensor) -> Tensor:
        """What the sublayer reads: LN(x) pre-LN, x post-LN.  # (B, T, D)"""
        return self(x) if self.pre_norm else x

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        """The residual stream x plus the sublayer output y (dropped out), normalised after post-LN."""
        x = dropout_add(x, y, self.dropout, self.training)
        return x if self.pre_norm else self(x)

    def around(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """x (B, T, D) -> the residual sublayer's output (B, T, D)."""
        return self.add(x, sublayer(self.input(x)))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pre_norm={self.pre_norm}, dropout={self.dropout}"


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sublayers, each inside a `ResidualNorm`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.norm_attn, self.norm_ff = (
            ResidualNorm(cfg.d_model, pre_norm=cfg.norm == "pre", dropout=cfg.dropout) for _ in range(2))

    def forward(self, x: Tensor, key_mask: Tensor | BlockMask) -> Tensor:
        """x (B, S, D), key_mask (B, 1, 1, S) or a block mask -> (B, S, D)."""
        x = self.norm_attn.around(x, lambda h: self.attn(h, key_mask))
        return self.norm_ff.around(x, self.ff)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention and feed-forward sublayers, each inside a `ResidualNorm`."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = CrossAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ff = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.norm_self, self.norm_cross, self.norm_ff = (
            ResidualNorm(cfg.d_model, pre_norm=cfg.norm == "pre", dropout=cfg.dropout) for _ in range(3))

    def forward(self, x: Tensor, mem_k: Tensor, mem_v: Tensor, key_mask: Tensor | BlockMask,
                tgt_mask: Tensor | None) -> Tensor:
        """x (B, T, D); mem_k/mem_v (B, H, S, d_k); key_mask (B, 1, 1, S) or a block mask;
        tgt_mask None (causal fast path) or (B, 1, T, T) -> (B, T, D)."""
        x = self.norm_self.around(x, lambda h: self.self_attn(h, tgt_mask, is_causal=tgt_mask is None))
        x = self.norm_cross.around(x, lambda h: self.cross_attn(h, mem_k, mem_v, key_mask))
        return self.norm_ff.around(x, self.ff)

    def step(self, x: Tensor, k_buf: Tensor, v_buf: Tensor, t: int, mem_k: Tensor, mem_v: Tensor,
             key_mask: Tensor | None, group: int = 1) -> Tensor:
        """One new position t (inference): x (B, 1, D) -> (B, 1, D); key_mask (B / group, 1, 1, S)
        or None when no source row is padded. mem_k/mem_v (B / group, H, S, d_k): one entry per
        `group` consecutive rows (a sentence's beam), whose queries attend it in one product.

        k_buf/v_buf: this layer's time-major self-attention buffers (capacity > t, B, H, d_k)
        holding positions [0, t); the new key/value are written at t in place. The new query may
        attend every cached key (all earlier positions), so no mask is needed. Attention is a plain
        matmul-softmax (`attend_one`), cheaper than SDPA for a single query; no attention dropout.
        """
        # 1. self-attention: project the new position, write its key/value into the cache, attend
        q, k, v = self.self_attn.project(self.norm_self.input(x))  # each (B, H, 1, d_k)
        k_buf[t], v_buf[t] = k[:, :, 0], v[:, :, 0]
        # (B, H, t+1, d_k)
        keys, values = k_buf[: t + 1].permute(1, 2, 0, 3), v_buf[: t + 1].permute(1, 2, 0, 3)
        x = self.norm_self.add(x, self.self_attn.out(merge_heads(attend_one(q, keys, values, None))))
        # 2. cross-attention over the cached encoder keys/values, 3. feed-forward
        x = self.norm_cross.around(x, lambda h: self._cross_step(h, mem_k, mem_v, key_mask, group))
        return self.norm_ff.around(x, self.ff)

    def _cross_step(self, h: Tensor, mem_k: Tensor, mem_v: Tensor, key_mask: Tensor | None,
                    group: int) -> Tensor:
        """Cross-attention of one position: h (B, 1, D), mem_k/mem_v (B / group, H, S, d_k) -> (B, 1, D).
        (group 1: the queries (B, H, 1, d_k) and merged heads of `CrossAttention.query` /
        `merge_heads`.)"""
        B, H, d_k = h.size(0), mem_k.size(1), mem_k.size(3)
        q = self.cross_attn.q(h).view(B // group, group, H, d_k).transpose(1, 2)  # (N, H, group, d_k)
        y = attend_one(q, mem_k, mem_v, key_mask)  # (N, H, group, d_k): the group's queries together
        return self.cross_attn.out(y.transpose(1, 2).reshape(B, 1, H * d_k))

    def cross_weights(self, x: Tensor, memory: Tensor, key_mask: Tensor) -> Tensor:
        """Cross-attention probabilities (B, H, T, S) of this layer for input x (B, T, D)."""
        x = self.norm_self.around(x, lambda h: self.self_attn(h, None, is_causal=True))
        return self.cross_attn.weights(self.norm_cross.input(x), memory, key_mask)
