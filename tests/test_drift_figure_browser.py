"""The drift figure in a real browser, with no kernel: a one-chapter book is built with it, the chapter's
HTML is opened from disk in headless Chromium (Debian's chromium and chromium-driver, `make browser`),
and the test moves the τ slider and the normalization toggle the way a reader does. The same page, at a
1280-px window, must hold both interactive figures inside the book's content column, and with the network
off it must show a formula typeset by the MathJax the book ships."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from conslaw_lite.drift import arch_runs
from conslaw_lite.grids import drift_grid, toy_paths
from conslaw_lite.widgets import grid_arrays
from tests.test_book import _build

pytestmark = pytest.mark.slow  # a headless browser and a one-chapter book build

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1100,1000"]
# The chapter draws these; the test recomputes them (the runs are reproducible from the seed) to compare.
TAUS, STEPS = [0.00125, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08], 12  # seven τ, each twice the last
START, PATH_TAUS = (2.2, -0.3), [0.05, 0.1, 0.2]
CELL = f"""from conslaw_lite.drift import arch_runs
from conslaw_lite.grids import drift_grid, toy_paths
from conslaw_lite.widgets import drift_figure, level_set_figure, show

show(drift_figure(drift_grid({{"toy": arch_runs("toy", samples=16)}}, taus={TAUS}, steps={STEPS})))
show(level_set_figure(toy_paths([{START}], {PATH_TAUS}, steps=10)))

from IPython.display import Math, display
display(Math(r"h(\\theta^+) - h(\\theta) = \\tau^2 g^\\top M g"))
"""


def require_browser() -> None:
    """Skip, naming the fix, where the browser or its driver is not installed (`make test` installs both)."""
    if not (CHROMIUM and DRIVER):
        pytest.skip("no chromium/chromedriver on PATH: `make browser` installs Debian's chromium and chromium-driver")
    pytest.importorskip("selenium", reason="selenium is not installed: `pip install -r requirements.txt`")


@contextmanager
def chromium() -> Iterator[object]:
    """Headless Chromium under Selenium, with the flags of an offline, sandbox-less machine."""
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_drawn(driver, figures: int) -> None:
    """Until the page's ``figures`` Bokeh documents have drawn their first state (widgets._first_draw tags it)."""
    driver.execute_async_script(
        "const [n, done] = arguments; (function f() { const B = window.Bokeh;"
        " const drawn = (d) => d.roots().every(r => r.tags.includes('drawn'));"
        " const ok = B && B.documents.length === n && B.documents.every(drawn);"
        " ok ? requestAnimationFrame(() => done()) : setTimeout(f, 5); })();",
        figures,
    )


MODEL = "const m = Bokeh.documents.map(d => d.get_model_by_name(arguments[0])).find(m => m);"


def _source(driver, name: str) -> dict:
    """A plotted data source of the page, as lists (NaN, a gap in a log plot, comes back as None)."""
    return driver.execute_script(
        MODEL +
        " const arr = (a) => Array.from(a, v => (typeof v === 'number' ? v : Array.from(v)));"
        " return Object.fromEntries(Object.entries(m.data).map(([k, v]) => [k, arr(v)]));",
        name,
    )


def _widget_element(driver, name: str, selector: str):
    """The element a reader touches inside a Bokeh widget (widgets live in shadow roots)."""
    return driver.execute_script(
        MODEL + " const view = Bokeh.index.find_one_by_id(m.id);"
        " return view.shadow_el.querySelector(arguments[1]);",
        name,
        selector,
    )


def _as_array(ys: list) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in y] for y in ys], dtype=float)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_browser()  # before the build: without a browser there is nothing to look at
    if not Path(sys.executable).with_name("jupyter-book").exists():
        pytest.skip("jupyter-book is not installed in this environment (`pip install -r requirements.txt`)")
    book = tmp_path_factory.mktemp("figure_book")
    done = _build(book, CELL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return book / "_build" / "html" / "book" / "chapter.html"


def test_slider_and_toggle_switch_to_the_precomputed_runs(page: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    grid = drift_grid({"toy": arch_runs("toy", samples=16)}, taus=TAUS, steps=STEPS)
    laws, controls, values = grid_arrays(grid, "toy")
    o, s = grid.optimizers.index("sgd"), grid.schedules.index("constant")  # the figure's starting view
    assert page.stat().st_size < 5e6, f"the chapter page weighs {page.stat().st_size / 1e6:.1f} MB"
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_drawn(driver, 2)  # how fast: benchmarks/drift_figure.py --browser (a timed test would be flaky)
        t0 = len(grid.taus) // 2
        before = _as_array(_source(driver, "laws")["ys"])
        np.testing.assert_allclose(before, values[o, s, t0, : len(laws)], rtol=1e-6)
        driver.save_screenshot(str(tmp_path / "drift_tau_before.png"))

        handle = _widget_element(driver, "tau", ".noUi-handle")
        handle.send_keys(Keys.ARROW_RIGHT)  # one notch: τ doubles
        after = _as_array(_source(driver, "laws")["ys"])
        np.testing.assert_allclose(after, values[o, s, t0 + 1, : len(laws)], rtol=1e-6)
        assert np.nanmin(after / before) > 3, "doubling τ should about quadruple the law's drift"
        driver.save_screenshot(str(tmp_path / "drift_tau_doubled.png"))

        _widget_element(driver, "normalize", "button").click()
        handle.send_keys(Keys.HOME)
        normalized = []
        for t in range(len(grid.taus)):
            ys = _as_array(_source(driver, "laws")["ys"])
            np.testing.assert_allclose(ys, values[o, s, t, : len(laws)] / values[o, s, t, -2], rtol=1e-5)
            normalized.append(ys)
            handle.send_keys(Keys.ARROW_RIGHT)
        normalized = np.array(normalized)  # (τ, law, k)
        spread = np.nanmax(normalized, axis=0) / np.nanmin(normalized, axis=0)
        assert np.nanmax(spread) < 1.5, f"normalized law curves differ by {np.nanmax(spread):.2f}× across τ"
        law_tau = np.array(_source(driver, "law_tau")["y"], dtype=float)  # panel 2 says the same
        assert law_tau.max() / law_tau.min() < 1.5
        driver.save_screenshot(str(tmp_path / "drift_normalized.png"))

        driver.execute_script("document.documentElement.dataset.theme = 'dark'")
        card = driver.execute_script(
            MODEL.replace("arguments[0]", "'drift_figure'")
            + " return getComputedStyle(Bokeh.index.find_one_by_id(m.id).el).backgroundColor;"
        )
        assert card == "rgb(255, 255, 255)", "the figure draws its own white card, dark theme or not"
        driver.save_screenshot(str(tmp_path / "drift_dark.png"))

        paths = toy_paths([START], PATH_TAUS, steps=10)
        gd = _source(driver, "gd")  # the slider starts at the largest τ, where GD visibly leaves the level set
        np.testing.assert_allclose(np.array([gd["x"], gd["y"]]).T, paths.gd[0, len(PATH_TAUS) - 1], rtol=1e-12)
        handle = _widget_element(driver, "path_tau", ".noUi-handle")
        driver.execute_script("arguments[0].scrollIntoView()", handle)
        handle.send_keys(Keys.HOME)
        for t in range(len(PATH_TAUS)):
            gd = _source(driver, "gd")
            np.testing.assert_allclose(np.array([gd["x"], gd["y"]]).T, paths.gd[0, t], rtol=1e-12)
            handle.send_keys(Keys.ARROW_RIGHT)
        driver.save_screenshot(str(tmp_path / "level_sets.png"))


RECT = "const b = arguments[0].getBoundingClientRect(); return [b.left, b.right, b.top, b.bottom];"


def _view_rect(driver, name: str) -> list[float]:
    """The bounding box of a named Bokeh model's element on the page, in CSS pixels: [left, right, top, bottom]."""
    return driver.execute_script(MODEL + " const b = Bokeh.index.find_one_by_id(m.id).el.getBoundingClientRect();"
                                 " return [b.left, b.right, b.top, b.bottom];", name)


def test_both_figures_fit_the_content_column_at_1280_px(page: Path, tmp_path: Path) -> None:
    """At a 1280-px window the cell output is 676 px wide: no panel, legend or widget may be clipped there."""
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        driver.set_window_size(1280, 1000)
        driver.get(page.as_uri())
        wait_drawn(driver, 2)
        outputs = driver.find_elements(By.CSS_SELECTOR, "div.cell_output")
        left, right = driver.execute_script(RECT, outputs[0])[:2]
        assert right - left > 600, f"the content column is {right - left:.0f} px wide at 1280 px"
        parts = ["drift_figure", "panel_k", "panel_tau", "block", "tau", "k", "optimizer", "schedule", "normalize",
                 "level_set_figure"]
        for name in parts:
            box = _view_rect(driver, name)
            assert left - 1 <= box[0] and box[1] <= right + 1, f"{name} spans {box[:2]}, the column {left}..{right}"
        driver.save_screenshot(str(tmp_path / "figures_at_1280px.png"))


def test_a_formula_is_typeset_offline_by_the_shipped_mathjax(page: Path) -> None:
    """With the network off, the page's MathJax (the book's own copy in _static, not a CDN) typesets the formula."""
    scripts = re.findall(r'<script[^>]*\bsrc="([^"]*mathjax[^"]*)"', page.read_text())
    assert scripts == ["../_static/mathjax/tex-chtml.js"], f"MathJax must load from the book, not {scripts}"
    with chromium() as driver:
        driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
        driver.get(page.as_uri())
        typeset = driver.execute_async_script(
            "const done = arguments[0]; (function f(n) { const c = document.querySelectorAll("
            "'div.cell_output mjx-container'); if (c.length) { const b = c[0].getBoundingClientRect();"
            " return done([c.length, b.width, c[0].textContent.includes('\\\\tau')]); }"
            " n > 400 ? done([0, 0, true]) : setTimeout(() => f(n + 1), 25); })(0);"
        )
    count, width, raw = typeset
    assert count >= 1 and width > 50 and not raw, f"formula not typeset offline: {typeset}"
