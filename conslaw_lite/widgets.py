"""The book's interactive figures: they run in the browser, with or without a kernel.

:func:`drift_figure` draws a :class:`conslaw_lite.grids.DriftGrid` of real training runs;
:func:`level_set_figure` the GD and flow paths of :class:`conslaw_lite.grids.ToyPaths`. Both are
Bokeh layouts whose sliders and buttons switch, in JavaScript, between the runs embedded in the
page: on the built web page (no kernel) and on Colab alike. A Colab reader who wants values
off the grid calls :func:`drift_explorer` again with them: it trains fresh runs and draws them
with the same function.

Why Bokeh: its JavaScript (core + widgets) is 1.7 MB and works offline when inlined, so a chapter
page with its grid stays under 5 MB; Plotly's bundle alone is 4.6–4.8 MB.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np
from bokeh.embed import components
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    CustomJS,
    Div,
    LayoutDOM,
    Legend,
    LegendItem,
    RadioButtonGroup,
    Range1d,
    Select,
    Slider,
    Toggle,
)
from bokeh.plotting import figure
from bokeh.resources import Resources

from conslaw_lite.flows import OPTIMIZERS
from conslaw_lite.grids import BlockRuns, DriftGrid, ToyPaths, drift_grid
from conslaw_lite.plots import CONSERVED, CONTROL, REFERENCE, TRAJECTORY

_JS = Resources(mode="inline", components=["bokeh", "bokeh-widgets"])
_sent_js = False  # whether this kernel has already put Bokeh's JavaScript on the page (it is sent once per page)

# The figure carries its own white card and dark text: pydata-sphinx-theme shows HTML outputs on a light card in its
# dark theme too, and Colab's dark theme does not, so a figure that draws its own background reads the same everywhere.
CARD = {"background-color": "white", "color": "#303030", "color-scheme": "light", "padding": "6px",
        "border-radius": "4px"}


def _positive(values: np.ndarray) -> np.ndarray:
    """float32 for the page; zeros and negatives (no logarithm) become NaN, a gap in the line."""
    values = np.asarray(values, dtype=float)
    return np.where(values > 0, values, np.nan).astype(np.float32)


def _log_range(values: np.ndarray, decades: float = 14.0) -> tuple[float, float]:
    """A fixed log axis around the finite positive values: whole decades, at most ``decades`` of them."""
    v = values[np.isfinite(values) & (values > 0)]
    if v.size == 0:
        return 1e-3, 1.0
    hi = np.ceil(np.log10(v.max()))
    lo = max(np.floor(np.log10(v.min())), hi - decades)
    return float(10**lo), float(10**hi)


def grid_arrays(grid: DriftGrid, block: str) -> tuple[list[str], list[str], np.ndarray]:
    """One block's runs at the figure's steps: law names, control names, and an array
    ``(optimizer, schedule, τ, curve, k)`` whose curves are the laws, the controls, the reference
    ``ḡ²Στ_i²``, the budget ``Στ_i²‖g_i‖²`` and the total law drift (NaN where a run diverged).

    Examples
    ========
    >>> from conslaw_lite.drift import arch_runs
    >>> from conslaw_lite.grids import drift_grid
    >>> grid = drift_grid({"toy": arch_runs("toy", samples=1)}, taus=[0.01, 0.02], steps=3, optimizers=["gd"])
    >>> laws, controls, values = grid_arrays(grid, "toy")
    >>> laws, controls, values.shape
    (['a^2-b^2'], ['a^2', 'b^2'], (1, 2, 2, 6, 3))
    """
    first = next(c for (b, *_), c in grid.runs.items() if b == block and not c.diverged)
    laws, controls = list(first.laws), list(first.controls)
    shape = (len(grid.optimizers), len(grid.schedules), len(grid.taus), len(laws) + len(controls) + 3, len(grid.ks))
    values = np.full(shape, np.nan, dtype=np.float32)
    for o, optimizer in enumerate(grid.optimizers):
        for s, schedule in enumerate(grid.schedules):
            for t in range(len(grid.taus)):
                c = grid.curves(block, optimizer, schedule, t)
                if c.diverged:
                    continue
                curves = [*c.laws.values(), *c.controls.values(), c.reference, c.budget, c.law_total()]
                values[o, s, t] = _positive(np.stack([v[grid.ks] for v in curves]))
    return laws, controls, values


def _ranges(values: np.ndarray, n_laws: int) -> dict[str, tuple[float, float]]:
    """Fixed axes per block (every optimizer, schedule and τ on the same scale): panels 1 and 2, raw and normalized."""
    drift, budget = values[..., :-3, :], values[..., -2:-1, :]
    control_total = np.sqrt(np.nansum(values[..., n_laws:-3, :].astype(float) ** 2, axis=-2))
    totals = np.stack([values[..., -1, :], control_total], axis=-2)  # what panel 2 draws
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "k": _log_range(np.concatenate([drift.ravel(), values[..., -3, :].ravel()])),
            "k_norm": _log_range((drift / budget).ravel()),
            "tau": _log_range(totals.ravel()),
            "tau_norm": _log_range((totals / budget).ravel()),
        }


def _drift_data(grid: DriftGrid) -> dict:
    data = {}
    for block in grid.blocks:
        laws, controls, values = grid_arrays(grid, block)
        diverged = {
            f"{o},{s},{t}": grid.curves(block, opt, sch, t).diverged
            for o, opt in enumerate(grid.optimizers)
            for s, sch in enumerate(grid.schedules)
            for t in range(len(grid.taus))
            if grid.curves(block, opt, sch, t).diverged
        }
        data[block] = {
            "laws": laws,
            "controls": controls,
            "values": values.ravel(),
            "ranges": _ranges(values, len(laws)),
            "diverged": diverged,
        }
    return data


_DRIFT_JS = """
const b = block.value, o = optimizer.active, s = schedule.active, t = tau.value, ki = k.value, norm = normalize.active;
const d = data[b], nL = d.laws.length, nC = d.controls.length, nc = nL + nC + 3;
const nO = optimizers.length, nS = schedules.length, nT = taus.length, nK = ks.length;
const curve = (ti, c) => { const off = ((((o * nS) + s) * nT + ti) * nc + c) * nK;
  return Array.from(d.values.slice(off, off + nK)); };
const scaled = (ti, c) => { const y = curve(ti, c), g = curve(ti, nc - 2);
  return norm ? y.map((v, i) => v / g[i]) : y; };
const range = (axis, key) => { const r = d.ranges[norm ? key + "_norm" : key]; axis.start = r[0]; axis.end = r[1]; };
const xs = Array.from(ks);
laws.data = {xs: d.laws.map(() => xs), ys: d.laws.map((_, c) => scaled(t, c))};
controls.data = {xs: d.controls.map(() => xs), ys: d.controls.map((_, c) => scaled(t, nL + c))};
reference.data = {x: xs, y: scaled(t, nc - 3)};
range(p1.y_range, "k");
const at = (c) => Array.from({length: nT}, (_, ti) => scaled(ti, c)[ki]);
const controlTotal = Array.from({length: nT}, (_, ti) => {
  let sum = 0; for (let c = nL; c < nL + nC; c++) { const v = curve(ti, c)[ki]; sum += (v > 0 ? v * v : 0); }
  const total = Math.sqrt(sum) || NaN; return norm ? total / curve(ti, nc - 2)[ki] : total; });
const lawTotal = at(nc - 1), tx = Array.from(taus);
law_tau.data = {x: tx, y: lawTotal};
control_tau.data = {x: tx, y: nC ? controlTotal : tx.map(() => NaN)};
current.data = {x: [taus[t]], y: [lawTotal[t]]};
const i0 = lawTotal.findIndex(v => v > 0);
const guide = (p) => tx.map(x => (norm || i0 < 0) ? NaN : lawTotal[i0] * (x / tx[i0]) ** p);
slope2.data = {x: tx, y: guide(2)}; slope1.data = {x: tx, y: guide(1)};
range(p2.y_range, "tau");
const why = d.diverged[`${o},${s},${t}`];
const kk = ks[ki], fmt = (x) => x.toPrecision(3);
tau.title = `τ = ${fmt(taus[t])}`; k.title = `k = ${kk}`;
p1.title.text = `${b}, ${optimizers[o]}, ${schedules[s]} step, τ = ${fmt(taus[t])}` + (why ? ` — ${why}` : "");
y1.axis_label = norm ? "‖h_k − h_0‖ / Σ τ_i²‖g_i‖²" : "‖h_k − h_0‖";
p2.title.text = `drift at k = ${kk} against τ`;
y2.axis_label = norm ? "drift / Σ τ_i²‖g_i‖²" : "drift at k";
"""


def _line_legend(p, items: list[tuple[str, object]]) -> None:
    legend = Legend(items=[LegendItem(label=label, renderers=[r]) for label, r in items], location="top_left")
    p.add_layout(legend, "center")
    p.legend.background_fill_alpha = 0.0
    p.legend.border_line_alpha = 0.0
    p.legend.label_text_font_size = "9pt"
    p.legend.click_policy = "hide"


def drift_figure(
    grid: DriftGrid,
    *,
    optimizer: str | None = None,
    schedule: str = "constant",
    tau_index: int | None = None,
    normalized: bool = False,
) -> LayoutDOM:
    """Two panels over ``grid`` and the controls that switch between its runs in the browser.

    Panel 1: ``‖h_k − h_0‖`` of each law (blue) and control (red, dashed) against k on fixed log axes,
    with the reference ``ḡ² Σ_{i<k} τ_i²`` (dotted). The toggle divides each curve by
    ``Σ_{i<k} τ_i² ‖g_i‖²``, after which law curves for different τ coincide (chapter 7's identity).
    Panel 2: the drift of all laws together at the chosen k against τ (log-log), with slope-2 and
    slope-1 guides through the smallest τ and the current τ circled. Starts at ``optimizer``
    (default sgd when in the grid), ``schedule``, the middle τ (or ``tau_index``) and the last k.

    Examples
    ========
    >>> from conslaw_lite.drift import arch_runs
    >>> from conslaw_lite.grids import drift_grid
    >>> grid = drift_grid({"toy": arch_runs("toy", samples=1)}, taus=[0.01, 0.02], steps=3, optimizers=["gd"])
    >>> layout = drift_figure(grid)
    >>> sorted(m.name for m in layout.select({"tags": ["drift-source"]}))
    ['control_tau', 'controls', 'current', 'law_tau', 'laws', 'reference', 'slope1', 'slope2']
    """
    optimizer = optimizer or ("sgd" if "sgd" in grid.optimizers else grid.optimizers[0])
    if optimizer not in grid.optimizers or schedule not in grid.schedules:
        raise ValueError(f"optimizer must be in {grid.optimizers} and schedule in {grid.schedules}")
    tau_index = len(grid.taus) // 2 if tau_index is None else tau_index
    if not 0 <= tau_index < len(grid.taus):
        raise ValueError(f"tau_index must be in 0..{len(grid.taus) - 1}, got {tau_index}")
    sources = {
        name: ColumnDataSource(
            {"xs": [], "ys": []} if name in ("laws", "controls") else {"x": [], "y": []},
            name=name,
            tags=["drift-source"],
        )
        for name in ("laws", "controls", "reference", "law_tau", "control_tau", "current", "slope2", "slope1")
    }
    tools = "pan,wheel_zoom,box_zoom,reset,save"
    # Sized for the book's content column (676 px of cell output at a 1280-px window, less the card's padding):
    # both panels and every widget row fit in 664 px; tests/test_drift_figure_browser.py measures it in Chromium.
    p1 = figure(x_axis_type="log", y_axis_type="log", width=330, height=360, tools=tools, name="panel_k",
                x_range=Range1d(1, grid.ks[-1]), y_range=Range1d(1e-3, 1), x_axis_label="step k",
                toolbar_location="above")
    p2 = figure(x_axis_type="log", y_axis_type="log", width=320, height=360, tools=tools, name="panel_tau",
                x_range=Range1d(grid.taus[0] / 1.3, grid.taus[-1] * 1.3), y_range=Range1d(1e-3, 1),
                x_axis_label="step size τ", toolbar_location="above")
    for p in (p1, p2):
        p.grid.grid_line_alpha = 0.25
        p.title.text_font_size = "10pt"
    laws = p1.multi_line("xs", "ys", source=sources["laws"], color=CONSERVED, line_width=2)
    controls = p1.multi_line("xs", "ys", source=sources["controls"], color=CONTROL, line_dash="dashed", line_width=1.5)
    reference = p1.line("x", "y", source=sources["reference"], color=REFERENCE, line_dash="dotted", line_width=2)
    _line_legend(p1, [("laws", laws), ("controls", controls), ("ḡ² Σ τ_i²", reference)])
    law_tau = p2.line("x", "y", source=sources["law_tau"], color=CONSERVED, line_width=2)
    p2.scatter("x", "y", source=sources["law_tau"], color=CONSERVED, size=5)
    control_tau = p2.line("x", "y", source=sources["control_tau"], color=CONTROL, line_dash="dashed", line_width=1.5)
    slope2 = p2.line("x", "y", source=sources["slope2"], color=REFERENCE, line_dash="dotted", line_width=1.5)
    slope1 = p2.line("x", "y", source=sources["slope1"], color=REFERENCE, line_dash="dashdot", line_width=1.5)
    current = p2.scatter("x", "y", source=sources["current"], size=14, fill_alpha=0, line_width=2.5, color=CONSERVED)
    _line_legend(p2, [("laws", law_tau), ("controls", control_tau), ("slope 2", slope2), ("slope 1", slope1),
                      ("current τ", current)])
    p2.legend.location = "bottom_right"

    widgets = {
        "block": Select(options=list(grid.blocks), value=grid.blocks[0], title="block", width=140, name="block"),
        "optimizer": RadioButtonGroup(labels=list(grid.optimizers), active=grid.optimizers.index(optimizer),
                                      name="optimizer"),
        "schedule": RadioButtonGroup(labels=["constant τ" if s == "constant" else "τ₀/(k+1)" for s in grid.schedules],
                                     active=grid.schedules.index(schedule), name="schedule"),
        "tau": Slider(start=0, end=len(grid.taus) - 1, step=1, value=tau_index, title="τ", show_value=False,
                      width=190, name="tau"),
        "k": Slider(start=0, end=len(grid.ks) - 1, step=1, value=len(grid.ks) - 1, title="k", show_value=False,
                    width=190, name="k"),
        "normalize": Toggle(label="divide by Σ τ_i²‖g_i‖²", active=normalized, width=170, name="normalize"),
    }
    args = dict(sources, **widgets, p1=p1, p2=p2, y1=p1.yaxis[0], y2=p2.yaxis[0], data=_drift_data(grid),
                taus=grid.taus.tolist(),
                ks=grid.ks.tolist(), optimizers=list(grid.optimizers), schedules=list(grid.schedules))
    update = CustomJS(args=args, code=_DRIFT_JS)
    for name, w in widgets.items():
        w.js_on_change("active" if name in ("optimizer", "schedule", "normalize") else "value", update)
    layout = column(
        row(widgets["block"], widgets["tau"], widgets["k"]),
        row(widgets["optimizer"], widgets["schedule"], widgets["normalize"]),
        row(p1, p2),
        name="drift_figure",
        styles=CARD,
    )
    layout.js_on_change("tags", update)  # see _first_draw: the page draws the initial state with the same code
    layout.tags = ["drift"]
    return layout


_PATHS_JS = """
const s = start.options.indexOf(start.value), t = tau.value;
const path = gd[`${s},${t}`];
const f = flow[s];
flow_src.data = {x: f[0], y: f[1]};
level_src.data = {xs: level_xs[s], ys: level_ys[s]};
if (path === null) {
  gd_src.data = {x: [], y: []};
  readout.text = `τ = ${taus[t].toPrecision(3)}: GD diverged from this start`;
} else {
  gd_src.data = {x: path[0], y: path[1]};
  const n = path[0].length - 1, h = path[0][n] ** 2 - path[1][n] ** 2;
  readout.text = `τ = ${taus[t].toPrecision(3)}: after ${n} GD steps a² − b² = ${h.toPrecision(4)}` +
    ` (started at ${levels[s].toPrecision(4)}); the flow keeps it.`;
}
tau.title = `τ = ${taus[t].toPrecision(3)}`;
"""


def _hyperbola(c: float, lim: float, n: int = 200) -> list[tuple[np.ndarray, np.ndarray]]:
    """The branches of ``a² − b² = c`` inside the square ``|a|, |b| ≤ lim``."""
    if c >= 0:
        b = np.linspace(-lim, lim, n)
        a = np.sqrt(c + b * b)
        return [(a, b), (-a, b)]
    a = np.linspace(-lim, lim, n)
    b = np.sqrt(-c + a * a)
    return [(a, b), (a, -b)]


def level_set_figure(paths: ToyPaths, *, lim: float = 2.5) -> LayoutDOM:
    """Level sets of ``a² − b²``, the flow from a start (green) on its level (blue), and GD's iterates
    (red) for the τ the slider chooses, in the ``(a, b)`` plane; the curve ``a·b·x = y`` of minima is dashed.

    Examples
    ========
    >>> from conslaw_lite.grids import toy_paths
    >>> layout = level_set_figure(toy_paths([(2.0, 0.3)], [0.05, 0.1], steps=5))
    >>> sorted(m.name for m in layout.select({"tags": ["paths-source"]}))
    ['flow', 'gd', 'level']
    """
    p = figure(width=460, height=460, x_range=Range1d(-lim, lim), y_range=Range1d(-lim, lim), x_axis_label="a",
               y_axis_label="b", tools="pan,wheel_zoom,reset,save", match_aspect=True,
               toolbar_location="above")
    p.grid.grid_line_alpha = 0.25
    p.title.text_font_size = "10pt"
    p.title.text = "level sets of a² − b²; the flow stays on its own, GD steps off it"
    background = [br for c in np.linspace(-4, 4, 9) for br in _hyperbola(float(c), lim)]
    p.multi_line([a.tolist() for a, _ in background], [b.tolist() for _, b in background], color=REFERENCE,
                 alpha=0.35, line_width=1)
    a = np.linspace(0.05, lim, 100)
    b = paths.y / paths.x / a  # a·b = y/x, the two branches (a, b) and (−a, −b)
    minima = p.multi_line([a.tolist(), (-a).tolist()], [b.tolist(), (-b).tolist()], color=REFERENCE,
                          line_dash="dashed", line_width=1.5)
    sources = {n: ColumnDataSource({"xs": [], "ys": []} if n == "level" else {"x": [], "y": []}, name=n,
                                   tags=["paths-source"]) for n in ("flow", "gd", "level")}
    level = p.multi_line("xs", "ys", source=sources["level"], color=CONSERVED, line_width=2.5, alpha=0.7)
    gd = p.line("x", "y", source=sources["gd"], color=CONTROL, line_width=1.2)
    p.scatter("x", "y", source=sources["gd"], color=CONTROL, size=5, alpha=0.6)
    # drawn after GD, so that where the iterates follow the flow the flow stays visible on top of them
    flow = p.line("x", "y", source=sources["flow"], color=TRAJECTORY, line_width=2)
    _line_legend(p, [("a² − b² = its start value", level), ("gradient flow", flow), ("GD iterates", gd),
                     ("minima a·b·x = y", minima)])
    p.legend.location = "bottom_left"
    labels = [f"({a:g}, {b:g})" for a, b in paths.starts]
    start = Select(options=labels, value=labels[0], title="start (a₀, b₀)", width=150, name="start")
    # the largest τ whose run from the default start converged: there GD visibly leaves the flow's level set
    shown = max((i for i in range(len(paths.taus)) if paths.gd[0, i] is not None), default=0)
    tau = Slider(start=0, end=len(paths.taus) - 1, step=1, value=shown, title="τ", show_value=False,
                 width=260, name="path_tau")
    readout = Div(text="", width=460, name="readout")
    levels = [paths.level(s) for s in range(len(paths.starts))]
    branches = [_hyperbola(c, lim) for c in levels]
    args = dict(
        start=start, tau=tau, readout=readout, flow_src=sources["flow"], gd_src=sources["gd"],
        level_src=sources["level"], taus=paths.taus.tolist(), levels=levels,
        gd={f"{s},{t}": None if v is None else [v[:, 0].tolist(), v[:, 1].tolist()] for (s, t), v in paths.gd.items()},
        flow=[[v[:, 0].tolist(), v[:, 1].tolist()] for v in paths.flow.values()],
        level_xs=[[a.tolist() for a, _ in br] for br in branches],
        level_ys=[[b.tolist() for _, b in br] for br in branches],
    )
    update = CustomJS(args=args, code=_PATHS_JS)
    start.js_on_change("value", update)
    tau.js_on_change("value", update)
    layout = column(row(start, tau), p, readout, name="level_set_figure", styles=CARD)
    layout.js_on_change("tags", update)
    layout.tags = ["paths"]
    return layout


def _first_draw(layout: LayoutDOM) -> str:
    """Draw the initial state with the figure's own callback (a change to ``tags`` fires it), once the page is ready."""
    return (
        "<script>(function f(){const B=window.Bokeh;if(!B||!B.documents.length){return setTimeout(f,20);}"
        f"for(const d of B.documents){{const m=d.get_model_by_id('{layout.id}');"
        "if(m){m.tags=[...m.tags,'drawn'];return;}}setTimeout(f,20);})();</script>"
    )


def to_html(layout: LayoutDOM, *, with_js: bool = True) -> str:
    """``layout`` as HTML for a page: Bokeh's JavaScript inlined (if ``with_js``), the figure and its data.

    Examples
    ========
    >>> from conslaw_lite.grids import toy_paths
    >>> html = to_html(level_set_figure(toy_paths([(2.0, 0.3)], [0.05, 0.1], steps=5)), with_js=False)
    >>> "Bokeh" in html and "cdn" not in html
    True
    """
    script, div = components(layout)
    return (_JS.render_js() if with_js else "") + script + div + _first_draw(layout)


def show(layout: LayoutDOM) -> None:
    """Display ``layout`` in the notebook; Bokeh's JavaScript goes with the first figure of the page only.

    On Colab each output is its own frame, so every figure carries the JavaScript there.
    """
    global _sent_js
    from IPython.display import HTML, display

    with_js = not _sent_js or "google.colab" in sys.modules
    display(HTML(to_html(layout, with_js=with_js)))
    _sent_js = True


def drift_explorer(
    blocks: Mapping[str, BlockRuns],
    *,
    taus: Sequence[float],
    steps: int,
    optimizers: Sequence[str] = OPTIMIZERS,
    show_figure: bool = True,
    **figure_options,
) -> DriftGrid:
    """Train the grid (:func:`conslaw_lite.grids.drift_grid`) and show its :func:`drift_figure`.

    In the book this runs when the page is built; on Colab, call it with any τ to draw fresh runs.

    Examples
    ========
    >>> from conslaw_lite.drift import arch_runs
    >>> grid = drift_explorer({"toy": arch_runs("toy", samples=1)}, taus=[0.01, 0.02], steps=3, show_figure=False)
    >>> len(grid.runs)  # 1 block × 4 optimizers × 2 schedules × 2 τ
    16
    """
    grid = drift_grid(blocks, taus=taus, steps=steps, optimizers=optimizers)
    if show_figure:
        show(drift_figure(grid, **figure_options))
    return grid
