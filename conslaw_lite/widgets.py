"""The book's one interactive figure: how far "conserved" quantities drift under discrete training.

:func:`drift_explorer` trains a fresh model with step size τ for k steps and draws
``‖h_k − h_0‖`` against k for every law of the model (blue) and every control (red),
with the reference ``ḡ² Σ_{i<k} τ_i²`` (= ``ḡ² τ² k`` for a constant step, the O(τ²k) of
THEORY.md section 4), ḡ² the mean of ‖g_i‖² over the run. Sliders choose τ and k, a toggle the schedule
(constant or τ₀/(k+1)), a dropdown the optimizer, and, given several setups, the block.

A widget does nothing on a static web page, so a pre-drawn figure (both schedules at the
default τ) is displayed first and stands in for it there. The computation and the
drawing are the plain functions :func:`drift_curves` and :func:`draw_drift`, tested
without a frontend; the training run itself is :func:`conslaw_lite.drift.trajectory`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from conslaw_lite.drift import Setup, trajectory
from conslaw_lite.flows import OPTIMIZERS, SCHEDULES, Diverged
from conslaw_lite.plots import REFERENCE, new_figure, plot_drift


@dataclass(frozen=True)
class DriftCurves:
    """Drift of each law and control over one run: arrays over k = 0..K.

    ``reference[k] = ḡ² Σ_{i<k} τ_i²`` with ``ḡ² = mean_i ‖g_i‖²``: a line of slope 1 in k and
    height ∝ τ² for a constant step. If the run diverged, ``diverged`` says where
    and why and the arrays are empty.
    """

    lr: float
    schedule: str
    optimizer: str
    laws: dict[str, np.ndarray] = field(default_factory=dict)
    controls: dict[str, np.ndarray] = field(default_factory=dict)
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    diverged: str | None = None

    def upto(self, k: int) -> DriftCurves:
        """The same run seen only up to step k (a run of k steps is the first k steps of a longer one)."""
        cut = slice(0, k + 1)
        return DriftCurves(
            self.lr,
            self.schedule,
            self.optimizer,
            {n: v[cut] for n, v in self.laws.items()},
            {n: v[cut] for n, v in self.controls.items()},
            self.reference[cut],
            self.diverged,
        )


def drift_curves(
    setup: Setup, *, lr: float, steps: int, schedule: str = "constant", optimizer: str = "gd", seed: int = 0
) -> DriftCurves:
    """Train ``setup(seed)``'s fresh model (:func:`conslaw_lite.drift.trajectory`); ``‖h_k − h_0‖`` per law and control.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> from conslaw_lite.flows import mse_loss
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> curves = drift_curves(lambda seed: (ToyProduct(a=2.0, b=1.0), mse_loss(one, 0 * one)), lr=0.001, steps=5)
    >>> sorted(curves.laws), sorted(curves.controls)
    (['a^2-b^2'], ['a^2', 'b^2'])
    >>> bool(curves.laws["a^2-b^2"][5] < 1e-2 * curves.controls["a^2"][5])
    True
    """
    try:
        t = trajectory(setup, seed, lr=lr, steps=steps, schedule=schedule, optimizer=optimizer)
    except Diverged as err:
        return DriftCurves(lr, schedule, optimizer, diverged=str(err))
    return DriftCurves(
        lr,
        schedule,
        optimizer,
        laws={n: t.run.drift(n) for n in t.conserved},
        controls={n: t.run.drift(n) for n in t.controls},
        reference=t.run.grad_sq.mean() * np.concatenate([[0.0], np.cumsum(t.run.tau**2)]),
    )


def draw_drift(ax: Axes, curves: DriftCurves, *, title: str | None = None) -> None:
    """Draw ``curves`` on ``ax``: laws blue, controls red dashed, the ``ḡ² Σ τ_i²`` reference grey dotted.

    Examples
    ========
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from conslaw_lite.plots import CONSERVED, new_figure
    >>> curves = DriftCurves(0.1, "constant", "gd", {"h": np.array([0, 1e-8, 2e-8])}, {"θ²": np.array([0, .1, .2])},
    ...                      np.array([0, 1e-2, 2e-2]))
    >>> fig, ax = new_figure()
    >>> draw_drift(ax, curves)
    >>> [line.get_color() == CONSERVED for line in ax.get_lines()]
    [True, False, False]
    """
    ax.set_title(title or f"{curves.optimizer}, τ = {curves.lr:.3g} ({curves.schedule})", fontsize=10)
    if curves.diverged:
        ax.text(0.5, 0.5, curves.diverged, ha="center", va="center", wrap=True, transform=ax.transAxes)
        ax.set_axis_off()
        return
    k = np.arange(1, len(curves.reference))
    for group, conserved in ((curves.laws, True), (curves.controls, False)):
        for i, (name, drift) in enumerate(group.items()):
            many = f"{'laws' if conserved else 'controls'} ({len(group)})"
            label = name if len(group) <= 3 else (many if i == 0 else None)
            plot_drift(ax, k, drift[1:], label, conserved=conserved, alpha=1.0 if len(group) <= 3 else 0.6)
    label = "τ²k · mean‖g‖²" if curves.schedule == "constant" else "Σ τᵢ² · mean‖g‖²"
    ax.loglog(k, curves.reference[1:], color=REFERENCE, linestyle=":", label=label)
    ax.set_ylabel("‖h_k − h_0‖")
    ax.legend(fontsize=8)


@dataclass
class DriftExplorer:
    """The explorer's state: its setups, the cache of runs, the stand-in figure, the widget (or None)."""

    setups: dict[str, Setup]
    steps: int
    static: Figure
    widget: object | None = None
    _cache: dict[tuple, DriftCurves] = field(default_factory=dict)

    def curves(self, block: str, lr: float, schedule: str, optimizer: str) -> DriftCurves:
        """The run at the largest k for these settings, computed once."""
        key = (block, lr, schedule, optimizer)
        if key not in self._cache:
            self._cache[key] = drift_curves(
                self.setups[block], lr=lr, steps=self.steps, schedule=schedule, optimizer=optimizer
            )
        return self._cache[key]

    def redraw(self, tau: float, k: int, schedule: str, optimizer: str, block: str | None = None) -> Figure:
        """The figure the widget shows for these control values."""
        block = next(iter(self.setups)) if block is None else block
        fig, ax = new_figure()
        draw_drift(ax, self.curves(block, tau, schedule, optimizer).upto(k))
        if len(self.setups) > 1:
            ax.set_title(f"{block}: {ax.get_title()}", fontsize=10)
        return fig


def drift_explorer(
    setups: Setup | Mapping[str, Setup],
    *,
    lr: float = 0.05,
    lr_range: tuple[float, float] | None = None,
    steps: int = 200,
    optimizer: str = "gd",
    show: bool = True,
) -> DriftExplorer:
    """Sliders for τ and k, a schedule toggle and an optimizer dropdown over drift-vs-k plots.

    ``setups`` is a :class:`conslaw_lite.drift.Setup`, ``seed -> (fresh model, loss_fn)``, run with
    seed 0 (the laws and controls come from the law registry), or a dict of them by
    name, which adds a block dropdown. ``lr`` is the default τ, ``lr_range`` the slider's
    range (default ``lr/10 .. 4·lr``), ``steps`` the largest k. With ``show``, displays the
    static stand-in (both schedules at τ = ``lr``) and then builds and displays the widget
    when ipywidgets is available; ``explorer.redraw(...)`` draws what the widget would.
    Use it as ``explorer = drift_explorer(...)`` in a notebook cell.

    Examples
    ========
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import torch
    >>> from conslaw_lite.blocks.toy import ToyProduct
    >>> from conslaw_lite.flows import mse_loss
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> explorer = drift_explorer(lambda seed: (ToyProduct(a=2.0, b=1.0), mse_loss(one, 0 * one)), steps=20, show=False)
    >>> explorer.redraw(tau=0.02, k=10, schedule="decay", optimizer="gd").axes[0].get_title()
    'gd, τ = 0.02 (decay)'
    """
    if callable(setups):
        setups = {"model": setups}
    if not isinstance(setups, Mapping) or not setups:
        raise TypeError(
            f"setups must be a function seed -> (model, loss_fn) or a non-empty dict of them, got {setups!r}"
        )
    for name, setup in setups.items():
        if not callable(setup):
            raise TypeError(f"setup {name!r} is not callable: {setup!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    lo, hi = lr_range or (lr / 10, 4 * lr)
    if not 0 < lo <= lr <= hi:
        raise ValueError(f"lr_range must satisfy 0 < low ≤ lr ≤ high, got {(lo, hi)} with lr = {lr}")

    first = next(iter(setups))
    static, axes = new_figure(len(SCHEDULES))
    explorer = DriftExplorer(dict(setups), steps, static)
    for ax, schedule in zip(axes, SCHEDULES):
        draw_drift(ax, explorer.curves(first, lr, schedule, optimizer))
    static.suptitle(f"{first}: preview at τ = {lr:g}, k ≤ {steps} (the sliders below redraw this in a live kernel)")
    plt.close(static)  # off pyplot's list, or the inline backend would show it a second time with the widget
    if show:
        from IPython.display import display

        display(static)
        explorer.widget = _widget(explorer, lr, lo, hi, optimizer)
        if explorer.widget is not None:
            display(explorer.widget)
    return explorer


def _widget(explorer: DriftExplorer, lr: float, lo: float, hi: float, optimizer: str) -> object | None:
    try:
        import ipywidgets as w
        from IPython.display import display
    except ImportError:  # the static figure still stands
        return None
    controls = {
        "tau": w.FloatLogSlider(
            value=lr,
            base=10,
            min=np.log10(lo),
            max=np.log10(hi),
            step=0.05,
            description="τ",
            continuous_update=False,
            readout_format=".3g",
        ),
        "k": w.IntSlider(value=explorer.steps, min=1, max=explorer.steps, description="k", continuous_update=False),
        "schedule": w.ToggleButtons(options=list(SCHEDULES), value="constant", description="schedule"),
        "optimizer": w.Dropdown(options=list(OPTIMIZERS), value=optimizer, description="optimizer"),
    }
    if len(explorer.setups) > 1:
        controls["block"] = w.Dropdown(options=list(explorer.setups), description="block")

    def show(**values) -> None:
        fig = explorer.redraw(**values)
        display(fig)
        plt.close(fig)

    return w.VBox([*controls.values(), w.interactive_output(show, controls)])
