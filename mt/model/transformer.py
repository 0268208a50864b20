"""The Transformer encoder-decoder (Vaswani et al. 2017) with a narrow interface for search.

Training calls `forward(src, src_mask, tgt_in) -> logits`. Search calls `encode` once and then
`decode_step` token by token with a `DecoderCache` (mt/model/decoder_cache.py); `DecoderCache.reorder` follows beams.

Masks: boolean, True = a real token to attend to (the polarity of
`torch.nn.functional.scaled_dot_product_attention`); they come from `mt.data.batching`. The model
builds no padding masks itself. Every attention over source keys (encoder self-attention,
decoder cross-attention) uses the source key-padding mask, broadcast as (B, 1, 1, S).

Decoder self-attention uses SDPA's `is_causal=True` and no target padding mask. This is exact on
every real target position, not an approximation: target padding only ever sits at the end of a
row (BOS + y, then PAD), so a real query at position t attends keys 0..t, which are all real,
and the causal mask alone already excludes every padded key (positions > t). Padded query rows
compute finite values that nothing reads: the next layer's real queries again see only keys
<= t, cross-attention and the position-wise sublayers never mix positions, and the loss ignores
padded positions. `decode(..., tgt_mask=...)` runs the explicit causal-and-padding mask instead
(for left-padded or gapped targets); tests check the two agree on real positions.

Attention and dropout go through `mt.model.fastops`: the same maths, computed in the form that trains
fastest on CPU (explicit attention for bf16 training, 16-bit dropout masks, dropout fused with
the residual sum).

Key padding on the GPU (`attention_kernel = "flex"`, which the trainer sets for a compiled CUDA
step without attention dropout): encoder self-attention and cross-attention take FlexAttention
block masks (`fastops.key_block_mask`, built once per batch) instead of the dense (B, 1, 1, S)
mask, in training mode only (validation and search keep SDPA); decoder self-attention stays
`is_causal=True` with no mask, SDPA's flash path. The CPU keeps "sdpa" (fastops' measured paths).

Fully masked rows (a source with no real token; impossible through `mt.data.batching`, which ends
every source with EOS) give zeros from SDPA in torch >= 2.5 rather than NaN, and
`cross_attention` zeroes them explicitly.

Initialisation: Xavier-uniform for every linear projection (fused QKV / KV weights are
initialised block by block, exactly as separate projections would be), zeros for biases,
N(0, d_model^-0.5) for embeddings, so that after the sqrt(d_model) scaling token embeddings have
unit variance like the sinusoidal positions; LayerNorm weight ones, bias zeros. The PAD
embedding row is left as initialised rather than zeroed: padded source keys are always masked
and padded target positions are never read (see above), so its value cannot reach a real
position, and keeping it ordinary keeps three-way tying with the output projection simple.

Weight tying (`tie_embeddings`): the output projection is the target embedding matrix and has
no bias (a bias would be the only untied part of the projection and fairseq/Vaswani use none);
with a joint vocabulary the source embedding is that same tensor too. An untied output
projection is an ordinary `nn.Linear` with bias.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.config import ModelConfig
from mt.errors import MTError
from mt.model.decoder_cache import DecoderCache
from mt.model.fastops import BlockMask, attention, dropout, dropout_add, key_block_mask


def sinusoidal_positions(max_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """Angles a(k, i) = k / 10000^(2i/d). `interleaved` (the paper): PE(k, 2i) = sin, PE(k, 2i+1) = cos;
    `halves` (Marian / OPUS-MT, MarianSinusoidalPositionalEmbedding): the ceil(d/2) sines first, then
    the cosines.  # (max_positions, d_model)"""
    pos = torch.arange(max_positions, dtype=torch.float64)[:, None]  # (P, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d/2),)
    angles = pos * inv_freq  # (P, ceil(d/2))
    if layout == "halves":
        return torch.cat([torch.sin(angles), torch.cos(angles[:, : d_model // 2])], dim=1).float()
    pe = torch.empty(max_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.float()


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


def _xavier_blocks(weight: Tensor, blocks: int) -> None:
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

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | BlockMask | None, is_causal: bool) -> Tensor:
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
        self.norm_attn, self.norm_ff = (ResidualNorm(cfg.d_model, pre_norm=cfg.norm == "pre", dropout=cfg.dropout)
                                        for _ in range(2))

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
        keys, values = k_buf[: t + 1].permute(1, 2, 0, 3), v_buf[: t + 1].permute(1, 2, 0, 3)  # (B, H, t+1, d_k)
        x = self.norm_self.add(x, self.self_attn.out(merge_heads(attend_one(q, keys, values, None))))
        # 2. cross-attention over the cached encoder keys/values, 3. feed-forward
        x = self.norm_cross.around(x, lambda h: self._cross_step(h, mem_k, mem_v, key_mask, group))
        return self.norm_ff.around(x, self.ff)

    def _cross_step(self, h: Tensor, mem_k: Tensor, mem_v: Tensor, key_mask: Tensor | None, group: int) -> Tensor:
        """Cross-attention of one position: h (B, 1, D), mem_k/mem_v (B / group, H, S, d_k) -> (B, 1, D).
        (group 1: the queries (B, H, 1, d_k) and merged heads of `CrossAttention.query` / `merge_heads`.)"""
        B, H, d_k = h.size(0), mem_k.size(1), mem_k.size(3)
        q = self.cross_attn.q(h).view(B // group, group, H, d_k).transpose(1, 2)  # (N, H, group, d_k)
        y = attend_one(q, mem_k, mem_v, key_mask)  # (N, H, group, d_k): the group's queries together
        return self.cross_attn.out(y.transpose(1, 2).reshape(B, 1, H * d_k))

    def cross_weights(self, x: Tensor, memory: Tensor, key_mask: Tensor) -> Tensor:
        """Cross-attention probabilities (B, H, T, S) of this layer for input x (B, T, D)."""
        x = self.norm_self.around(x, lambda h: self.self_attn(h, None, is_causal=True))
        return self.cross_attn.weights(self.norm_cross.input(x), memory, key_mask)


class Transformer(nn.Module):
    """Encoder-decoder Transformer. See the module docstring for masks, init and tying."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, *, joint_vocab: bool) -> None:
        super().__init__()
        if joint_vocab and src_vocab_size != tgt_vocab_size:
            raise MTError(f"model: joint vocabulary needs equal sizes, got {src_vocab_size} and {tgt_vocab_size}")
        self.cfg, self.d_model = cfg, cfg.d_model
        self.attention_kernel = "sdpa"  # "flex": key padding by FlexAttention block masks while training
        self.tgt_embed = nn.Embedding(tgt_vocab_size, cfg.d_model)
        share_src = joint_vocab and cfg.tie_embeddings
        self.src_embed = self.tgt_embed if share_src else nn.Embedding(src_vocab_size, cfg.d_model)
        # None when tied: logits are then F.linear(h, tgt_embed.weight) with no bias.
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, tgt_vocab_size)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions), persistent=False)
        # model.final_logits_bias: a fixed (V,) logit bias of the tied projection (a checkpoint's, e.g. Marian's)
        if cfg.final_logits_bias and cfg.tie_embeddings:
            self.register_buffer("final_logits_bias", torch.zeros(tgt_vocab_size))
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"  # pre-LN leaves the residual stream unnormalised: add final LayerNorms
        self.enc_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self.dec_norm = nn.LayerNorm(cfg.d_model) if pre else nn.Identity()
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.d_model**-0.5)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        # Fused projections: Xavier per (D, D) block, as three (two) separate Linears would get.
        for module in self.modules():
            if isinstance(module, SelfAttention):
                _xavier_blocks(module.qkv.weight, 3)
            elif isinstance(module, CrossAttention):
                _xavier_blocks(module.kv.weight, 2)

    def num_parameters(self) -> int:
        """Number of distinct parameter elements (tied tensors counted once)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self) -> tuple[float, float]:
        """≈ 6 × matrix parameters a token passes through: (FLOPs per source token, per target token).

        Training FLOPs (forward + backward), as in nanoGPT's estimate_mfu. Source tokens pass the
        encoder; target tokens the decoder and the output projection. Attention-score FLOPs (short
        sentences) and embedding lookups are left out.
        """
        def matrices(prefix: str) -> int:
            return sum(p.numel() for n, p in self.named_parameters() if n.startswith(prefix) and p.dim() >= 2)

        out = self.tgt_embed.weight.numel()  # the output projection (tied or not, the same size)
        return 6.0 * matrices("encoder"), 6.0 * (matrices("decoder") + out)

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, start: int) -> Tensor:
        """tokens (B, T) -> dropout(emb * sqrt(D) + PE[start:start+T]) (no sqrt(D) without model.scale_embedding)  # (B, T, D)"""
        end = start + tokens.size(1)
        if end > self.pe.size(0):
            raise MTError(f"model: sequence of {end} tokens exceeds model.max_positions={self.pe.size(0)}")
        x = embedding(tokens) * self.embed_scale + self.pe[start:end]
        return dropout(x, self.cfg.dropout, self.training)

    def output_layer(self) -> tuple[Tensor, Tensor | None]:
        """The output projection's (weight (V, D), bias (V,) or None): logits = h W^T (+ b)."""
        if self.out_proj is None:
            return self.tgt_embed.weight, getattr(self, "final_logits_bias", None)
        return self.out_proj.weight, self.out_proj.bias

    def _logits(self, h: Tensor) -> Tensor:
        """h (..., D) -> logits (..., V)."""
        return F.linear(h, *self.output_layer())

    def key_mask(self, src_mask: Tensor, queries: int) -> Tensor | BlockMask:
        """The source key-padding mask every layer shares for `queries` queries: (B, 1, 1, S) bool, or
        a FlexAttention block mask while training with `attention_kernel` "flex" (module docstring)."""
        if self.attention_kernel == "flex" and self.training:
            return key_block_mask(src_mask, queries)
        return key_padding_mask(src_mask)

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src (B, S) long, src_mask (B, S) bool (True = real) -> memory (B, S, D)."""
        key_mask = self.key_mask(src_mask, src.size(1))  # shared by every layer
        x = self._embed(self.src_embed, src, 0)
        for layer in self.encoder:
            x = layer(x, key_mask)
        return self.enc_norm(x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, tgt_mask: Tensor | None = None,
               project: bool = True) -> Tensor:
        """Full-sequence decoding: tgt_in (B, T), memory (B, S, D), src_mask (B, S) -> logits (B, T, V),
        or with `project=False` the final decoder states (B, T, D) that `output_layer` projects.

        tgt_mask None (training, search): right-padded targets on the causal fast path. Given a
        (B, T) bool mask, attention uses causal AND key padding explicitly (any padding layout).
        """
        key_mask = self.key_mask(src_mask, tgt_in.size(1))
        self_mask = None
        if tgt_mask is not None:
            T = tgt_in.size(1)
            causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()  # (T, T)
            self_mask = causal & key_padding_mask(tgt_mask)  # (B, 1, T, T)
        x = self._embed(self.tgt_embed, tgt_in, 0)
        for layer in self.decoder:
            k, v = layer.cross_attn.memory_kv(memory)
            x = layer(x, k, v, key_mask, self_mask)
        h = self.dec_norm(x)  # (B, T, D)
        return self._logits(h) if project else h

    def forward(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, project: bool = True) -> Tensor:
        """Teacher-forced training pass -> logits (B, T, V), or the final decoder states (B, T, D)
        with `project=False` (the trainer fuses the projection into its loss: mt.train.loss).

        Logits are float32, or the autocast dtype (e.g. bf16) inside `torch.autocast`; callers
        computing a loss should upcast with `.float()`.
        """
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask, project=project)

    def decode_step(self, tokens: Tensor, memory: Tensor, src_mask: Tensor,
                    cache: DecoderCache | None) -> tuple[Tensor, DecoderCache]:
        """Decode one position: tokens (B, 1) long (BOS on the first call), memory (B, S, D),
        src_mask (B, S) -> (log_probs (B, V) float32, the extended cache).

        The position of `tokens` is `cache.length` (0 without a cache). Memory and src_mask are
        only read without a cache (one row per token row; the cross-attention K/V and the key mask
        are cached), so a cache from `start_cache` may come with any memory (beam search passes a
        zero-width one). Every vocabulary entry is scored, PAD and BOS included: search decides
        what may be emitted.
        """
        cache = self.start_cache(memory, src_mask) if cache is None else cache.writable()
        t = cache.length
        x = self._embed(self.tgt_embed, tokens, t)  # (B, 1, D)
        for i, layer in enumerate(self.decoder):
            x = layer.step(x, cache.k_bufs[i], cache.v_bufs[i], t, cache.cross_k[i], cache.cross_v[i], cache.key_mask,
                           cache.group)
        h = self.dec_norm(x[:, -1])  # (B, D)
        # The cache's contiguous or packed weight: the same logits as _logits, faster (decoder_cache).
        logits = cache.project(h, self.output_layer()[1])  # (B, V)
        return logits.float().log_softmax(dim=-1), cache.advanced()

    def start_cache(self, memory: Tensor, src_mask: Tensor, group: int = 1) -> DecoderCache:
        """The empty decoder cache over encoder memory (N, S, D) and src_mask (N, S) for N * group
        decoder rows (`group` per sentence: its beam): every layer's cross-attention keys/values,
        projected once per sentence."""
        kvs = [layer.cross_attn.memory_kv(memory) for layer in self.decoder]
        return DecoderCache.start([k for k, _ in kvs], [v for _, v in kvs], src_mask, self.output_layer()[0], group)

    @torch.no_grad()
    def cross_attention(self, src: Tensor, src_mask: Tensor, tgt_in: Tensor, layer: int) -> Tensor:
        """Cross-attention weights of decoder layer `layer` (0-based), in eval mode -> (B, H, T, S)."""
        if not 0 <= layer < len(self.decoder):
            raise MTError(f"model: layer {layer} out of range (decoder has {len(self.decoder)} layers)")
        was_training = self.training
        self.eval()
        try:
            memory = self.encode(src, src_mask)
            key_mask = key_padding_mask(src_mask)
            x = self._embed(self.tgt_embed, tgt_in, 0)
            for block in self.decoder[:layer]:
                k, v = block.cross_attn.memory_kv(memory)
                x = block(x, k, v, key_mask, None)
            return self.decoder[layer].cross_weights(x, memory, key_mask)
        finally:
            self.train(was_training)
