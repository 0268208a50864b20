"""The output projection fused with the label-smoothed loss (mt.train.loss): hand-derived golden
values, agreement with the plain computation (values and gradients, chunk boundaries, PAD rows,
bias, bf16 autocast), and the trainer's use of it through the model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import mt.device
from conftest import require
from mt.config import ModelConfig
from mt.model.transformer import Transformer
from mt.train import loss as fused_loss
from mt.train.loss import label_smoothed_nll, projected_smoothed_nll


def both(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, target: torch.Tensor, eps: float,
         scale: float = 1.0) -> list[tuple]:
    """(loss, nll, tokens, dL/dh, dL/dW, dL/db) of the plain and the fused computation, backward of scale*loss."""
    out = []
    for fused in (False, True):
        for p in (h, w, b):
            if p is not None:
                p.grad = None
        if fused:
            loss, nll, n = projected_smoothed_nll(h, w, b, target, eps)
        else:
            loss, nll, n = label_smoothed_nll(F.linear(h, w, b), target, eps)
        (loss * scale).backward()
        out.append((loss.item(), nll.item(), int(n), h.grad.clone(), w.grad.clone(),
                    None if b is None else b.grad.clone()))
    return out


def test_golden_values_uniform_logits() -> None:
    # W = 0 -> logits 0 -> p = 1/3 for V = 3; target y = 2; eps = 0.3; h = [[2]] (one position).
    #   nll = ln 3; smoothed = 0.7 ln 3 + (0.3 / 3) * 3 ln 3 = ln 3
    #   dL/dlogit_v = p_v - eps/V - (1 - eps)[v == y] = [1/3 - 0.1, 1/3 - 0.1, 1/3 - 0.1 - 0.7]
    #   dL/dW_v = dL/dlogit_v * h = 2 * that; dL/dh = Σ_v dL/dlogit_v W_v = 0
    h = torch.tensor([[[2.0]]], dtype=torch.float64, requires_grad=True)
    w = torch.zeros(3, 1, dtype=torch.float64, requires_grad=True)
    loss, nll, n = projected_smoothed_nll(h, w, None, torch.tensor([[2]]), 0.3)
    loss.backward()
    assert loss.item() == pytest.approx(math.log(3.0), rel=1e-12)
    assert nll.item() == pytest.approx(math.log(3.0), rel=1e-12)
    assert n.item() == 1
    g = 1 / 3 - 0.1
    assert w.grad[:, 0].tolist() == pytest.approx([2 * g, 2 * g, 2 * (g - 0.7)], rel=1e-12)
    assert h.grad.item() == 0.0


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("chunk_bytes", [4 * 40 * 16, 1 << 20])  # 16-row chunks (many, a ragged last one) or one
def test_matches_plain_loss_and_gradients(bias: bool, eps: float, chunk_bytes: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", chunk_bytes)
    torch.manual_seed(0)
    B, T, D, V = 5, 13, 8, 40
    h = torch.randn(B, T, D, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, D, dtype=torch.float64, requires_grad=True)
    b = torch.randn(V, dtype=torch.float64, requires_grad=True) if bias else None
    target = torch.randint(1, V, (B, T))
    target[1, 4:] = 0  # PAD rows: no loss, zero gradient
    target[3, 9:] = 0
    plain, fused = both(h, w, b, target, eps, scale=0.37)
    assert fused[0] == pytest.approx(plain[0], rel=1e-6)  # plain runs the softmax in float32
    assert fused[1] == pytest.approx(plain[1], rel=1e-6)
    assert fused[2] == plain[2] == int(target.ne(0).sum())
    for got, want in zip(fused[3:], plain[3:]):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert fused[3][1, 4:].abs().max().item() == 0.0  # PAD positions get no gradient


# vendor_id of /proc/cpuinfo, whether this torch has oneDNN's packed linear -> whether the fused
# loss packs its weight for oneDNN (float32 on CPU), written out by hand: MKL picks slow kernels
# on non-Intel CPUs (mt/train/loss.py), and a torch without the ops keeps the plain products.
LOSS_ROUTES = [
    ("GenuineIntel", True, False),
    ("AuthenticAMD", True, True),
    ("HygonGenuine", True, True),  # not Intel: MKL's vendor check sends it to its slow kernels too
    ("", True, False),  # no /proc/cpuinfo (not Linux): nothing known, keep MKL
    ("AuthenticAMD", False, False),  # a torch without the ops falls back to the plain products
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("vendor, has_op, packed", LOSS_ROUTES)
def test_float32_products_by_cpu_vendor_match_plain(vendor: str, has_op: bool, packed: bool, bias: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 on a CPU: plain products (MKL) on Intel, oneDNN on a packed weight elsewhere
    (where this torch has the ops); both give the plain loss and gradients to float32 rounding."""
    if has_op:
        require("onednn packed linear")
    else:
        monkeypatch.setattr(mt.device, "onednn_linear_available", lambda: False)
    monkeypatch.setattr(mt.device, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", 4 * 300 * 16)  # 16-row chunks, a ragged last one
    routes = []
    monkeypatch.setattr(fused_loss._Products, "__init__", _spy(fused_loss._Products.__init__, routes))
    torch.manual_seed(0)
    B, T, D, V = 6, 11, 24, 300
    h = torch.randn(B, T, D, requires_grad=True)
    w = (0.3 * torch.randn(V, D)).requires_grad_()
    b = torch.randn(V, requires_grad=True) if bias else None
    target = torch.randint(1, V, (B, T))
    target[2, 5:] = 0
    plain, fused = both(h, w, b, target, 0.1, scale=0.5)
    assert routes == [packed]
    assert fused[0] == pytest.approx(plain[0], rel=1e-5)
    for got, want in zip(fused[3:], plain[3:]):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _spy(init, routes: list):  # noqa: ANN001, ANN202
    """Wrap _Products.__init__ to record whether each instance packed its weight for oneDNN."""
    def wrapped(self, *args):  # noqa: ANN001, ANN202
        init(self, *args)
        routes.append(self.packed is not None)
    return wrapped


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), T=st.integers(1, 9), V=st.integers(2, 30), eps=st.floats(0.0, 0.5),
       pad_prob=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_property_equals_plain(B: int, T: int, V: int, eps: float, pad_prob: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(B, T, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(V, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    target = torch.randint(1, V, (B, T), generator=gen)
    target[torch.rand(B, T, generator=gen) < pad_prob] = 0  # any PAD layout, all PAD included
    fused_loss.CHUNK_BYTES, saved = 4 * V * 5, fused_loss.CHUNK_BYTES  # 16-row floor: chunks of 16
    try:
        plain, fused = both(h, w, None, target, eps)
    finally:
        fused_loss.CHUNK_BYTES = saved
    assert fused[0] == pytest.approx(plain[0], rel=1e-5, abs=1e-6)
    assert fused[2] == plain[2]
    torch.testing.assert_close(fused[3], plain[3], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused[4], plain[4], rtol=1e-5, atol=1e-6)


# 16-row chunks in one dL/dW group; 16-row chunks in groups of 32 rows (110 real rows: 32 + 32 + 32
# + 14, a ragged last group); 16-row chunks, each its own group; one chunk.
@pytest.mark.parametrize(("chunk_bytes", "group_bytes"), [(4 * 500 * 16, 1 << 24), (4 * 500 * 16, 2 * 500 * 40),
                                                          (4 * 500 * 16, 0), (1 << 22, 1 << 24)])
def test_bf16_autocast_close_to_plain_autocast(chunk_bytes: int, group_bytes: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Products in bf16 both ways, softmax and loss in float32: the same values up to bf16 rounding.
    monkeypatch.setattr(fused_loss, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(fused_loss, "GROUP_BYTES", group_bytes)
    torch.manual_seed(0)
    h = torch.randn(4, 30, 32, requires_grad=True)
    w = (torch.randn(500, 32) * 0.2).requires_grad_()
    target = torch.randint(1, 500, (4, 30))
    target[2, 20:] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, fused = both(h, w, None, target, 0.1)
    assert fused[0] == pytest.approx(plain[0], rel=1e-3)
    for got, want in zip(fused[3:5], plain[3:5]):
        assert got.dtype == want.dtype == torch.float32
        assert (got - want).norm() / want.norm() < 2e-2


def test_no_grad_is_the_plain_loss() -> None:
    torch.manual_seed(0)
    h, w = torch.randn(2, 7, 8), torch.randn(30, 8)
    target = torch.randint(0, 30, (2, 7))
    with torch.no_grad():
        got = projected_smoothed_nll(h, w, None, target, 0.1)
    want = label_smoothed_nll(F.linear(h, w), target, 0.1)
    assert [x.item() for x in got] == [x.item() for x in want]


@pytest.mark.parametrize("tie", [True, False])
def test_model_states_and_output_layer_give_the_logits(tie: bool) -> None:
    cfg = ModelConfig(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0,
                      attention_dropout=0.0, max_positions=32, tie_embeddings=tie)
    torch.manual_seed(0)
    model = Transformer(cfg, 20, 20, joint_vocab=True).eval()
    src, tgt = torch.randint(1, 20, (3, 6)), torch.randint(1, 20, (3, 5))
    src_mask = torch.ones(3, 6, dtype=torch.bool)
    hidden = model(src, src_mask, tgt, project=False)  # (B, T, D)
    assert hidden.shape == (3, 5, 16)
    torch.testing.assert_close(F.linear(hidden, *model.output_layer()), model(src, src_mask, tgt))


@pytest.mark.requires("c++ compiler")  # torch.compile on CPU builds C++ kernels: missing, the test fails
def test_compiled_model_loss_equals_eager() -> None:
    """The compile path (`scripts/bench/bench_model.py --compile`): torch.compile of the model traces
    as ONE graph (fullgraph: no graph break falls back to eager) and gives the eager loss and
    gradients on a fixed batch (dropout off, so both passes are deterministic). The aot_eager
    backend runs dynamo's trace and AOT autograd's decompositions without inductor's C++ build
    (50 s of a 2-core CI); inductor and its kernels run in the GPU check (scripts/bench/gpu_check.sh)."""
    from mt.data.batching import collate
    from mt.train.step import batch_loss

    cfg = ModelConfig(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0,
                      attention_dropout=0.0, max_positions=32)
    torch.manual_seed(0)
    model = Transformer(cfg, 30, 30, joint_vocab=True).train()
    gen = torch.Generator().manual_seed(1)
    batch = collate([torch.randint(4, 30, (n,), generator=gen).numpy() for n in (5, 3, 7)],
                    [torch.randint(4, 30, (n,), generator=gen).numpy() for n in (4, 6, 2)], list(range(3)))
    results = []
    for net in (model, torch.compile(model, backend="aot_eager", fullgraph=True)):
        model.zero_grad(set_to_none=True)
        loss, nll, n = batch_loss(net, net, batch, 0.1)
        loss.backward()
        results.append((loss.detach(), nll, n, [p.grad.clone() for p in model.parameters()]))
    (loss_e, nll_e, n_e, grads_e), (loss_c, nll_c, n_c, grads_c) = results
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(nll_c, nll_e, rtol=1e-5, atol=1e-5)
    assert n_c == n_e == 4 + 6 + 2 + 3  # |y| + 1 (EOS) per sentence
    for got, want in zip(grads_c, grads_e):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
