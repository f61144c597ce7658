"""The interactive figures' data: grids of real runs, and the figures built from them (the browser side is
tests/test_drift_figure_browser.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite.drift import arch_runs
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.families.toy.laws import toy_laws
from conslaw_lite.flows import mse_loss, train
from conslaw_lite.grids import drift_curves, drift_grid, toy_paths
from conslaw_lite.widgets import drift_figure, grid_arrays, level_set_figure, to_html

ONE = torch.ones(1, 1, dtype=torch.float64)


def toy(seed: int = 0) -> tuple[ToyProduct, object]:
    """a = 2, b = 1, one point x = 1, y = 0 (a drift.Setup; nothing here is random)."""
    return ToyProduct(a=2.0, b=1.0), mse_loss(ONE, 0 * ONE)


def toy3(seed: int = 0) -> tuple[ToyProduct, object]:
    return ToyProduct(a=1.5, b=1.0, c=0.5), mse_loss(ONE, 0 * ONE)


@pytest.mark.parametrize("schedule", ["constant", "decay"])
def test_curves_are_the_drift_of_the_run_and_the_reference_is_tau2_k(schedule: str) -> None:
    tau, steps = 0.01, 30
    curves = drift_curves(toy, lr=tau, steps=steps, schedule=schedule)
    model, loss = toy()
    run = train(model, loss, lr=tau, steps=steps, schedule=schedule, laws=toy_laws(model))
    np.testing.assert_allclose(curves.laws["a^2-b^2"], run.drift("a²−b²"), rtol=0, atol=1e-15)
    k = np.arange(steps + 1)
    sum_tau2 = tau**2 * (k if schedule == "constant" else np.concatenate([[0], np.cumsum(1 / k[1:] ** 2)]))
    np.testing.assert_allclose(curves.reference, run.grad_sq.mean() * sum_tau2, rtol=1e-12)
    # ‖M‖ = 1 for a² − b², so |h_k − h_0| ≤ Σ τ_i² ‖g_i‖² (chapter 07)
    assert np.all(curves.laws["a^2-b^2"] <= run.step_budget() + 1e-15)
    # the law moves at second order, the controls a², b² at first order
    assert curves.laws["a^2-b^2"][-1] < 0.05 * min(c[-1] for c in curves.controls.values())


def test_law_drift_follows_the_reference_for_small_steps() -> None:
    """While θ barely moves, ‖h_k − h_0‖ ≈ c · ḡ² τ² k with c a constant: the ratio stays flat in k and τ."""
    ratios = []
    for tau in (1e-4, 4e-4):
        curves = drift_curves(toy, lr=tau, steps=5)
        ratios.extend(curves.laws["a^2-b^2"][1:] / curves.reference[1:])
    assert max(ratios) / min(ratios) < 1.05


TOY = {"toy": arch_runs("toy", samples=16)}
TAUS = [0.001, 0.002, 0.004]


@pytest.fixture(scope="module")
def grid():
    return drift_grid(TOY, taus=TAUS, steps=6)


def test_grid_holds_one_real_run_per_setting(grid) -> None:
    assert len(grid.runs) == 1 * 4 * 2 * 3
    run = grid.curves("toy", "momentum", "decay", 2)
    again = drift_curves(arch_runs("toy", samples=16)("momentum"), lr=0.004, steps=6, schedule="decay",
                         optimizer="momentum")
    np.testing.assert_array_equal(run.laws["a^2-b^2"], again.laws["a^2-b^2"])
    with pytest.raises(KeyError, match="no run"):
        grid.curves("toy", "gd", "constant", 3)


def test_grid_drift_grows_like_tau_squared_and_collapses_when_normalized(grid) -> None:
    """GD while θ barely moves: the drift at k = K is ∝ τ², and divided by Σ τ_i²‖g_i‖² it is the same for all τ."""
    raw = grid.law_drift_at("toy", "gd", "constant", 6)
    assert np.allclose(raw[1:] / raw[:-1], 4, rtol=0.05)
    normed = grid.law_drift_at("toy", "gd", "constant", 6, normalized=True)
    assert normed.max() / normed.min() < 1.05


def test_figure_embeds_the_grid_at_its_steps(grid) -> None:
    laws, controls, values = grid_arrays(grid, "toy")
    c = grid.curves("toy", "sgd", "constant", 1)
    o, s = grid.optimizers.index("sgd"), grid.schedules.index("constant")
    np.testing.assert_allclose(values[o, s, 1, 0], c.laws["a^2-b^2"][grid.ks], rtol=1e-6)
    np.testing.assert_allclose(values[o, s, 1, -2], c.budget[grid.ks], rtol=1e-6)
    html = to_html(drift_figure(grid), with_js=True)
    assert "<script src=" not in html and "cdn.bokeh.org" not in html, "the page must work offline: JavaScript inlined"
    assert len(html.encode()) < 2.5e6  # Bokeh's 1.7 MB and the grid: a chapter page stays far under 5 MB


def test_divergence_is_kept_with_its_message_and_left_blank() -> None:
    curves = drift_curves(toy, lr=2.0, steps=50)
    assert curves.diverged is not None and "diverged at step" in curves.diverged
    assert np.isnan(curves.law_total()).all()
    grid = drift_grid({"toy": lambda optimizer: toy}, taus=[0.01, 2.0], steps=50, optimizers=["gd"])
    laws, controls, values = grid_arrays(grid, "toy")
    assert np.isnan(values[0, 0, 1]).all() and not np.isnan(values[0, 0, 0, :, 1:]).any()


def test_toy_paths_flow_keeps_its_level_gd_leaves_it_more_for_larger_tau() -> None:
    paths = toy_paths([(2.2, -0.3), (0.2, 2.0)], [0.01, 0.05, 0.2], steps=40)
    for s in range(2):
        flow = paths.flow[s]
        assert np.abs(flow[:, 0] ** 2 - flow[:, 1] ** 2 - paths.level(s)).max() < 1e-7
        off = [abs(p[-1, 0] ** 2 - p[-1, 1] ** 2 - paths.level(s)) for p in (paths.gd[s, i] for i in range(3))]
        assert off[0] < off[1] < off[2]
    layout = level_set_figure(paths)
    assert {m.name for m in layout.select({"tags": ["paths-source"]})} == {"flow", "gd", "level"}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"blocks": {}}, ValueError, "at least one block"),
        ({"blocks": {"x": 3}}, TypeError, "block 'x' must be a function"),
        ({"optimizers": ["lbfgs"]}, ValueError, "optimizers must be"),
        ({"taus": [0.1]}, ValueError, "at least two increasing"),
        ({"taus": [0.2, 0.1]}, ValueError, "at least two increasing"),
        ({"steps": 0}, ValueError, "steps must be at least 1"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        drift_grid(**{"blocks": TOY, "taus": TAUS, "steps": 3, **kwargs})
