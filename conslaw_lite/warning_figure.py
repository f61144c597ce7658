"""The early-warning figure: each τ of a sweep, its drift alarm and its loss, switched in the browser.

For the run at one τ of :func:`conslaw_lite.early_warning.sweep` it draws, against the step k on a log
axis, the drift alarm's statistic ``max_g ε_g(k) / (k·r_g)`` (blue) with the factor that fires it
(blue, dashed), and the loss ratio ``L_k / L_0`` (red) with the loss alarm's level (red, dotted) and the
divergence level ``DIVERGENCE`` (grey, dotted);
vertical lines mark the drift warning and the divergence. A menu picks the model, a slider the τ:
the runs are embedded in the page, so it works without a kernel (the book's web page, Colab).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, CustomJS, Div, LayoutDOM, Select, Slider, Span
from bokeh.plotting import figure

from conslaw_lite.early_warning import DIVERGENCE, SweepPoint
from conslaw_lite.plots import CONSERVED, CONTROL, REFERENCE
from conslaw_lite.widgets import CARD


def _positive(values: np.ndarray) -> list[float | None]:
    """Values for a log axis: non-positive or non-finite ones become gaps (``None``)."""
    return [float(v) if math.isfinite(v) and v > 0 else None for v in np.asarray(values, dtype=float)]


def _run(point: SweepPoint) -> dict:
    return {
        "lr": point.lr,
        "k": point.steps.tolist(),
        "ratio": _positive(point.ratio),
        "loss_k": list(range(len(point.loss))),
        "loss": _positive(point.loss),
        "warned": point.warned_at,
        "diverged": point.diverged_at,
        "loss_warned": point.loss_warned_at,
    }


_JS = """
const run = data[model.value][Math.min(tau.value, data[model.value].length - 1)];
tau.end = data[model.value].length - 1;
drift.data = {x: run.k, y: run.ratio};
loss.data = {x: run.loss_k, y: run.loss};
warned.visible = run.warned !== null; warned.location = run.warned;
diverged.visible = run.diverged !== null; diverged.location = run.diverged;
const say = (v) => v === null ? "none" : `step ${v}`;
tau.title = `τ = ${run.lr.toPrecision(3)}`;
readout.text = `${model.value}, τ = ${run.lr.toPrecision(3)}: drift warning ${say(run.warned)}, ` +
  `loss alarm ${say(run.loss_warned)}, divergence ${say(run.diverged)}`;
"""


def warning_figure(
    sweeps: Mapping[str, Sequence[SweepPoint]], *, factor: float = 30.0, loss_factor: float = 3.0
) -> LayoutDOM:
    """The figure over ``{model name: sweep points}``; ``factor`` and ``loss_factor`` are the sweep's alarm levels.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> from conslaw_lite.early_warning import sweep
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> points = sweep(lambda seed: (ToyProduct(a=1.0, b=0.5), mse_loss(one, one)), [0.5, 1.85], steps=20)
    >>> layout = warning_figure({"toy": points})
    >>> sorted(m.name for m in layout.select({"tags": ["warning-source"]}))
    ['drift', 'loss']
    """
    if not sweeps or not all(sweeps.values()):
        raise ValueError("warning_figure needs at least one model with at least one swept τ")
    p = figure(width=620, height=340, y_axis_type="log", x_axis_label="step k", tools="pan,wheel_zoom,reset,save",
               y_axis_label="drift: ε(k)/(k·r)   loss: L_k/L_0", toolbar_location="above")
    p.grid.grid_line_alpha = 0.25
    sources = {n: ColumnDataSource({"x": [], "y": []}, name=n, tags=["warning-source"]) for n in ("drift", "loss")}
    p.line("x", "y", source=sources["drift"], color=CONSERVED, line_width=2, legend_label="drift alarm statistic")
    p.line("x", "y", source=sources["loss"], color=CONTROL, line_width=2, legend_label="loss / initial loss")
    p.add_layout(Span(location=factor, dimension="width", line_color=CONSERVED, line_dash="dashed"))
    p.add_layout(Span(location=loss_factor, dimension="width", line_color=CONTROL, line_dash="dotted"))
    p.add_layout(Span(location=DIVERGENCE, dimension="width", line_color=REFERENCE, line_dash="dotted"))
    warned = Span(location=0, dimension="height", line_color=CONSERVED, line_width=1.5, visible=False)
    diverged = Span(location=0, dimension="height", line_color=REFERENCE, line_width=1.5, visible=False)
    p.add_layout(warned)
    p.add_layout(diverged)
    p.legend.location = "top_left"
    p.legend.label_text_font_size = "9pt"
    names = list(sweeps)
    model = Select(options=names, value=names[0], title="model", width=180, name="warning_model")
    longest = max(len(points) for points in sweeps.values())
    tau = Slider(start=0, end=max(longest - 1, 1), step=1, value=longest - 1, title="τ", show_value=False, width=300,
                 name="warning_tau")
    readout = Div(text="", width=620)
    data = {name: [_run(point) for point in points] for name, points in sweeps.items()}
    update = CustomJS(args=dict(model=model, tau=tau, drift=sources["drift"], loss=sources["loss"], warned=warned,
                                diverged=diverged, readout=readout, data=data), code=_JS)
    model.js_on_change("value", update)
    tau.js_on_change("value", update)
    layout = column(row(model, tau), p, readout, name="warning_figure", styles=CARD)
    layout.js_on_change("tags", update)  # the first draw: conslaw_lite.widgets.show changes the tags once on the page
    layout.tags = ["warning"]
    return layout
