"""Teleportation: the loss is kept, the look-ahead loss falls, a non-symmetry is refused with its measured change."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite import mse_loss
from conslaw_lite.archs import ArchOptions
from conslaw_lite.drift import arch_setup
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.teleport import TeleportRefused, race, teleport, train_curve
from conslaw_lite.weight_decay import with_weight_decay


def _theta(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("arch", ["ffn-relu", "swiglu", "mha", "mha-rope", "moe-softmax"])
def test_a_teleport_keeps_the_loss_and_the_function_and_lowers_the_lookahead(arch: str) -> None:
    model, loss = arch_setup(arch, ArchOptions())(0)
    x = loss.x[:4]
    with torch.no_grad():
        before = model(x)
    t = teleport(model, loss, lr=0.1)
    assert abs(t.loss_after - t.loss_before) <= 1e-10 * t.loss_before
    assert t.lookahead_after < t.lookahead_before
    with torch.no_grad():
        assert torch.allclose(model(x), before, rtol=1e-10, atol=1e-12)


def test_a_teleport_under_weight_decay_is_refused_with_the_change_it_measured() -> None:
    model, loss = arch_setup("ffn-relu")(0)
    theta = _theta(model)
    with pytest.raises(TeleportRefused, match=r"changed the loss by [+-]\d\.\d+e[+-]\d+"):
        teleport(model, with_weight_decay(loss, 0.1), lr=0.1)
    assert all(torch.equal(a, b) for a, b in zip(theta, _theta(model)))  # left as it was


def test_a_model_without_known_laws_is_refused_and_left_alone() -> None:
    model = torch.nn.Linear(3, 1).double()
    theta = _theta(model)
    loss = mse_loss(torch.ones(4, 3, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="no block with known conservation laws"):
        teleport(model, loss, lr=0.1)
    assert all(torch.equal(a, b) for a, b in zip(theta, _theta(model)))


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"lr": 0.0}, "lr must be"), ({"lr": 0.1, "iterations": 0}, "iterations")]
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    model, loss = arch_setup("toy")(0)
    with pytest.raises(ValueError, match=message):
        teleport(model, loss, **kwargs)


def test_the_toy_from_a_small_start_reaches_the_target_in_far_fewer_steps() -> None:
    one = torch.ones(1, 1, dtype=torch.float64)
    results = race(lambda seed: (ToyProduct(a=0.4 + 0.1 * seed, b=0.05), mse_loss(one, 3 * one)), [0, 1, 2],
                   lr=0.1, steps=40)
    assert all(r.ratio < 0.5 for r in results), [r.ratio for r in results]
    assert all(r.plain_steps <= 40 and r.overhead_steps > 0 for r in results)


def test_a_diverging_run_is_recorded_with_its_step() -> None:
    one = torch.ones(1, 1, dtype=torch.float64)
    curve = train_curve(ToyProduct(a=1.0, b=0.5), mse_loss(one, one), lr=3.0, steps=30)
    assert curve.diverged_at is not None and np.isnan(curve.loss[curve.diverged_at:]).all()


def test_a_float32_model_teleports_within_float32_round_off() -> None:
    model, loss = arch_setup("swiglu")(0)
    model, loss = model.float(), mse_loss(loss.x.float(), loss.y.float())
    t = teleport(model, loss, lr=0.1)
    assert abs(t.loss_after - t.loss_before) < 1e-5 * t.loss_before and t.lookahead_after < t.lookahead_before
    assert all(p.dtype == torch.float32 for p in model.parameters())
