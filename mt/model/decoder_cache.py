"""The Transformer's incremental decoding state (`DecoderCache`), kept between `decode_step` calls.

Self-attention keys/values live in preallocated, time-major buffers (capacity, B, H, d_k): a
step writes its position in place instead of concatenating a new (B, H, t+1, d_k) tensor, and
`buffer[:t].permute(1, 2, 0, 3)` is a (B, H, t, d_k) view that batched matmuls read without a
copy. The capacity doubles when full (amortised O(1) per step). Reordering rows (beam search,
finished sentences leaving) gathers the filled positions into fresh buffers with ONE dim-0
`index_select` over (position, row) pairs: `index_select` along dim 1 of the time-major buffer
is many times slower in torch's CPU kernel.

Caches derived from one another by `decode_step` share buffers (that is what makes the append
O(1)). Decoding twice from the same cache is still correct: the cache remembers how many
positions its buffers hold (`_written`, shared), and a cache whose buffers already hold a later
position than its own length copies them before writing (copy on write). `reorder` and
`reorder_beams` always return caches with buffers of their own.

Two more things are worked out once per search instead of once per step: the source key-padding
mask, None when no source row is padded (always so at batch 1, where the masked fill would be a
no-op), and the output projection's weight transposed into a contiguous (D, V) copy: at a handful
of rows `h @ W^T` with W^T contiguous runs ~2x faster on CPU than `F.linear(h, W)` over the (V, D)
embedding matrix (a 6 MB matrix-vector product per step at 8k x 192), and from ~16 rows on it
gives the same bits (docs/performance.md). A copy per search, not one kept on the model: weights
change under the cache's feet in training (validation) and EMA swaps them through `.data`, which a
version check would not see.

From `PACKED_ROWS` rows on, where MKL's kernels are the slow ones (float32 on a non-Intel CPU:
`mt.device.prefers_onednn_linear`, the rule the training loss follows), the weight is packed for
oneDNN's linear instead: on a 2-core AMD EPYC Zen 4, 1 thread, 8k x 192, it takes 253 against
486 us at 8 rows, 927 against 1,371 at 32, 3.8 against 4.6 ms at 128 (in that check the same
sums to the bit from 8 rows on, within 3e-5 below), for ~3 ms of packing per search; at 1 row it
is slower (115 against 102 us), but rows that leave during a search do not repack it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from mt.device import prefers_onednn_linear

INITIAL_CAPACITY = 16  # positions; most sentences of Multi30k-like data fit without growing
# From this many decoder rows a search's output weight is packed for oneDNN where the CPU prefers it
# (`prefers_onednn_linear`; see the module docstring): packing an 8k x 192 weight takes ~3 ms.
PACKED_ROWS = 8


def _gather(bufs: list[Tensor], length: int, index: Tensor | None, capacity: int) -> list[Tensor]:
    """Fresh (capacity, R', H, d_k) buffers holding the first `length` positions of `bufs`, rows
    `index` (R',) long (None = all rows, in order)."""
    out = []
    for buf in bufs:
        rows = buf.size(1) if index is None else index.numel()
        new = buf.new_empty((capacity, rows, *buf.shape[2:]))
        if length and index is None:
            new[:length] = buf[:length]
        elif length:
            width = buf[0, 0].numel()  # H * d_k
            pairs = (torch.arange(length, device=index.device).unsqueeze(1) * buf.size(1) + index).view(-1)
            src, dst = buf.view(-1, width), new.view(-1, width)[: length * rows]
            if src.requires_grad:  # out= does not support autograd; search runs without it
                dst.copy_(src.index_select(0, pairs))
            else:
                torch.index_select(src, 0, pairs, out=dst)
        out.append(new)
    return out


@dataclass
class DecoderCache:
    """Per-layer attention keys/values of the positions decoded so far.

    k_bufs/v_bufs[l]: (capacity, B, H, d_k) self-attention buffers, positions [0, length) filled
    (time-major); `self_k`/`self_v[l]` view the filled part as (B, H, length, d_k).
    cross_k/cross_v[l]: (B / group, H, S, d_k) contiguous, projected once from the encoder memory:
    one entry per sentence, shared by its `group` consecutive rows (a beam), or one per row.
    key_mask: (B / group, 1, 1, S) bool source key-padding mask (True = attend), None when no
    sentence is padded.
    output_t: (D, V) contiguous, the output projection's weight transposed (see the module docstring).
    """

    k_bufs: list[Tensor]
    v_bufs: list[Tensor]
    cross_k: list[Tensor]
    cross_v: list[Tensor]
    length: int = 0
    _written: list[int] = field(default_factory=lambda: [0])  # positions the shared buffers hold
    key_mask: Tensor | None = None
    output_t: Tensor | None = None
    group: int = 1  # decoder rows per cross-attention entry
    output_packed: Tensor | None = None  # the output weight packed for oneDNN (instead of output_t)

    @classmethod
    def start(cls, cross_k: list[Tensor], cross_v: list[Tensor], src_mask: Tensor,
              output_weight: Tensor, group: int = 1) -> DecoderCache:
        """An empty cache over the cross-attention keys/values (N, H, S, d_k) of each layer, the
        source mask src_mask (N, S) bool and the output projection's weight (V, D), for
        B = N * group decoder rows: rows [n * group, (n + 1) * group) read entry n."""
        cross_k, cross_v = [k.contiguous() for k in cross_k], [v.contiguous() for v in cross_v]
        N, H, _, d_k = cross_k[0].shape

        def buffers() -> list[Tensor]:
            return [k.new_empty((INITIAL_CAPACITY, N * group, H, d_k)) for k in cross_k]

        # One host sync per search (none per step); an all-True mask would mask nothing.
        key_mask = None if bool(src_mask.all()) else src_mask[:, None, None, :]
        rows = N * group
        if rows >= PACKED_ROWS and not torch.is_grad_enabled() and prefers_onednn_linear(output_weight):
            packed = torch.ops.mkldnn._reorder_linear_weight(output_weight, rows)
            return cls(buffers(), buffers(), cross_k, cross_v, 0, [0], key_mask, None, group, packed)
        return cls(buffers(), buffers(), cross_k, cross_v, 0, [0], key_mask, output_weight.t().contiguous(),
                   group)

    def project(self, h: Tensor, bias: Tensor | None) -> Tensor:
        """The output projection's logits h W^T (+ bias): h (B, D) -> (B, V)."""
        if self.output_packed is not None:
            return torch.ops.mkldnn._linear_pointwise(h, self.output_packed, bias, "none", [], "")
        return h @ self.output_t if bias is None else torch.addmm(bias, h, self.output_t)

    @property
    def self_k(self) -> list[Tensor]:
        """Each layer's self-attention keys so far, (B, H, length, d_k) views of the buffers."""
        return [buf[: self.length].permute(1, 2, 0, 3) for buf in self.k_bufs]

    @property
    def self_v(self) -> list[Tensor]:
        """Each layer's self-attention values so far, (B, H, length, d_k) views of the buffers."""
        return [buf[: self.length].permute(1, 2, 0, 3) for buf in self.v_bufs]

    def writable(self) -> DecoderCache:
        """This cache, ready to take position `length`: grown when full, copied when its buffers
        already hold a later position (another branch decoded from the same cache)."""
        capacity = self.k_bufs[0].size(0)
        if self.length < capacity and self._written[0] == self.length:
            return self
        capacity = 2 * capacity if self.length == capacity else capacity
        return replace(self, k_bufs=_gather(self.k_bufs, self.length, None, capacity),
                       v_bufs=_gather(self.v_bufs, self.length, None, capacity), _written=[self.length])

    def advanced(self) -> DecoderCache:
        """The cache after `decode_step` wrote position `length` into these buffers."""
        self._written[0] = self.length + 1
        return replace(self, length=self.length + 1)

    def reorder(self, index: Tensor) -> DecoderCache:
        """Select batch rows `index` (B',) long: follow beams, or drop finished sentences. With
        group > 1, `index` keeps groups whole: each run of `group` rows comes from one group
        (a sentence's beam follows its own rows), so the cross-attention entries follow
        index[::group] // group."""
        capacity = self.k_bufs[0].size(0)
        entries = (index if self.group == 1
                   else torch.div(index[:: self.group], self.group, rounding_mode="floor"))
        return replace(self, k_bufs=_gather(self.k_bufs, self.length, index, capacity),
                       v_bufs=_gather(self.v_bufs, self.length, index, capacity),
                       cross_k=[t.index_select(0, entries) for t in self.cross_k],
                       cross_v=[t.index_select(0, entries) for t in self.cross_v], _written=[self.length],
                       key_mask=None if self.key_mask is None else self.key_mask.index_select(0, entries))

    def reorder_beams(self, index: Tensor) -> DecoderCache:
        """Like `reorder`, for an `index` (B,) that only moves rows among the beams of one sentence.

        Those rows share the same encoder memory, so their cross-attention keys/values are equal
        and are kept as they are instead of being copied on every beam-search step.
        """
        capacity = self.k_bufs[0].size(0)
        return replace(self, k_bufs=_gather(self.k_bufs, self.length, index, capacity),
                       v_bufs=_gather(self.v_bufs, self.length, index, capacity), _written=[self.length])
