"""Execute every notebook of ``_toc.yml`` R times and report stalls: ``python benchmarks/notebook_stress.py``.

Per notebook it prints the min, median and max wall time over ``--repeats`` fresh-kernel
runs, max/median, and the number of stalls (a run over 3× the median: a kernel that sat
idle, as ipykernel 7.x does when it misses a request). ``--slowest-cell`` adds each
notebook's slowest cell (seconds, then which cell), and at the end the slowest cells of the
whole book against the per-cell timeout (``execute.timeout`` in ``_config.yml``):
``tests/test_notebooks.py`` fails a chapter whose slowest cell at ``ci`` scale takes more
than a tenth of it.

Options: ``--repeats 5`` (R), ``--scale ci`` (the ``CONSLAW_SCALE`` to run at),
``--only 04_attention`` (a substring of the notebooks to run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.notebooks

from tests.notebooks import book_cell_timeout, execute, slowest_cell, toc_notebooks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scale", default="ci", choices=("ci", "cpu", "gpu"))
    parser.add_argument("--only", default="")
    parser.add_argument("--slowest-cell", action="store_true")
    args = parser.parse_args()
    os.environ.update(CONSLAW_SCALE=args.scale, MPLBACKEND="Agg")
    if args.scale == "ci":  # as tests/test_notebooks.py runs them: one torch thread per kernel
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"scale={args.scale}, R={args.repeats}, per-cell timeout {book_cell_timeout()} s", flush=True)
    header = ["notebook", "min s", "median", "max s", "max/med", "stalls"] + (["slowest"] if args.slowest_cell else [])
    print(f"{header[0]:26} " + " ".join(f"{h:>7}" for h in header[1:]))
    total_stalls, worst_ratio, t0 = 0, 0.0, time.perf_counter()
    slow_cells: list[tuple[float, str]] = []
    for path in [p for p in toc_notebooks() if args.only in p.name]:
        runs = [execute(path) for _ in range(args.repeats)]
        walls = [sum(cells) for cells in runs]
        median = statistics.median(walls)
        stalls = sum(w > 3 * median for w in walls)
        slowest, where = max(slowest_cell(path, cells) for cells in runs)
        slow_cells.append((slowest, where))
        total_stalls, worst_ratio = total_stalls + stalls, max(worst_ratio, max(walls) / median)
        row = [min(walls), median, max(walls), max(walls) / median, stalls] + ([slowest] if args.slowest_cell else [])
        cells = " ".join(f"{v:7.2f}" if isinstance(v, float) else f"{v:7d}" for v in row)
        print(f"{path.name:26} {cells}" + (f"  {where.split(': ', 1)[1]}" if args.slowest_cell else ""), flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s; stalls: {total_stalls}; worst max/median: {worst_ratio:.2f}")
    if args.slowest_cell:
        print(f"slowest cells (the per-cell timeout is {book_cell_timeout()} s; ci scale must stay under a tenth):")
        for seconds, where in sorted(slow_cells, reverse=True)[:5]:
            print(f"  {seconds:7.2f} s  {where}")


if __name__ == "__main__":
    main()
