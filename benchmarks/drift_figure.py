"""Cost of the book's interactive figures: ``python benchmarks/drift_figure.py [--scale cpu] [--browser]``.

Runs each chapter's figure cells as the chapter has them (the cells that call ``drift_explorer`` or
``level_set_figure``, with the chapter's own imports cell first) and prints, per chapter, the
seconds those cells take (training the grid) and the bytes of HTML they put on the page (Bokeh's
JavaScript once, plus every figure's data). Targets: at ``cpu`` scale, all grids together add at most 60 s
to ``make book``; a chapter page stays under 5 MB. With ``--browser``, also opens each chapter's
figures in headless Chromium from a local file and prints the seconds until they are drawn (target: < 2 s), wall
and the renderer's busy time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("drift_explorer(", "level_set_figure(")


def chapter_cells(path: Path) -> tuple[str, list[str]]:
    """The chapter's imports cell (its first code cell after the Colab one) and its figure cells."""
    code = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return code[1], [c for c in code if any(f in c for f in FIGURES)]


def run_chapter(path: Path) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds the figure cells take, and the HTML they display (what
    :func:`conslaw_lite.widgets.show` would put on a fresh page). CPU seconds are what a shared machine's load
    does not inflate."""
    import matplotlib

    matplotlib.use("Agg")
    from conslaw_lite import widgets

    shown: list[str] = []

    def capture(layout) -> None:  # what show() would display on a fresh page: the JavaScript with the first figure
        shown.append(widgets.to_html(layout, with_js=not shown))

    imports, cells = chapter_cells(path)
    namespace: dict = {"display": print}
    exec(compile(imports, f"{path.name}:imports", "exec"), namespace)
    setup = "SAMPLES, BATCH = 32, 4" if "SAMPLES" in "".join(cells) else ""
    exec(setup, namespace)
    widgets_show, widgets.show = widgets.show, capture
    try:
        start, cpu = time.perf_counter(), time.process_time()
        for cell in cells:
            exec(compile(cell, path.name, "exec"), namespace)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        widgets.show = widgets_show
    return seconds, cpu, shown


def render_seconds(html: str, figures: int) -> tuple[float, float]:
    """Seconds from opening ``html`` (a local file) in headless Chromium until every figure has drawn its data:
    wall time, and the renderer's main-thread task time (Chrome's ``TaskDuration``), which a loaded machine
    inflates far less."""
    from tests.test_drift_figure_browser import chromium, wait_drawn

    with tempfile.TemporaryDirectory() as tmp, chromium() as driver:
        page = Path(tmp) / "page.html"
        page.write_text(f"<html><head><meta charset='utf-8'></head><body>{html}</body></html>")
        driver.execute_cdp_cmd("Performance.enable", {})
        start = time.perf_counter()
        driver.get(page.as_uri())
        wait_drawn(driver, figures)
        wall = time.perf_counter() - start
        metrics = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
        return wall, metrics["TaskDuration"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu", choices=("ci", "cpu", "gpu"))
    parser.add_argument("--browser", action="store_true", help="also time the drawing in headless Chromium")
    parser.add_argument("--chapters", nargs="*", default=None, help="notebook names (default: every chapter)")
    args = parser.parse_args()
    os.environ["CONSLAW_SCALE"] = args.scale
    import torch

    torch.set_num_threads(1)
    paths = sorted((ROOT / "book").glob("*.ipynb"))
    paths = [p for p in paths if args.chapters is None or p.stem in args.chapters]
    print(f"scale {args.scale}")
    header = f"{'chapter':<18} {'figures':>7} {'wall s':>7} {'CPU s':>7} {'HTML MB':>8}"
    print(header + (f" {'draw s':>7} {'task s':>7}" if args.browser else ""))
    total, total_cpu = 0.0, 0.0
    for path in paths:
        if not chapter_cells(path)[1]:
            continue
        seconds, cpu, shown = run_chapter(path)
        total, total_cpu = total + seconds, total_cpu + cpu
        html = "".join(shown)
        line = f"{path.stem:<18} {len(shown):>7} {seconds:>7.1f} {cpu:>7.1f} {len(html.encode()) / 1e6:>8.2f}"
        if args.browser:
            wall, task = render_seconds(html, len(shown))
            line += f" {wall:>7.2f} {task:>7.2f}"
        print(line, flush=True)
    print(f"{'all chapters':<18} {'':>7} {total:>7.1f} {total_cpu:>7.1f}")


if __name__ == "__main__":
    main()
