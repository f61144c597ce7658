"""Grids of real training runs, computed once, that the book's interactive figures switch between.

A web page has no kernel: to let readers move τ there, the runs for every setting the
figure offers are computed when the book is built and embedded in the page
(:mod:`conslaw_lite.widgets` draws them). Each run is :func:`conslaw_lite.drift.trajectory`'s
(:func:`conslaw_lite.flows.train` underneath); nothing here trains by itself.

* :func:`drift_grid`: ``‖h_k − h_0‖`` of every law and control for each block × optimizer ×
  schedule × τ, with the reference ``ḡ² Σ_{i<k} τ_i²`` and the budget ``Σ_{i<k} τ_i² ‖g_i‖²``
  (the drift divided by the budget is constant in τ for a plain gradient step: chapter 7's identity).
* :func:`toy_paths`: the iterates ``(a_k, b_k)`` of GD on ``f = a·b·x`` for each start and τ, and the
  gradient-flow path from each start, which stays on its level set of ``a² − b²``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from conslaw_lite.drift import Setup, log_spaced_steps, trajectory
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.flows import OPTIMIZERS, SCHEDULES, Diverged, gradient_flow, mse_loss, train

BlockRuns = Callable[[str], Setup]  # optimizer -> the setup it trains (sgd draws mini-batches, gd the full batch)


@dataclass(frozen=True)
class DriftCurves:
    """Drift of each law and control over one run: arrays over k = 0..K.

    ``reference[k] = ḡ² Σ_{i<k} τ_i²`` with ``ḡ² = mean_i ‖g_i‖²`` (a line of slope 1 in k, height ∝ τ²
    for a constant step); ``budget[k] = Σ_{i<k} τ_i² ‖g_i‖²``. If the run diverged, ``diverged`` says
    where and why and the arrays are empty.
    """

    lr: float
    schedule: str
    optimizer: str
    laws: dict[str, np.ndarray] = field(default_factory=dict)
    controls: dict[str, np.ndarray] = field(default_factory=dict)
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    budget: np.ndarray = field(default_factory=lambda: np.zeros(0))
    diverged: str | None = None

    def law_total(self) -> np.ndarray:
        """``‖h_k − h_0‖`` over every entry of every law together, k = 0..K (NaN if diverged).

        Examples
        ========
        >>> DriftCurves(0.1, "constant", "gd", {"h": np.array([0.0, 3.0]), "g": np.array([0.0, 4.0])}).law_total()
        array([0., 5.])
        """
        if self.diverged or not self.laws:
            return np.full(max(len(self.reference), 1), np.nan)
        return np.sqrt(np.sum([v**2 for v in self.laws.values()], axis=0))


def drift_curves(
    setup: Setup, *, lr: float, steps: int, schedule: str = "constant", optimizer: str = "gd", seed: int = 0
) -> DriftCurves:
    """Train ``setup(seed)``'s fresh model (:func:`conslaw_lite.drift.trajectory`); ``‖h_k − h_0‖`` per law and control.

    Examples
    ========
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
        budget=t.run.step_budget(),
    )


@dataclass(frozen=True)
class DriftGrid:
    """One :class:`DriftCurves` per (block, optimizer, schedule, τ index); ``ks`` are the steps a figure shows."""

    blocks: tuple[str, ...]
    optimizers: tuple[str, ...]
    schedules: tuple[str, ...]
    taus: np.ndarray
    steps: int
    ks: np.ndarray
    runs: dict[tuple[str, str, str, int], DriftCurves]

    def curves(self, block: str, optimizer: str, schedule: str, tau_index: int) -> DriftCurves:
        """The run of these settings; a setting outside the grid is named in the error."""
        key = (block, optimizer, schedule, tau_index)
        if key not in self.runs:
            raise KeyError(
                f"no run {key} in this grid: blocks {self.blocks}, optimizers {self.optimizers}, "
                f"schedules {self.schedules}, τ indices 0..{len(self.taus) - 1}"
            )
        return self.runs[key]

    def law_drift_at(
        self, block: str, optimizer: str, schedule: str, k: int, *, normalized: bool = False
    ) -> np.ndarray:
        """``‖h_k − h_0‖`` (all laws together) against τ at step k, over ``Σ_{i<k} τ_i²‖g_i‖²`` if ``normalized``."""
        out = []
        for i in range(len(self.taus)):
            c = self.curves(block, optimizer, schedule, i)
            total = c.law_total()[k] if not c.diverged else np.nan
            out.append(total / c.budget[k] if normalized and not c.diverged else total)
        return np.array(out)


def drift_grid(
    blocks: Mapping[str, BlockRuns],
    *,
    taus: Sequence[float],
    steps: int,
    optimizers: Sequence[str] = OPTIMIZERS,
    schedules: Sequence[str] = SCHEDULES,
    points: int = 24,
    seed: int = 0,
) -> DriftGrid:
    """Train every block with every optimizer, schedule and τ for ``steps`` steps (seed ``seed``).

    ``blocks[name](optimizer)`` is the :data:`conslaw_lite.drift.Setup` that optimizer trains
    (:func:`conslaw_lite.drift.arch_runs` builds one for an architecture of the CLI). ``points``
    log-spaced steps k ≤ K are kept for the figures. A diverging run is kept with its message.

    Examples
    ========
    >>> from conslaw_lite.drift import arch_runs
    >>> grid = drift_grid({"toy": arch_runs("toy", samples=1)}, taus=[0.001, 0.002], steps=4, optimizers=["gd"])
    >>> len(grid.runs), grid.ks.tolist()
    (4, [1, 2, 3, 4])
    >>> d = grid.law_drift_at("toy", "gd", "constant", 4)
    >>> round(float(d[1] / d[0]), 1)  # doubling τ: four times the drift
    3.9
    """
    taus = np.asarray(taus, dtype=float)
    if taus.ndim != 1 or len(taus) < 2 or not np.all(taus > 0) or not np.all(np.diff(taus) > 0):
        raise ValueError(f"taus must be at least two increasing positive step sizes, got {taus.tolist()}")
    if not blocks:
        raise ValueError("give at least one block: a dict name -> (optimizer -> setup)")
    for name, runs in blocks.items():
        if not callable(runs):
            raise TypeError(f"block {name!r} must be a function optimizer -> setup, got {runs!r}")
    for group, allowed, chosen in (("optimizers", OPTIMIZERS, optimizers), ("schedules", SCHEDULES, schedules)):
        if not chosen or not set(chosen) <= set(allowed):
            raise ValueError(f"{group} must be a non-empty subset of {allowed}, got {list(chosen)}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    runs = {}
    for block, setups in blocks.items():
        for optimizer in optimizers:
            setup = setups(optimizer)
            for schedule in schedules:
                for i, tau in enumerate(taus):
                    runs[block, optimizer, schedule, i] = drift_curves(
                        setup, lr=float(tau), steps=steps, schedule=schedule, optimizer=optimizer, seed=seed
                    )
    ks = log_spaced_steps(steps, points)
    return DriftGrid(tuple(blocks), tuple(optimizers), tuple(schedules), taus, steps, ks, runs)


@dataclass(frozen=True)
class ToyPaths:
    """GD iterates and flow paths of ``f = a·b·x`` on one data point ``(x, y)``.

    ``gd[(s, i)]`` is the ``(K+1, 2)`` array of ``(a_k, b_k)`` from start s with step ``taus[i]``
    (None if it diverged); ``flow[s]`` the flow path from start s up to time ``taus[-1]·K``.
    """

    starts: tuple[tuple[float, float], ...]
    taus: np.ndarray
    steps: int
    x: float
    y: float
    gd: dict[tuple[int, int], np.ndarray | None]
    flow: dict[int, np.ndarray]

    def level(self, start: int) -> float:
        """``a² − b²`` at the start: the level set the flow never leaves."""
        a, b = self.starts[start]
        return a * a - b * b


def _toy(start: tuple[float, float], x: float, y: float):
    one = torch.ones(1, 1, dtype=torch.float64)
    return ToyProduct(a=start[0], b=start[1]), mse_loss(x * one, y * one)


def _theta(params: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(a, b): recorded by :func:`conslaw_lite.flows.train` the way it records a law, so the path comes from it."""
    return torch.stack([params["a"], params["b"]])


def toy_paths(
    starts: Sequence[tuple[float, float]], taus: Sequence[float], *, steps: int, x: float = 1.0, y: float = 1.0
) -> ToyPaths:
    """GD on ``L = ½(a·b·x − y)²`` from each start with each τ (:func:`conslaw_lite.flows.train`), and the flow.

    Examples
    ========
    >>> paths = toy_paths([(2.2, -0.3)], [0.01, 0.3], steps=20)
    >>> h = lambda p: p[:, 0] ** 2 - p[:, 1] ** 2
    >>> bool(abs(h(paths.flow[0]) - paths.level(0)).max() < 1e-8)  # the flow stays on its level set
    True
    >>> drift = [abs(h(paths.gd[0, i])[-1] - paths.level(0)) for i in range(2)]
    >>> bool(drift[1] > 100 * drift[0])  # GD with a large step leaves it
    True
    """
    taus = np.asarray(taus, dtype=float)
    if len(starts) < 1 or len(taus) < 1 or not np.all(taus > 0):
        raise ValueError(f"give at least one start and positive step sizes, got {list(starts)} and {taus.tolist()}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    gd: dict[tuple[int, int], np.ndarray | None] = {}
    flow = {}
    for s, start in enumerate(starts):
        for i, tau in enumerate(taus):
            model, loss = _toy(start, x, y)
            try:
                gd[s, i] = train(model, loss, lr=float(tau), steps=steps, laws={"θ": _theta}).h["θ"]
            except Diverged:
                gd[s, i] = None
        model, loss = _toy(start, x, y)
        # 1e-10 keeps the flow on its level set far below what the figure can show, at a third of the default's cost
        flow[s] = gradient_flow(model, loss, float(taus[-1] * steps), n_points=100, rtol=1e-10, atol=1e-10).theta
    return ToyPaths(tuple(map(tuple, starts)), taus, steps, x, y, gd, flow)
