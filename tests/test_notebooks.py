"""Execute every notebook listed in _toc.yml, top to bottom, at CI scale.

A failure names the notebook and the cell (index and first line) that raised or timed out.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.notebooks import NotebookCellError, execute, toc_notebooks


@pytest.mark.parametrize("path", toc_notebooks(), ids=lambda p: p.name)
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSLAW_SCALE", os.environ.get("CONSLAW_SCALE", "ci"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    try:
        execute(path)
    except NotebookCellError as err:
        pytest.fail(str(err), pytrace=False)
