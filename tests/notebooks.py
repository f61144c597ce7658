"""Execute the book's notebooks the way the build does, timing every cell.

``make book`` runs ``python -m tests.notebooks``: every chapter of ``_toc.yml`` in its own kernel,
as many at once as there are cores, into the build's jupyter-cache, where Jupyter Book
(``execute_notebooks: cache`` in ``_config.yml``) reads the outputs instead of executing the
chapters one after another. Also used by ``tests/test_notebooks.py`` (every chapter at ``ci``
scale), ``tests/test_book.py`` and ``benchmarks/notebook_stress.py``. The per-cell timeout is
the book's own (``execute.timeout``), so a stalled kernel fails here exactly as it fails the
build: by notebook and cell, never by passing late.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn, JupyterCacheAbstract
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from conslaw_lite.config import scale

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
    return run(path, timeout=timeout)[1]


def run(path: Path, *, timeout: int | None = None) -> tuple[nbformat.NotebookNode, list[float]]:
    """:func:`execute`, also returning the executed notebook (its outputs, for the build's cache)."""
    nb = nbformat.read(path, as_version=4)
    started: dict[int, float] = {}
    times: dict[int, float] = {}
    client = NotebookClient(
        nb,
        timeout=book_cell_timeout() if timeout is None else timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        shutdown_kernel="immediate",  # the outputs are in: a graceful shutdown only waits (0.4 s a chapter)
        record_timing=False,  # cell metadata stays as committed: the cache matches notebooks by a hash of it
        on_cell_execute=lambda cell, cell_index: started.__setitem__(cell_index, time.perf_counter()),
        on_cell_executed=lambda cell, cell_index, execute_reply: times.__setitem__(
            cell_index, time.perf_counter() - started[cell_index]
        ),
    )
    try:
        # The kernel imports this checkout's package, whichever one an editable install points at.
        path_dirs = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        client.execute(env=os.environ | {"PYTHONPATH": os.pathsep.join(path_dirs)})
    except CellTimeoutError as err:
        index = max(started)
        raise NotebookCellError(
            f"{_where(path, index, nb.cells[index].source)} timed out after {client.timeout} s "
            "(a stalled kernel, or a cell slower than the book's per-cell timeout)"
        ) from err
    except CellExecutionError as err:
        index = max(started)
        raise NotebookCellError(f"{_where(path, index, nb.cells[index].source)} raised:\n{err}") from err
    return nb, [times[i] for i in sorted(times)]


def _run_for_cache(path: Path) -> tuple[Path, nbformat.NotebookNode, list[float], float]:
    start = time.perf_counter()
    nb, times = run(path)
    return path, nb, times, time.perf_counter() - start


def _is_cached(cache: JupyterCacheAbstract, path: Path, scale_name: str) -> bool:
    """Whether ``cache`` holds outputs of ``path`` as it is now (same code cells), executed at ``scale_name``."""
    try:
        record = cache.match_cache_notebook(nbformat.read(path, as_version=4))
    except KeyError:
        return False
    return record.data.get("scale") == scale_name


def execute_into_cache(paths: list[Path], cache_dir: Path, jobs: int) -> dict[Path, float]:
    """Execute those of ``paths`` the jupyter-cache at ``cache_dir`` does not hold as they are, ``jobs`` kernels
    at once, and store each executed notebook there; return the wall seconds of each one executed.

    The chapters run longest first (by the seconds the cache recorded last time), so the slowest does
    not start last. The first failure stops the build with :class:`NotebookCellError`, naming the cell.
    """
    cache, scale_name = get_cache(str(cache_dir)), scale().name  # the scale the kernels run at (they inherit it)
    last = {Path(r.uri): r.data.get("execution_seconds", 0.0) for r in cache.list_cache_records()}
    order = sorted([p for p in paths if not _is_cached(cache, p, scale_name)], key=lambda p: -last.get(p, 0.0))
    seconds: dict[Path, float] = {}
    with ProcessPoolExecutor(jobs) as pool:  # a failure cancels the chapters not yet started
        for done in as_completed([pool.submit(_run_for_cache, p) for p in order]):
            path, nb, times, wall = done.result()
            cell_seconds, cell = slowest_cell(path, times)
            print(f"  {wall:6.1f} s  {path.name:24}  (slowest cell {cell_seconds:.1f} s: {cell})", flush=True)
            bundle = CacheBundleIn(nb, str(path), data={"execution_seconds": wall, "scale": scale_name})
            cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
            seconds[path] = wall
    return seconds


def main() -> None:
    """``python -m tests.notebooks --cache DIR [--jobs J]``: what ``make book`` runs before Jupyter Book."""
    parser = argparse.ArgumentParser(description="Execute every chapter of _toc.yml into a jupyter-cache.")
    parser.add_argument("--cache", type=Path, required=True, help="the jupyter-cache folder of _config.yml")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="kernels at once (default: cores)")
    args = parser.parse_args()
    if args.jobs > 1:  # one torch thread per kernel: the kernels themselves fill the cores
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    print(f"Executing the chapters, {args.jobs} at once (seconds, chapter, slowest cell):", flush=True)
    chapters = toc_notebooks()
    try:
        seconds = execute_into_cache(chapters, args.cache, args.jobs)
    except NotebookCellError as err:
        sys.exit(f"make book: {err}")
    print(f"{len(seconds)} chapters executed, {sum(seconds.values()):.0f} s of kernel time in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    if unchanged := len(chapters) - len(seconds):
        print(f"{unchanged} unchanged since they were cached at this scale ('make clean book' executes all)")


if __name__ == "__main__":
    main()
