"""The drift explorer: its computation and drawing, without a frontend."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from conslaw_lite.blocks.toy import ToyProduct  # noqa: E402
from conslaw_lite.flows import mse_loss, train  # noqa: E402
from conslaw_lite.laws.toy import toy_laws  # noqa: E402
from conslaw_lite.plots import CONSERVED, CONTROL, REFERENCE, new_figure  # noqa: E402
from conslaw_lite.widgets import DriftCurves, _widget, draw_drift, drift_curves, drift_explorer  # noqa: E402

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
    # ‖M‖ = 1 for a² − b², so |h_k − h_0| ≤ Σ τ_i² ‖g_i‖² (THEORY.md section 4)
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


def test_divergence_is_reported_not_plotted() -> None:
    curves = drift_curves(toy, lr=2.0, steps=50)
    assert curves.diverged is not None and "diverged at step" in curves.diverged
    fig, ax = new_figure()
    draw_drift(ax, curves)
    assert not ax.get_lines() and curves.diverged in [t.get_text() for t in ax.texts]


def test_drawing_colours_laws_blue_controls_red_reference_grey() -> None:
    curves = drift_curves(toy3, lr=0.01, steps=10)
    fig, ax = new_figure()
    draw_drift(ax, curves)
    colours = [line.get_color() for line in ax.get_lines()]
    assert colours == [CONSERVED] * 2 + [CONTROL] * 3 + [REFERENCE]
    many = DriftCurves(0.1, "constant", "gd", {f"h{i}": np.arange(3.0) for i in range(5)}, {}, np.arange(3.0))
    fig, ax = new_figure()
    draw_drift(ax, many)
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "laws (5)"


def test_explorer_redraws_any_block_and_caches_runs() -> None:
    explorer = drift_explorer({"a·b·x": toy, "a·b·c·x": toy3}, lr=0.01, steps=20, show=False)
    assert len(explorer.static.axes) == 2  # both schedules in the stand-in
    fig = explorer.redraw(tau=0.02, k=7, schedule="constant", optimizer="momentum", block="a·b·c·x")
    (law_line, *_) = fig.axes[0].get_lines()
    assert len(law_line.get_xdata()) == 7 and fig.axes[0].get_title().startswith("a·b·c·x")
    cached = len(explorer._cache)
    explorer.redraw(tau=0.02, k=3, schedule="constant", optimizer="momentum", block="a·b·c·x")
    assert len(explorer._cache) == cached


def test_widget_has_the_promised_controls(capsys: pytest.CaptureFixture[str]) -> None:
    explorer = drift_explorer({"a·b·x": toy, "a·b·c·x": toy3}, lr=0.01, steps=5, show=False)
    widget = _widget(explorer, 0.01, 0.001, 0.04, "gd")
    descriptions = [child.description for child in widget.children[:-1]]
    assert descriptions == ["τ", "k", "schedule", "optimizer", "block"]
    assert widget.children[3].options == ("gd", "sgd", "momentum", "adam")


@pytest.mark.parametrize(
    ("setups", "kwargs", "error", "message"),
    [
        (42, {}, TypeError, "setups must be a function"),
        ({}, {}, TypeError, "non-empty dict"),
        ({"x": 3}, {}, TypeError, "setup 'x' is not callable"),
        (toy, {"optimizer": "lbfgs"}, ValueError, "optimizer must be one of"),
        (toy, {"lr": 0.1, "lr_range": (0.2, 0.3)}, ValueError, "lr_range"),
    ],
)
def test_bad_arguments_are_named(setups, kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        drift_explorer(setups, steps=5, show=False, **kwargs)
