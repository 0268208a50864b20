"""The trainer's loss: label-smoothed cross-entropy, and the output projection fused into it.

Label smoothing (Szegedy et al. 2016; the convention of Vaswani et al. 2017 and of
`torch.nn.functional.cross_entropy(label_smoothing=ε)`): the target distribution is

    q = (1 - ε) · onehot(y) + ε / V        (ε/V goes to EVERY class, the gold one included)

so the smoothed loss of one target token is

    loss = (1 - ε) · (-log p_y) + (ε / V) · Σ_v (-log p_v).

PAD targets contribute nothing. Both functions return SUMS (smoothed loss, NLL, token count);
the trainer divides by the number of target tokens of the whole update (all micro-batches of
gradient accumulation, all ranks), so the gradient is a per-target-token mean however the update
is split.

`label_smoothed_nll` takes logits. `projected_smoothed_nll` (CPU training) takes the decoder
states and computes the projection and the loss together in row chunks. The plain way
(`label_smoothed_nll` on the model's logits) materialises the (N, V)
logits of a batch (1,200 target positions x 8,000 classes = 38 MB in float32), makes a
log_softmax pass over them, and in backward builds the (N, V) logit gradient and runs its two
products. Every one of those passes streams a buffer many times the size of the L2 cache.
`projected_smoothed_nll` does the same arithmetic `rows` target positions at a time, on a block
of logits that stays in cache: the logits, their log_softmax, the loss, the logit gradient
g = softmax - q, and both products of the backward (dL/dh = g W, dL/dW += g^T h). So the
gradients are computed in the forward pass; backward only scales them by the incoming gradient,
a scalar because the loss is a sum. PAD target positions are dropped before any product.

The maths is that of `label_smoothed_nll(F.linear(h, W, b), target, eps)`; only the order of
floating-point additions differs, and tests compare values and gradients. Under bf16/fp16
autocast the products run in that dtype, as autocast would run them, and the softmax and loss in
float32. Off the CPU, or when no gradient is needed, the plain
computation runs instead: GPUs gain nothing from cache-sized chunks. Measurements:
docs/performance.md.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from mt.device import prefers_onednn_linear

CHUNK_BYTES = 1 << 22  # float32 logits per chunk: 131 rows at V = 8,000
# 16-bit products: the logit gradients of this many bytes of rows (1,048 rows at V = 8,000) share one
# dL/dW product, so the float32 (V, D) gradient is cast and added once per group, not once per
# chunk (that was 12 ms of a 180 ms bf16 step of the demo model), and the product's inner dimension
# is the group's rows instead of a chunk's 131 (docs/performance.md, issue 46).
GROUP_BYTES = 1 << 24


class _Products:
    """The two products of a chunk with the output weight W (V, D): logits = h W^T (+ b) and dL/dh = g W.

    Plain `torch.mm` goes to MKL, which picks its kernels by CPU vendor: on an AMD EPYC Zen 3 its
    fp32 product at these shapes (131 x 192 by 192 x 8,000, K = 192) ran at 74-82 GFLOP/s
    against 123-131 for oneDNN on a weight packed once per update (and 114-125 against 139-140 for
    g W). So in float32 on a non-Intel CPU, W and W^T are packed for oneDNN once per forward and
    both products run there; elsewhere (Intel, bf16/fp16, a torch without these oneDNN ops) they
    stay plain products. Packing costs ~2 ms per update. The sums differ from MKL's only in
    rounding order. Figures: docs/performance.md.
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, rows: int) -> None:
        self.weight, self.bias = weight, bias
        self.packed = self.packed_t = None
        if prefers_onednn_linear(weight):
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)  # for h W^T
            self.packed_t = torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), rows)  # for g W

    def logits(self, h: Tensor) -> Tensor:
        """h (r, D) -> (r, V)."""
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(h, self.packed, self.bias, "none", [], "")
        return h @ self.weight.t() if self.bias is None else torch.addmm(self.bias, h, self.weight.t())

    def grad_hidden(self, g: Tensor, out: Tensor) -> None:
        """g (r, V) -> g W written into out (r, D)."""
        if self.packed_t is not None:
            out.copy_(torch.ops.mkldnn._linear_pointwise(g, self.packed_t, None, "none", [], ""))
        elif out.dtype == g.dtype:
            torch.mm(g, self.weight, out=out)
        else:
            out.copy_(g @ self.weight)


class _SmoothedNLL(torch.autograd.Function):
    """Fused label-smoothed cross-entropy over rows of logits, with a hand-written backward.

    Per row, with lp = log_softmax(x): loss = -(1-ε)·lp_y - ε·mean(lp), since
    Σ_v -log p_v = -V·mean(lp); the gradient is softmax(x) - (1-ε)·onehot(y) - ε/V. The forward
    makes one fused log_softmax pass over the (N, V) logits and saves its float32 result; the
    backward turns that buffer into the gradient in place (exp, shift, scale), so no other (N, V)
    temporary is allocated: fewer passes over the logits than autograd through log_softmax, or
    than recomputing the softmax from saved logits (which also costs an extra bf16 -> float32 copy).
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor,
                epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
        # logits (N, V), target (N,) long, weight (N,) float: 1 for real tokens, 0 for PAD
        lp = torch.log_softmax(logits.float(), dim=-1)  # (N, V) float32
        nll = -lp.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        per_token = (1.0 - epsilon) * nll - epsilon * lp.mean(-1) if epsilon > 0 else nll
        ctx.save_for_backward(lp, target, weight)
        ctx.epsilon, ctx.dtype = epsilon, logits.dtype
        return (per_token * weight).sum(), (nll * weight).sum()

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, grad_nll: torch.Tensor) -> tuple:
        lp, target, weight = ctx.saved_tensors
        eps, vocab = ctx.epsilon, lp.size(-1)
        w = (grad_loss * weight).unsqueeze(1)  # (N, 1); the NLL output is for reporting, not trained
        grad = lp.exp_()  # softmax, in the saved buffer: this backward runs once (no retain_graph)
        if eps > 0:
            grad.sub_(eps / vocab)
        grad.mul_(w).scatter_add_(1, target.unsqueeze(1), -(1.0 - eps) * w)
        return grad.to(ctx.dtype), None, None, None


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss, summed NLL and the number of non-PAD targets.

    logits: (B, T, V) any float dtype (computed in float32); target: (B, T) long, `pad_id` where
    padded. Returns three 0-d tensors: loss (differentiable), nll (detached), tokens (long).
    """
    vocab = logits.size(-1)
    flat_target = target.reshape(-1)  # (N,)
    mask = flat_target.ne(pad_id)  # True = a real target token
    loss, nll = _SmoothedNLL.apply(logits.reshape(-1, vocab), flat_target, mask.float(), float(epsilon))
    return loss, nll.detach(), mask.sum()


def chunk_rows(vocab: int) -> int:
    """Target positions per chunk for a vocabulary of `vocab` classes."""
    return max(16, CHUNK_BYTES // (4 * vocab))


class _ProjectedSmoothedNLL(torch.autograd.Function):
    """Loss and gradients of the output projection + label-smoothed NLL over real target rows."""

    @staticmethod
    def forward(ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                epsilon: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        # hidden (n, D): real target positions only; weight (V, D); bias (V,) or None; target (n,) long
        vocab = weight.size(0)
        acc = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype  # softmax and loss
        w = weight.to(dtype)
        h = hidden.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros_like(weight) if h.size(0) == 0 else torch.empty_like(weight)  # set by chunk 0
        grad_b = torch.zeros_like(bias) if bias is not None else None
        picked = torch.empty(h.size(0), 1, dtype=acc)  # log p_y per position
        lp_sums = torch.empty(h.size(0), 1, dtype=acc)  # sum_v log p_v per position
        rows = chunk_rows(vocab)
        # gradient at the target class
        gold_step = torch.full((min(rows, h.size(0)), 1), epsilon - 1.0, dtype=acc)
        products = _Products(w, b, rows) if h.size(0) else None
        # 16-bit products, float32 dL/dW: the chunks' gradients g are kept (16-bit) for GROUP_BYTES
        # worth of rows and multiplied once per group, so dL/dW is cast and added once a group.
        grouped = grad_w.dtype != dtype
        group_rows = min(h.size(0), max(rows, GROUP_BYTES // (2 * vocab) // rows * rows)) if grouped else 0
        g_group = torch.empty(group_rows, vocab, dtype=dtype) if grouped else None
        group_start = 0
        for start in range(0, h.size(0), rows):
            end = min(start + rows, h.size(0))
            h_c, t_c = h[start:end], target[start:end, None]  # (r, D), (r, 1)
            logits = products.logits(h_c)  # (r, V)
            lp = torch.log_softmax(logits, dim=-1, dtype=acc)  # (r, V)
            torch.gather(lp, 1, t_c, out=picked[start:end])
            if epsilon > 0:
                torch.sum(lp, dim=1, keepdim=True, out=lp_sums[start:end])
            g = lp.exp_()  # softmax, in place: g = softmax - eps/V - (1 - eps) onehot(y)
            if epsilon > 0:
                g.sub_(epsilon / vocab)
            g.scatter_add_(1, t_c, gold_step[:end - start])
            if grad_b is not None:
                grad_b += g.sum(0)
            if grouped:
                g = g_group[start - group_start:end - group_start].copy_(g)  # cast into the group's buffer
            else:
                g = g.to(dtype)
            products.grad_hidden(g, grad_h[start:end])
            if grouped:
                if end - group_start == group_rows or end == h.size(0):  # the group is full, or the last
                    group_w = g_group[:end - group_start].t() @ h[group_start:end]  # (V, D) in 16 bits
                    if group_start == 0:
                        grad_w.copy_(group_w)
                    else:
                        grad_w.add_(group_w)
                    group_start = end
            elif start == 0:  # the first chunk writes dL/dW (no zero fill first), the others add
                torch.mm(g.t(), h_c, out=grad_w)
            else:
                grad_w.addmm_(g.t(), h_c)
        nll = -picked.sum()
        loss = (1.0 - epsilon) * nll - (epsilon / vocab) * lp_sums.sum() if epsilon > 0 else nll.clone()
        ctx.grads = (grad_h, grad_w, grad_b)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, grad_nll: Tensor) -> tuple:
        # The loss is a sum, so its gradients scale with the incoming scalar; scaled in place:
        # this backward runs once (no retain_graph), and dropping the references frees them.
        grad_h, grad_w, grad_b = ctx.grads
        ctx.grads = None
        scale = grad_loss.to(grad_w.dtype)
        return (grad_h.mul_(scale.to(grad_h.dtype)), grad_w.mul_(scale),
                grad_b.mul_(scale) if grad_b is not None else None, None, None, None)


def projected_smoothed_nll(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                           epsilon: float, pad_id: int = 0,
                           real: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """`label_smoothed_nll(F.linear(hidden, weight, bias), target, epsilon, pad_id)`, in row chunks.

    hidden: (B, T, D) the decoder's final states; weight (V, D) and bias (V,) or None: the output
    projection; target: (B, T) long, `pad_id` where padded. Returns the summed smoothed loss
    (differentiable), the summed NLL (detached) and the number of real target tokens, 0-d tensors.
    `real`: (n,) long, the non-PAD positions of target.reshape(-1) when the caller knows them
    (`Batch.real_targets`, found on the host), else found here with `nonzero`.
    """
    if hidden.device.type != "cpu" or not torch.is_grad_enabled():
        return label_smoothed_nll(F.linear(hidden, weight, bias), target, epsilon, pad_id)
    flat_target = target.reshape(-1)  # (N,)
    if real is None:
        real = flat_target.ne(pad_id).nonzero().squeeze(1)  # (n,) indices of real target positions
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype
    with torch.autocast("cpu", enabled=False):  # the products' dtype is chosen explicitly above
        real_hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, real)
        loss, nll = _ProjectedSmoothedNLL.apply(real_hidden, weight, bias, flat_target.index_select(0, real),
                                                float(epsilon), dtype)
    return loss, nll, torch.tensor(real.numel())
