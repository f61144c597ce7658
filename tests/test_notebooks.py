"""Execute every notebook listed in _toc.yml, top to bottom, at CI scale.

A failure names the notebook and the cell (index and first line) that raised.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]


def toc_files(node: object) -> list[str]:
    """Every ``file:`` entry of a jupyter-book table of contents, in order."""
    if isinstance(node, dict):
        own = [node["file"]] if "file" in node else []
        return own + [f for v in node.values() for f in toc_files(v)]
    if isinstance(node, list):
        return [f for item in node for f in toc_files(item)]
    return []


def toc_notebooks() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    paths = [ROOT / f"{toc['root']}"] + [ROOT / f for f in toc_files(toc.get("chapters", toc.get("parts", [])))]
    return [p.with_suffix(".ipynb") for p in paths if p.with_suffix(".ipynb").exists()]


@pytest.mark.parametrize("path", toc_notebooks(), ids=lambda p: p.name)
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSLAW_SCALE", os.environ.get("CONSLAW_SCALE", "ci"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as err:
        failed = [
            (i, c)
            for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and any(o.get("output_type") == "error" for o in c.get("outputs", []))
        ]
        where = f"cell {failed[0][0]} ({failed[0][1].source.splitlines()[0][:60]!r})" if failed else "a cell"
        pytest.fail(f"{path.relative_to(ROOT)}: {where} raised:\n{err}", pytrace=False)
