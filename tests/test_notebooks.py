"""Execute every notebook listed in _toc.yml, top to bottom, at CI scale, and time every cell.

A failure names the notebook and the cell (index and first line) that raised, timed out, or ran
past a tenth of the book's per-cell timeout: the timeout keeps a 10× margin over the slowest cell.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebooks import NotebookCellError, book_cell_timeout, execute, slowest_cell, toc_notebooks

MARGIN = 10  # the book's per-cell timeout is at least this many times the slowest cell at ci scale
pytestmark = pytest.mark.slow  # a fresh kernel per chapter: `pytest -m 'not slow'` is the unit suite alone


@pytest.mark.parametrize("path", toc_notebooks(), ids=lambda p: p.name)
def test_notebook_executes_with_a_tenfold_margin_under_the_timeout(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSLAW_SCALE", os.environ.get("CONSLAW_SCALE", "ci"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # One torch thread per kernel (read by torch at import): the ci models are tiny, and CI shares two cores with
    # other jobs, where two threads spinning on each small op ran a 2 s count for minutes.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    try:
        times = execute(path)
    except NotebookCellError as err:
        pytest.fail(str(err), pytrace=False)
    seconds, cell = slowest_cell(path, times)
    budget = book_cell_timeout() / MARGIN
    assert seconds <= budget, (
        f"{cell} took {seconds:.1f} s, more than a tenth of the per-cell timeout ({budget:.0f} s of "
        f"{book_cell_timeout()} s in _config.yml): make its ci size smaller (conslaw_lite.scale())"
    )
