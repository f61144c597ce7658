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

from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D

if TYPE_CHECKING:
    from conslaw_lite.monitor import Monitor

CONSERVED = "#1f6fb4"  # blue: quantities gradient flow keeps
CONTROL = "#d1495b"  # red: look-alikes it does not keep
REFERENCE = "#555555"  # grey dashed: slopes and bounds
TRAJECTORY = "#2a9d5c"  # green: paths in parameter space
CYCLE = ["#1f6fb4", "#e9a03b", "#2a9d5c", "#8e5cc4", "#d1495b", "#17a2b8"]


def new_figure(ncols: int = 1, *, width: float = 5.0, height: float = 3.6) -> tuple[Figure, Axes | np.ndarray]:
    """A figure with ``ncols`` panels side by side, each ``width × height`` inches.

    Examples
    ========
    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig, axes = new_figure(2)
    >>> axes.shape, fig.get_size_inches().tolist()
    ((2,), [10.0, 3.6])
    >>> plt.close(fig)
    """
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), constrained_layout=True)
    return fig, axes


def plot_drift(
    ax: Axes, k: np.ndarray, drift: np.ndarray, label: str, *, conserved: bool = True, **kwargs: Any
) -> Line2D:
    """Drift ``|h(θ_k) − h(θ_0)|`` against step k on log-log axes, blue for a conserved law, red for a control.

    Exact zeros (no logarithm) are left as gaps.

    Examples
    ========
    With constant τ the drift of a law grows like ``τ² k`` (chapter 07):

    >>> import matplotlib; matplotlib.use("Agg")
    >>> k = np.arange(1, 5)
    >>> fig, ax = new_figure()
    >>> law = plot_drift(ax, k, 1e-4 * k, "a²−b²")
    >>> control = plot_drift(ax, k, np.array([0.1, 0.3, 0.0, 0.5]), "a²", conserved=False)
    >>> law.get_color() == CONSERVED, control.get_color() == CONTROL, control.get_linestyle()
    (True, True, '--')
    >>> control.get_ydata()  # the exact zero becomes a gap
    array([0.1, 0.3, nan, 0.5])
    >>> plt.close(fig)
    """
    kwargs.setdefault("color", CONSERVED if conserved else CONTROL)
    kwargs.setdefault("linestyle", "-" if conserved else "--")
    # an exact zero (a linear law kept to the last bit) has no logarithm: leave a gap, not a point at 1e-308
    (line,) = ax.loglog(k, np.where(np.asarray(drift) > 0, drift, np.nan), label=label, **kwargs)
    ax.set_xlabel("step k")
    return line


def plot_monitor(ax: Axes, monitor: Monitor, family: str) -> None:
    """ε_block of one block family of a :class:`~conslaw_lite.Monitor` against step k: its laws and, if it has
    them, its controls (:func:`plot_drift`'s colours), titled by the family.

    Examples
    ========
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import torch
    >>> from conslaw_lite import Monitor
    >>> from conslaw_lite.families.toy import ToyProduct
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> monitor = Monitor(model)
    >>> for _ in range(3):
    ...     with torch.no_grad(): _ = model.a.add_(0.1)
    ...     _ = monitor.step()
    >>> fig, ax = new_figure()
    >>> plot_monitor(ax, monitor, "toy")
    >>> [line.get_label() for line in ax.get_lines()], ax.get_title()
    (['laws', 'controls'], 'toy')
    >>> plt.close(fig)
    """
    k = monitor.steps[1:]  # ε = 0 at k = 0: no logarithm
    plot_drift(ax, k, monitor.epsilon(family)[1:], "laws")
    if f"{family}:control" in [group.key for group in monitor.groups]:
        plot_drift(ax, k, monitor.epsilon(f"{family}:control")[1:], "controls", conserved=False)
    ax.set_ylabel("ε_block")
    ax.set_title(family)


def plot_reference_slope(ax: Axes, x: np.ndarray, y0: float, slope: float, label: str | None = None) -> Line2D:
    """A dotted grey line ``y0 · (x / x[0])^slope`` for comparing growth rates.

    Examples
    ========
    Slope 2 over two decades of x climbs four decades:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig, ax = new_figure()
    >>> line = plot_reference_slope(ax, np.array([1, 10, 100]), 1e-6, 2)
    >>> line.get_ydata(), line.get_label()
    (array([1.e-06, 1.e-04, 1.e-02]), 'slope 2')
    >>> plt.close(fig)
    """
    x = np.asarray(x, dtype=float)
    (line,) = ax.loglog(x, y0 * (x / x[0]) ** slope, color=REFERENCE, linestyle=":", label=label or f"slope {slope:g}")
    return line


def plot_gates(ax: Axes, gates: np.ndarray, title: str = "") -> AxesImage:
    """Gate values g_e(x_t) as a heat-map: tokens t across, experts e down; white where a token skips an expert.

    ``gates`` has shape (T, n_E), rows summing to 1 (e.g. :meth:`conslaw_lite.families.moe.block.MoE.gates`).

    Examples
    ========
    Top-2 routing over three experts: each token's two gates sum to 1, the third is blank.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig, ax = new_figure()
    >>> image = plot_gates(ax, np.array([[0.7, 0.3, 0.0], [0.0, 0.5, 0.5]]))
    >>> image.get_array().shape, image.get_array().mask.tolist()  # (n_E, T); True = blank
    ((3, 2), [[False, True], [False, False], [True, False]])
    >>> plt.close(fig)
    """
    gates = np.asarray(gates, dtype=float)
    shown = np.ma.masked_equal(gates.T, 0.0)  # (n_E, T): unselected experts stay blank
    cmap = plt.get_cmap("Blues").with_extremes(bad="white")
    image = ax.imshow(shown, aspect="auto", cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xlabel("token t")
    ax.set_ylabel("expert e")
    ax.set_yticks(range(gates.shape[1]))
    ax.set_title(title)
    return image


def plot_band(
    ax: Axes, k: np.ndarray, values: np.ndarray, label: str, *, conserved: bool = True, **kwargs: Any
) -> Line2D:
    """Mean over seeds (rows of ``values``) against k on log-log axes, shaded from the smallest to the largest seed.

    Blue and solid for a conserved law, red and dashed for a control, as :func:`plot_drift`.

    Examples
    ========
    Two seeds, three steps: the line is their mean.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig, ax = new_figure()
    >>> line = plot_band(ax, np.arange(1, 4), np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]), "a²−b²")
    >>> line.get_ydata()
    array([2., 3., 4.])
    >>> plt.close(fig)
    """
    values = np.maximum(np.atleast_2d(values), np.finfo(float).tiny)
    line = plot_drift(ax, k, values.mean(axis=0), label, conserved=conserved, **kwargs)
    ax.fill_between(k, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.15, linewidth=0)
    return line


def plot_singular_values(ax: Axes, sigma: np.ndarray, rank: int, title: str = "") -> None:
    """Singular values of the law counter's stacked vectors, largest first (log scale): kept ones (the rank of
    Lie(W)) in green, dropped ones in grey, a dashed line across the gap between them.

    ``sigma`` and ``rank`` are :class:`conslaw_lite.counting.LawCount`'s ``singular_values`` and ``rank_lie``.
    The gap line sits at the geometric mean ``√(σ_rank · σ_rank+1)``.

    Examples
    ========
    Rank 2 of D = 3: one law, and a gap of 14 decades to trust the rank.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> fig, ax = new_figure()
    >>> plot_singular_values(ax, np.array([3.0, 1.0, 1e-14]), rank=2)
    >>> [float(y) for y in ax.lines[-1].get_ydata()]  # the gap line: √(1 · 1e-14)
    [1e-07, 1e-07]
    >>> plt.close(fig)
    """
    sigma = np.maximum(np.asarray(sigma, dtype=float), np.finfo(float).tiny)
    index = np.arange(1, len(sigma) + 1)
    ax.semilogy(index[:rank], sigma[:rank], ".", color=TRAJECTORY, label=f"kept: rank {rank}")
    ax.semilogy(index[rank:], sigma[rank:], ".", color=REFERENCE, label="dropped")
    if 0 < rank < len(sigma):
        ax.axhline(np.sqrt(sigma[rank - 1] * sigma[rank]), color=REFERENCE, linestyle="--", linewidth=0.8)
    ax.set_xlabel("index")
    ax.set_ylabel("singular value")
    ax.set_title(title)
    ax.legend(loc="lower left")


def plot_law_matrix(ax: Axes, M: np.ndarray, title: str = "", *, vmax: float | None = None) -> AxesImage:
    """A matrix-valued law (e.g. ``Q_iᵀQ_i − K_iᵀK_i``) as a heat-map, blue negative, red positive, 0 white.

    ``vmax`` fixes the colour range to ±vmax so that panels before and after training compare.

    Examples
    ========
    The law ``AᵀA − BBᵀ`` of a linear two-layer net is a symmetric matrix; by default the range is ±max|M|:

    >>> import matplotlib; matplotlib.use("Agg")
    >>> A, B = np.array([[2.0, 0.0], [1.0, 1.0]]), np.eye(2)
    >>> M = A.T @ A - B @ B.T
    >>> M
    array([[4., 1.],
           [1., 0.]])
    >>> fig, ax = new_figure()
    >>> plot_law_matrix(ax, M).get_clim()
    (-4.0, 4.0)
    >>> plt.close(fig)
    """
    M = np.asarray(M, dtype=float)
    vmax = float(np.abs(M).max()) if vmax is None else vmax
    image = ax.imshow(M, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(M.shape[1]))
    ax.set_yticks(range(M.shape[0]))
    ax.set_title(title)
    return image
