"""The Transformer encoder-decoder (Vaswani et al. 2017) with a narrow interface for search.

Training calls `forward(src, src_mask, tgt_in) -> logits`. Search calls `encode` once and then
`decode_step` token by token with a `DecoderCache` (mt/model/decoder_cache.py); `DecoderCache.reorder`
follows beams. The attention, feed-forward and layer blocks are in mt/model/layers.py.

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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.config import ModelConfig
from mt.errors import MTError
from mt.model.decoder_cache import DecoderCache
from mt.model.fastops import BlockMask, dropout, key_block_mask
from mt.model.layers import (
    CrossAttention,
    DecoderLayer,
    EncoderLayer,
    SelfAttention,
    key_padding_mask,
    xavier_blocks,
)


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


class Transformer(nn.Module):
    """Encoder-decoder Transformer. See the module docstring for masks, init and tying."""

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, *,
                 joint_vocab: bool) -> None:
        super().__init__()
        if joint_vocab and src_vocab_size != tgt_vocab_size:
            raise MTError(f"model: joint vocabulary needs equal sizes, "
                          f"got {src_vocab_size} and {tgt_vocab_size}")
        self.cfg, self.d_model = cfg, cfg.d_model
        self.attention_kernel = "sdpa"  # "flex": key padding by FlexAttention block masks while training
        self.tgt_embed = nn.Embedding(tgt_vocab_size, cfg.d_model)
        share_src = joint_vocab and cfg.tie_embeddings
        self.src_embed = self.tgt_embed if share_src else nn.Embedding(src_vocab_size, cfg.d_model)
        # None when tied: logits are then F.linear(h, tgt_embed.weight) with no bias.
        self.out_proj = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, tgt_vocab_size)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions),
                             persistent=False)
        # model.final_logits_bias: a fixed (V,) logit bias of the tied projection (a checkpoint's,
        # e.g. Marian's)
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
                xavier_blocks(module.qkv.weight, 3)
            elif isinstance(module, CrossAttention):
                xavier_blocks(module.kv.weight, 2)

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
        """tokens (B, T) -> dropout(emb * sqrt(D) + PE[start:start+T]) (no sqrt(D) without
        model.scale_embedding)  # (B, T, D)"""
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

    def decode_tree(self, tokens: Tensor, depths: Tensor, sees: Tensor, memory: Tensor,
                    src_mask: Tensor) -> Tensor:
        """Teacher-forced decoding of token trees: several outputs of one source that share their
        first tokens, each shared prefix run once. tokens (B, N) long: each row's tree nodes (BOS at
        its root); depths (B, N): each node's position in the outputs through it; sees (B, N, N)
        bool: node i attends node j (j is i or one of its ancestors; a padding node sees itself);
        memory (B, S, D), src_mask (B, S) -> the final decoder states (B, N, D): each node's state
        as `decode` gives it at that position of any output through the node."""
        if tokens.numel() and int(depths.max()) >= self.pe.size(0):
            raise MTError(f"model: sequence of {int(depths.max()) + 1} tokens exceeds "
                          f"model.max_positions={self.pe.size(0)}")
        x = self.tgt_embed(tokens) * self.embed_scale + self.pe[depths]  # `_embed`, at each node's depth
        x = dropout(x, self.cfg.dropout, self.training)
        key_mask, self_mask = self.key_mask(src_mask, tokens.size(1)), sees.unsqueeze(1)  # (B, 1, N, N)
        for layer in self.decoder:
            x = layer(x, *layer.cross_attn.memory_kv(memory), key_mask, self_mask)
        return self.dec_norm(x)

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
            x = layer.step(x, cache.k_bufs[i], cache.v_bufs[i], t, cache.cross_k[i], cache.cross_v[i],
                           cache.key_mask, cache.group)
        h = self.dec_norm(x[:, -1])  # (B, D)
        # The cache's contiguous or packed weight: the same logits as _logits, faster (decoder_cache).
        logits = cache.project(h, self.output_layer()[1])  # (B, V)
        return logits.float().log_softmax(dim=-1), cache.advanced()

    def start_cache(self, memory: Tensor, src_mask: Tensor, group: int = 1) -> DecoderCache:
        """The empty decoder cache over encoder memory (N, S, D) and src_mask (N, S) for N * group
        decoder rows (`group` per sentence: its beam): every layer's cross-attention keys/values,
        projected once per sentence."""
        kvs = [layer.cross_attn.memory_kv(memory) for layer in self.decoder]
        return DecoderCache.start([k for k, _ in kvs], [v for _, v in kvs], src_mask, self.output_layer()[0],
                                  group)

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
