"""Implicit bias: where the flow ends is fixed by h(θ₀); norm and sharpness grow with the imbalance."""

from __future__ import annotations

import math

import pytest
import torch

from conslaw_lite import gradient_flow, mse_loss
from conslaw_lite.families.ffn.block import FFN
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.implicit_bias import MAX_HESSIAN, imbalance, limit_from, set_imbalance, sharpness, toy_limit

ONE = torch.ones(1, 1, dtype=torch.float64)


@pytest.mark.parametrize("s", [-1.0, 0.0, 0.7])
def test_the_toy_flow_ends_where_the_closed_form_says(s: float) -> None:
    toy = ToyProduct(a=0.6, b=0.5)
    set_imbalance(toy, s)
    h0 = float(toy.a.detach() ** 2 - toy.b.detach() ** 2)
    gradient_flow(toy, mse_loss(ONE, 3 * ONE), 40.0, n_points=2)
    a, b = toy_limit(h0, 3.0)
    assert abs(toy.a.item() - a) < 1e-8 and abs(toy.b.item() - b) < 1e-8
    assert sharpness(toy, mse_loss(ONE, 3 * ONE)) == pytest.approx(math.sqrt(h0 * h0 + 36), rel=1e-10)


def test_unbalancing_keeps_the_function_and_grows_the_imbalance() -> None:
    torch.manual_seed(0)
    model = FFN(3, 5, 2, activation="relu").double()
    x = torch.randn(8, 3, dtype=torch.float64)
    with torch.no_grad():
        before = model(x)
    sizes = []
    for s in (0.0, 0.5, 1.0):
        set_imbalance(model, s)
        sizes.append(imbalance(model))
        with torch.no_grad():
            assert torch.allclose(model(x), before, rtol=1e-12, atol=1e-13)
    assert sizes[0] < 1e-12 < sizes[1] < sizes[2]


def test_a_balanced_start_ends_flatter_and_smaller_than_an_unbalanced_one() -> None:
    torch.manual_seed(0)
    teacher, x = FFN(4, 3, 3, activation="linear").double(), torch.randn(20, 4, dtype=torch.float64)
    with torch.no_grad():
        loss = mse_loss(x, teacher(x))
    ends = {}
    for s in (0.0, 1.0):
        torch.manual_seed(1)
        student = FFN(4, 3, 3, activation="linear").double()
        set_imbalance(student, s)
        ends[s] = limit_from(student, loss, lr=0.15, steps=1500)
    assert ends[0.0].loss < 1e-4 and ends[1.0].loss < 1e-4
    assert ends[0.0].norm_sq < ends[1.0].norm_sq and ends[0.0].sharpness < ends[1.0].sharpness


def test_sharpness_refuses_a_model_too_large_for_its_hessian() -> None:
    big = FFN(MAX_HESSIAN, 1, 1, activation="relu").double()
    with pytest.raises(ValueError, match="full Hessian"):
        sharpness(big, mse_loss(torch.ones(1, MAX_HESSIAN, dtype=torch.float64), ONE))
