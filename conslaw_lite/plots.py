"""The book's plotting conventions: one colour for conserved quantities, one for controls.

Examples
========
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import numpy as np
>>> fig, ax = new_figure()
>>> line = plot_drift(ax, np.arange(1, 5), np.array([1e-8, 2e-8, 3e-8, 4e-8]), "a²−b²", conserved=True)
>>> line.get_color() == CONSERVED
True
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

CONSERVED = "#1f6fb4"  # blue: quantities gradient flow keeps
CONTROL = "#d1495b"  # red: look-alikes it does not keep
REFERENCE = "#555555"  # grey dashed: slopes and bounds
TRAJECTORY = "#2a9d5c"  # green: paths in parameter space
CYCLE = ["#1f6fb4", "#e9a03b", "#2a9d5c", "#8e5cc4", "#d1495b", "#17a2b8"]


def new_figure(ncols: int = 1, *, width: float = 5.0, height: float = 3.6) -> tuple[Figure, Axes | np.ndarray]:
    """A figure with ``ncols`` panels in the book's size."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), constrained_layout=True)
    return fig, axes


def plot_drift(
    ax: Axes, k: np.ndarray, drift: np.ndarray, label: str, *, conserved: bool = True, **kwargs
) -> Line2D:
    """Drift against step k on log-log axes, blue for a conserved law, red for a control."""
    kwargs.setdefault("color", CONSERVED if conserved else CONTROL)
    kwargs.setdefault("linestyle", "-" if conserved else "--")
    (line,) = ax.loglog(k, np.maximum(drift, np.finfo(float).tiny), label=label, **kwargs)
    ax.set_xlabel("step k")
    return line


def plot_reference_slope(ax: Axes, x: np.ndarray, y0: float, slope: float, label: str | None = None) -> Line2D:
    """A dashed grey line ``y0 · (x / x[0])^slope`` for comparing growth rates."""
    x = np.asarray(x, dtype=float)
    (line,) = ax.loglog(x, y0 * (x / x[0]) ** slope, color=REFERENCE, linestyle=":", label=label or f"slope {slope:g}")
    return line
