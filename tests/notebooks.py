"""Execute the book's notebooks the way the build does, timing every cell.

Used by ``tests/test_notebooks.py`` (every chapter at ``ci`` scale), ``tests/test_book.py``
and ``benchmarks/notebook_stress.py``. The per-cell timeout is the book's own
(``execute.timeout`` in ``_config.yml``), so a stalled kernel fails here exactly as it
fails ``make book``: by notebook and cell, never by passing late.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

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
    """The notebooks of ``_toc.yml``, in reading order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    paths = [ROOT / f"{toc['root']}"] + [ROOT / f for f in toc_files(toc.get("chapters", toc.get("parts", [])))]
    return [p.with_suffix(".ipynb") for p in paths if p.with_suffix(".ipynb").exists()]


def book_cell_timeout() -> int:
    """The per-cell timeout of the book build, in seconds (``execute.timeout`` in ``_config.yml``)."""
    return int(yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"])


class NotebookCellError(RuntimeError):
    """A cell raised or timed out; the message names the notebook and the cell."""


def _where(path: Path, index: int, source: str) -> str:
    first = source.strip().splitlines()[0][:60] if source.strip() else ""
    return f"{path.name}: cell {index} ({first!r})"


def slowest_cell(path: Path, times: list[float]) -> tuple[float, str]:
    """The slowest code cell of a run of ``path`` (``times`` from :func:`execute`): its seconds and its name."""
    cells = nbformat.read(path, as_version=4).cells
    code = [i for i, cell in enumerate(cells) if cell.cell_type == "code"]
    if not times:
        return 0.0, f"{path.name}: no code cell"
    seconds, index = max(zip(times, code))
    return seconds, _where(path, index, cells[index].source)


def execute(path: Path, *, timeout: int | None = None) -> list[float]:
    """Execute ``path`` top to bottom in a fresh kernel; return each code cell's wall time in seconds.

    The environment (``CONSLAW_SCALE``, ``MPLBACKEND``) is the caller's. Raises
    :class:`NotebookCellError` naming the notebook and the cell when one raises or runs
    past ``timeout`` seconds (default: the book's).
    """
    nb = nbformat.read(path, as_version=4)
    started: dict[int, float] = {}
    times: dict[int, float] = {}
    client = NotebookClient(
        nb,
        timeout=book_cell_timeout() if timeout is None else timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_execute=lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter()),
        on_cell_executed=lambda cell, cell_index, execute_reply: times.__setitem__(
            cell_index, time.perf_counter() - started[cell_index]
        ),
    )
    try:
        client.execute()
    except CellTimeoutError as err:
        index = max(started)
        raise NotebookCellError(
            f"{_where(path, index, nb.cells[index].source)} timed out after {client.timeout} s "
            "(a stalled kernel, or a cell slower than the book's per-cell timeout)"
        ) from err
    except CellExecutionError as err:
        index = max(started)
        raise NotebookCellError(f"{_where(path, index, nb.cells[index].source)} raised:\n{err}") from err
    return [times[i] for i in sorted(times)]
