"""Label-smoothed loss (hand-computed golden values), optimizer groups and LR schedules."""

from __future__ import annotations

import math

import pytest
import torch

from mt.config import TrainConfig
from mt.train.loss import label_smoothed_nll
from mt.train.optim import Schedule, build_optimizer, training_progress

LN2 = math.log(2.0)


def test_label_smoothed_loss_golden_value() -> None:
    # V = 3, logits = log([1, 2, 1]) -> p = [1/4, 1/2, 1/4]; target y = 1; eps = 0.3.
    #   nll    = -log p_y = -log(1/2) = ln 2
    #   Σ_v -log p_v = ln 4 + ln 2 + ln 4 = 5 ln 2
    #   loss   = (1 - eps) * nll + (eps / V) * Σ_v -log p_v
    #          = 0.7 * ln 2 + 0.1 * 5 ln 2 = 1.2 ln 2 = 0.8317766...
    logits = torch.log(torch.tensor([[[1.0, 2.0, 1.0]]]))  # (B=1, T=1, V=3)
    target = torch.tensor([[1]])
    loss, nll, tokens = label_smoothed_nll(logits, target, 0.3, pad_id=0)
    assert loss.item() == pytest.approx(1.2 * LN2, rel=1e-6)
    assert nll.item() == pytest.approx(LN2, rel=1e-6)
    assert tokens.item() == 1


def test_label_smoothing_matches_torch_convention() -> None:
    # ε/V to every class incl. the gold one: the same as F.cross_entropy(label_smoothing=ε).
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    target = torch.randint(1, 11, (2, 5))
    target[1, 3:] = 0
    loss, _, _ = label_smoothed_nll(logits, target, 0.1)
    ref = torch.nn.functional.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=0,
                                            label_smoothing=0.1, reduction="sum")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)


def test_padding_is_ignored() -> None:
    # The same sentence with extra PAD columns (whatever their logits) gives the same sums.
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 7, requires_grad=True)
    target = torch.tensor([[4, 5, 3]])
    padded_logits = torch.cat([logits, 100 * torch.randn(1, 4, 7)], dim=1)  # (1, 7, 7)
    padded_target = torch.cat([target, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    a = label_smoothed_nll(logits, target, 0.1)
    b = label_smoothed_nll(padded_logits, padded_target, 0.1)
    for x, y in zip(a, b):
        assert torch.allclose(x.float(), y.float())
    assert b[2].item() == 3
    b[0].backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_no_smoothing_is_plain_nll() -> None:
    logits = torch.log(torch.tensor([[[1.0, 2.0, 1.0], [1.0, 1.0, 2.0]]]))
    loss, nll, tokens = label_smoothed_nll(logits, torch.tensor([[1, 2]]), 0.0)
    assert loss.item() == pytest.approx(2 * LN2, rel=1e-6) and nll.item() == pytest.approx(2 * LN2, rel=1e-6)


def test_weight_decay_skips_biases_and_layernorm() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    opt = build_optimizer(model, TrainConfig(weight_decay=0.01, optimizer="adamw"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])]
    assert len(no_decay["params"]) == 3  # linear bias, LayerNorm weight and bias
    assert isinstance(build_optimizer(model, TrainConfig(optimizer="adam")), torch.optim.Adam)


def _schedule(kind: str, lr: float = 1e-3, warmup: int = 100, horizon: bool = False) -> Schedule:
    return Schedule.from_config(TrainConfig(schedule=kind, lr=lr, warmup=warmup), d_model=256, has_horizon=horizon)


def test_inverse_sqrt_values() -> None:
    s = _schedule("inverse_sqrt")
    assert s.lr_at(1, 0.0) == pytest.approx(1e-3 * 1 / 100)
    assert s.lr_at(50, 0.0) == pytest.approx(0.5e-3)
    assert s.lr_at(100, 0.0) == pytest.approx(1e-3)
    assert s.lr_at(400, 0.0) == pytest.approx(1e-3 * math.sqrt(100 / 400))  # = 0.5e-3


def test_noam_values() -> None:
    s = _schedule("noam", lr=2.0, warmup=4000)
    # lr · d^-0.5 · min(step^-0.5, step · warmup^-1.5)
    assert s.lr_at(1000, 0.0) == pytest.approx(2.0 * 256 ** -0.5 * 1000 * 4000 ** -1.5)
    assert s.lr_at(4000, 0.0) == pytest.approx(2.0 / 16 / math.sqrt(4000))
    assert s.lr_at(16000, 0.0) == pytest.approx(2.0 / 16 / math.sqrt(16000))


def test_linear_decay_and_constant() -> None:
    s = _schedule("linear_decay", horizon=True)
    assert s.lr_at(50, 0.01) == pytest.approx(0.5e-3)  # warmup
    assert s.lr_at(500, 0.25) == pytest.approx(0.75e-3)
    assert s.lr_at(2000, 1.0) == 0.0
    c = _schedule("constant")
    assert c.lr_at(10, 0.9) == pytest.approx(1e-4) and c.lr_at(5000, 0.99) == pytest.approx(1e-3)


def test_cooldown_ends_at_floor() -> None:
    s = _schedule("inverse_sqrt", horizon=True)  # cooldown over the last 20% of progress, floor 0
    at = s.lr_at(400, 0.8)
    assert at == pytest.approx(0.5e-3)  # cooldown not started: the base schedule
    assert s.lr_at(400, 0.9) == pytest.approx(0.5 * at)  # halfway through the cooldown
    assert s.lr_at(400, 1.0) == pytest.approx(s.floor * at) == 0.0
    floored = Schedule(kind="constant", lr=1e-3, warmup=0, d_model=256, has_horizon=True, floor=0.1)
    assert floored.lr_at(10_000, 1.0) == pytest.approx(1e-4)
    # without a horizon nothing anneals
    assert _schedule("inverse_sqrt").lr_at(400, 1.0) == pytest.approx(0.5e-3)


def test_cooldown_fraction_comes_from_the_config() -> None:
    s = Schedule.from_config(TrainConfig(schedule="constant", lr=1e-3, warmup=0, cooldown=0.5), d_model=256,
                             has_horizon=True)
    assert s.lr_at(100, 0.5) == pytest.approx(1e-3)  # the cooldown starts at half the run
    assert s.lr_at(100, 0.75) == pytest.approx(0.5e-3)
    off = Schedule.from_config(TrainConfig(schedule="constant", lr=1e-3, warmup=0, cooldown=0.0), d_model=256,
                               has_horizon=True)
    assert off.lr_at(100, 1.0) == pytest.approx(1e-3)


def test_progress_takes_the_nearest_limit() -> None:
    assert training_progress(50, 0.0, max_updates=100, time_budget=0, horizon_updates=0) == 0.5
    assert training_progress(50, 90.0, max_updates=100, time_budget=100, horizon_updates=0) == 0.9
    assert training_progress(50, 10.0, max_updates=0, time_budget=100, horizon_updates=60) == pytest.approx(50 / 60)
    assert training_progress(50, 500.0, max_updates=0, time_budget=100, horizon_updates=0) == 1.0
    assert training_progress(50, 500.0, max_updates=0, time_budget=0, horizon_updates=0) == 0.0


def test_fused_gradient_matches_autograd() -> None:
    # The hand-written backward equals autograd through F.cross_entropy (same convention), PAD rows get 0.
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 9, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 9, (3, 4))
    target[2, 1:] = 0
    loss, _, _ = label_smoothed_nll(logits, target, 0.2)
    (2.5 * loss).backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(ref_logits.view(-1, 9), target.view(-1), ignore_index=0,
                                            label_smoothing=0.2, reduction="sum")
    (2.5 * ref).backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    assert logits.grad[2, 1:].abs().max() == 0
    half = logits.detach().to(torch.bfloat16).requires_grad_(True)
    label_smoothed_nll(half, target, 0.2)[0].backward()
    assert half.grad is not None and half.grad.dtype == torch.bfloat16


def test_fused_loss_matches_float64_reference_at_vocab_scale() -> None:
    # Large-vocabulary rows in float32 (the trainer's case): sums and gradients equal the
    # float64 formula loss = -(1-ε)·lp_y - ε·mean(lp) to within float32 rounding.
    torch.manual_seed(0)
    logits = (3 * torch.randn(6, 40, 8000)).requires_grad_(True)
    target = torch.randint(4, 8000, (6, 40))
    target[:, 30:] = 0
    loss, nll, tokens = label_smoothed_nll(logits, target, 0.1)
    loss.backward()
    ref_logits = logits.detach().double().requires_grad_(True)
    lp = ref_logits.log_softmax(-1)
    real = target.ne(0).double()
    ref_nll = -(lp.gather(-1, target.unsqueeze(-1)).squeeze(-1) * real).sum()
    ref_loss = 0.9 * ref_nll - 0.1 * (lp.mean(-1) * real).sum()
    ref_loss.backward()
    assert tokens.item() == 180
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    assert torch.allclose(logits.grad.double(), ref_logits.grad, atol=1e-7, rtol=1e-5)


def test_fused_loss_backward_twice_is_refused() -> None:
    # The backward reuses its saved buffer in place; a second pass must fail loudly, not silently.
    logits = torch.randn(2, 3, 5, requires_grad=True)
    loss, _, _ = label_smoothed_nll(logits, torch.tensor([[1, 2, 3], [4, 1, 0]]), 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError):
        loss.backward()
