"""Heavy-ball momentum's drift factor (1+β)/(1−β)³, measured on f = a·b·x and on SwiGLU."""

from __future__ import annotations

import pytest
import torch

from conslaw_lite.drift import arch_setup
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.flows import mse_loss
from conslaw_lite.momentum import drift_ratio, momentum_factor

torch.set_num_threads(1)
ONE = torch.ones(1, 1, dtype=torch.float64)


def toy(seed: int):
    return ToyProduct(a=1.3, b=0.4), mse_loss(ONE, 3 * ONE)  # a·b·x, x = 1, y = 3


@pytest.mark.parametrize("lr", [1e-6, 2e-6, 4e-6])
def test_toy_ratio_is_near_1900_not_100(lr: float) -> None:
    r = drift_ratio(toy, lr=lr, steps=300)
    assert 1700 < r.total < 1760, r  # the velocity's start-up keeps the total below the factor
    assert r.total < r.last_step < momentum_factor(0.9) and r.last_step > 1800, r


def test_ratio_follows_the_factor_for_other_betas() -> None:
    for beta in (0.5, 0.8):
        r = drift_ratio(toy, lr=1e-6, steps=300, beta=beta)
        assert abs(r.last_step / momentum_factor(beta) - 1) < 0.05, (beta, r)


def test_swiglu_ratio_is_of_the_factors_size() -> None:
    r = drift_ratio(arch_setup("swiglu", samples=8), lr=1e-5, steps=200, beta=0.5)
    assert abs(r.last_step / momentum_factor(0.5) - 1) < 0.2, r


def test_bad_beta_is_refused() -> None:
    with pytest.raises(ValueError, match="β must be in"):
        momentum_factor(1.0)
    with pytest.raises(ValueError, match="β must be in"):
        drift_ratio(toy, lr=1e-6, steps=3, beta=-0.1)
