"""Flows on the toy model f = a·b·x: what chapter 1 claims, checked by running them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.families.toy.laws import toy_laws
from conslaw_lite.flows import Diverged, batch_indices, gradient_flow, mse_loss, train

H = "a²−b²"


def data(xs: list[float], ys: list[float]):
    x = torch.tensor(xs, dtype=torch.float64).reshape(-1, 1)
    return x, torch.tensor(ys, dtype=torch.float64).reshape(-1, 1)


def test_gradient_flow_keeps_the_law_while_the_loss_falls_100x() -> None:
    model = ToyProduct(a=2.0, b=0.5)
    x, y = data([1.5], [0.3])
    flow = gradient_flow(model, mse_loss(x, y), 4.0, laws=toy_laws(model))
    assert flow.loss[-1] < flow.loss[0] / 100
    assert flow.relative_drift(H).max() <= 1e-9
    a, b = model.a.item(), model.b.item()
    assert a * b * 1.5 == pytest.approx(0.3, rel=1e-3)  # the flow really went somewhere: it fits the target
    assert a**2 - b**2 == pytest.approx(2.0**2 - 0.5**2, rel=1e-9)


@pytest.mark.parametrize("schedule", ["constant", "decay"])
def test_gd_multiplies_the_law_by_one_minus_tau2_lprime2_x2(schedule: str) -> None:
    """One data point: h_{k+1} = (1 − τ_k² ℓ'_k² x²) h_k exactly, ℓ'_k = f_k − y, so ℓ'_k² = 2 L_k."""
    model = ToyProduct(a=2.0, b=0.5)
    x, y = data([1.5], [0.3])
    run = train(model, mse_loss(x, y), lr=0.05, steps=200, schedule=schedule, laws=toy_laws(model))
    h = run.h[H][:, 0]
    predicted = (1 - run.tau**2 * 2 * run.loss[:-1] * 1.5**2) * h[:-1]
    residual = np.abs(h[1:] - predicted).max() / abs(h[0])
    assert residual < 1e-14
    assert abs(h[-1] - h[0]) / abs(h[0]) > 1e6 * residual  # the identity is tested on a real drift


def test_gd_one_step_drift_is_the_law_at_the_step() -> None:
    """h(θ_{k+1}) − h(θ_k) = h(δ_k) for a quadratic law, with mini-batches too."""
    model = ToyProduct(a=1.2, b=-0.7, c=0.9)
    x, y = data([1.0, -2.0, 0.5, 1.5], [0.3, 0.1, -0.4, 0.2])
    run = train(model, mse_loss(x, y, batch_size=1), lr=0.05, steps=50, laws=toy_laws(model))
    for name in ("a²−b²", "a²−c²"):
        np.testing.assert_allclose(np.diff(run.h[name], axis=0), run.h_step[name], rtol=0, atol=1e-14)


def test_a_frozen_parameter_takes_a_zero_step_and_the_others_their_own() -> None:
    """With a frozen, h_step is evaluated on the steps of b and c (not shifted onto the wrong names)."""
    model = ToyProduct(a=1.2, b=-0.7, c=0.9)
    model.a.requires_grad_(False)
    x, y = data([1.0, -2.0], [0.3, 0.1])
    coordinates = {n: (lambda p, n=n: p[n]) for n in "abc"}  # h = θ itself: h(δ) is the step δ
    laws = {"b²−c²": lambda p: p["b"] ** 2 - p["c"] ** 2, **coordinates}  # a frozen: b and c stay balanced
    run = train(model, mse_loss(x, y), lr=0.05, steps=20, laws=laws)
    assert np.all(run.h_step["a"] == 0) and np.all(run.h["a"] == 1.2)
    for n in "bc":
        np.testing.assert_allclose(-np.diff(run.h[n], axis=0), run.h_step[n], rtol=0, atol=1e-15)
        assert np.abs(run.h_step[n]).min() > 1e-4  # b and c do move
    np.testing.assert_allclose(np.diff(run.h["b²−c²"], axis=0), run.h_step["b²−c²"], rtol=0, atol=1e-14)


def test_an_empty_data_set_is_named() -> None:
    with pytest.raises(ValueError, match="the data set is empty"):
        mse_loss(torch.zeros(0, 1, dtype=torch.float64), torch.zeros(0, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="batch_size must be in"):
        mse_loss(*data([1.0], [0.0]), batch_size=2)


def test_mini_batches_come_from_seed_and_step() -> None:
    """The loss of step k is the loss on batch_indices(n, batch, seed, k): the same draw every time it is asked."""
    x, y = data([1.0, -2.0, 0.5, 1.5], [0.3, 0.1, -0.4, 0.2])
    model = ToyProduct(a=1.2, b=-0.7)
    loss = mse_loss(x, y, batch_size=2, seed=3)
    with torch.no_grad():
        for k in range(5):
            idx = batch_indices(4, 2, 3, k)
            expected = 0.5 * ((model(x[idx]) - y[idx]) ** 2).sum() / 2
            assert float(loss(model, k)) == pytest.approx(float(expected), rel=1e-15)
    assert len({tuple(batch_indices(4, 2, 3, k).tolist()) for k in range(20)}) > 1  # the batches do change with k


def test_decaying_step_keeps_the_drift_bounded_under_sgd() -> None:
    """Inconsistent targets keep the SGD gradient from vanishing: constant-τ drift keeps growing, τ₀/(k+1) does not."""
    x, y = data([1.0, 2.0, -1.0, 0.5], [0.5, -0.3, 0.8, 0.9])
    steps, tau0 = 2000, 0.01
    runs = {}
    for schedule in ("constant", "decay"):
        model = ToyProduct(a=1.5, b=0.5)
        runs[schedule] = train(
            model, mse_loss(x, y, batch_size=1), lr=tau0, steps=steps, schedule=schedule, laws=toy_laws(model)
        )
    constant, decay = runs["constant"].drift(H), runs["decay"].drift(H)
    assert constant[steps] > 2.5 * constant[steps // 4]  # grows about linearly in k
    assert decay[steps] < 1.05 * decay[steps // 4]  # saturates
    # |h(δ)| ≤ ‖δ‖² for h = a² − b², so the drift is at most Σ τ_k² ‖g_k‖² ≤ (π²/6) τ₀² max‖g‖²
    bound = math.pi**2 / 6 * tau0**2 * runs["decay"].grad_sq.max()
    assert decay.max() <= bound
    assert constant[steps] > bound


def test_a_step_too_large_stops_and_names_the_step() -> None:
    model = ToyProduct(a=2.0, b=1.0)
    with pytest.raises(Diverged) as caught:
        train(model, mse_loss(*data([1.0], [0.0])), lr=2.0, steps=100, laws=toy_laws(model))
    err = caught.value
    assert 1 <= err.step < 100
    assert f"step {err.step}" in str(err)
    assert "the step size τ = 2 is too large" in err.reason


def test_the_same_step_size_small_enough_converges() -> None:
    model = ToyProduct(a=2.0, b=1.0)
    run = train(model, mse_loss(*data([1.0], [0.0])), lr=0.05, steps=100, laws=toy_laws(model))
    assert run.loss[-1] < 1e-3 * run.loss[0]


def test_an_ensemble_trains_each_toy_model_as_if_alone() -> None:
    """Vectors a, b are N models: the summed loss gives model i exactly its own SGD steps."""
    x, y = data([1.0, 2.0, -1.0], [0.5, -0.3, 0.8])
    a, b = [1.5, -0.4, 0.9], [0.5, 1.2, -2.0]
    ensemble = ToyProduct(a=torch.tensor(a, dtype=torch.float64), b=torch.tensor(b, dtype=torch.float64))
    run = train(ensemble, mse_loss(x, y, batch_size=1), lr=0.05, steps=6, laws=toy_laws(ensemble), device="cpu")
    for i in range(3):
        alone = ToyProduct(a=a[i], b=b[i])
        train(alone, mse_loss(x, y, batch_size=1), lr=0.05, steps=6, device="cpu")
        assert ensemble.a[i].item() == pytest.approx(alone.a.item(), rel=1e-14)
        assert ensemble.b[i].item() == pytest.approx(alone.b.item(), rel=1e-14)
    assert run.h[H].shape == (7, 3)
    with pytest.raises(ValueError, match="scalars or vectors of one length"):
        ToyProduct(a=torch.ones(2), b=torch.ones(3))


@pytest.mark.parametrize(
    ("optimizer", "make"),
    [("sgd", lambda params: torch.optim.SGD(params, lr=1.0)),
     ("momentum", lambda params: torch.optim.SGD(params, lr=1.0, momentum=0.9)),
     ("adam", lambda params: torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.999), eps=1e-8))],
)  # fmt: skip
def test_each_optimizer_takes_the_steps_of_torch_optim(optimizer: str, make) -> None:
    """``train``'s own update rules (they record δ_k for the laws) against ``torch.optim``, step for step."""
    x, y = data([0.5, 1.5, -1.0, 2.0], [0.3, 1.0, -0.2, 1.1])
    loss = mse_loss(x, y, batch_size=2, seed=3)  # mini-batches: each step its own loss
    ours = ToyProduct(a=2.0, b=0.5)
    run = train(ours, loss, lr=0.05, steps=12, schedule="decay", optimizer=optimizer)
    theirs = ToyProduct(a=2.0, b=0.5)
    opt = make(list(theirs.parameters()))
    for k, tau in enumerate(run.tau):
        opt.param_groups[0]["lr"] = float(tau)
        opt.zero_grad()
        loss(theirs, k).backward()
        opt.step()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.allclose(p, q, rtol=1e-12, atol=1e-14), (optimizer, p, q)
    assert not torch.equal(ours.a, torch.tensor(2.0, dtype=torch.float64))  # the steps went somewhere
