"""mt.train.ema.WeightEMA: hand-derived shadow values, the swap in and out, state round trip."""

from __future__ import annotations

import pytest
import torch

from mt.train.ema import WeightEMA


def _model(value: float) -> torch.nn.Module:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def test_shadow_follows_the_warmup_decay_by_hand() -> None:
    model = _model(1.0)
    ema = WeightEMA(model, decay=0.5)
    assert ema.decay_at(1) == pytest.approx(2 / 11) and ema.decay_at(100) == 0.5
    with torch.no_grad():
        model.weight.fill_(3.0)
    ema.update(1)  # d = 2/11: 2/11 * 1 + 9/11 * 3 = 29/11
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 29 / 11))
    with torch.no_grad():
        model.weight.fill_(5.0)
    ema.update(100)  # d = 0.5: (29/11 + 5) / 2 = 42/11
    assert torch.allclose(ema.shadow[0], torch.full((1, 2), 42 / 11))
    assert torch.equal(model.weight, torch.full((1, 2), 5.0))  # the trained weights are untouched


def test_applied_swaps_the_shadow_in_and_the_weights_back_even_on_error() -> None:
    model = _model(2.0)
    ema = WeightEMA(model, decay=0.9)
    with torch.no_grad():
        model.weight.fill_(7.0)
    ema.update(1000)  # 0.9 * 2 + 0.1 * 7 = 2.5
    with ema.applied():
        assert torch.allclose(model.weight, torch.full((1, 2), 2.5))
    assert torch.equal(model.weight, torch.full((1, 2), 7.0))
    with pytest.raises(RuntimeError), ema.applied():
        raise RuntimeError("validation failed")
    assert torch.equal(model.weight, torch.full((1, 2), 7.0))


def test_state_round_trip_reset_and_mismatch() -> None:
    model = _model(1.0)
    ema = WeightEMA(model, decay=0.99)
    with torch.no_grad():
        model.weight.fill_(4.0)
    ema.update(50)
    other = WeightEMA(_model(0.0), decay=0.99)
    other.load_state_dict(ema.state_dict())
    assert torch.equal(other.shadow[0], ema.shadow[0])
    ema.reset()
    assert torch.equal(ema.shadow[0], model.weight.detach())
    with pytest.raises(ValueError, match="do not match"):
        WeightEMA(torch.nn.Linear(3, 1, bias=False), 0.99).load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        WeightEMA(model, decay=1.0)
