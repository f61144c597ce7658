"""The early-warning figure: it embeds every swept τ, and in a browser its slider switches between them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conslaw_lite import mse_loss
from conslaw_lite.early_warning import sweep
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.warning_figure import warning_figure
from conslaw_lite.widgets import to_html

ONE = torch.ones(1, 1, dtype=torch.float64)
TAUS = [0.5, 1.0, 1.85]


def _points():
    return sweep(lambda seed: (ToyProduct(a=1.0, b=0.5), mse_loss(ONE, ONE)), TAUS, steps=30)


def test_every_swept_run_is_embedded_in_the_page() -> None:
    points = _points()
    html = to_html(warning_figure({"toy": points}), with_js=False)
    assert all(f"{p.lr}" in html for p in points) and "warning_figure" in html


def test_an_empty_sweep_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        warning_figure({"toy": []})


@pytest.mark.slow  # a headless browser
def test_the_slider_switches_to_each_precomputed_run(tmp_path: Path) -> None:
    from tests.test_drift_figure_browser import MODEL, _source, chromium, wait_drawn

    points = _points()
    page = tmp_path / "warning.html"
    page.write_text(f"<html><body>{to_html(warning_figure({'toy': points}))}</body></html>")
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_drawn(driver, 1)
        for i, point in reversed(list(enumerate(points))):  # the figure starts at the last τ
            if i < len(points) - 1:
                driver.execute_script(MODEL + " m.value = arguments[1];", "warning_tau", i)
            drawn = _source(driver, "drift")
            expected = np.where(np.isfinite(point.ratio) & (point.ratio > 0), point.ratio, np.nan)
            got = np.array([np.nan if v is None else v for v in drawn["y"]], dtype=float)
            assert drawn["x"] == point.steps.tolist() and np.allclose(got, expected, equal_nan=True), (i, drawn)
