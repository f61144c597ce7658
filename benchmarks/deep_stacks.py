"""The deep-stack sweep: ``python benchmarks/deep_stacks.py [--random 6] [--high 8] [--out FILE]``.

Counts the laws of ReLU, GELU and SwiGLU stacks of depth 2–4 (:class:`conslaw_lite.families.deep.DeepFFN`)
with :func:`conslaw_lite.counting.count_laws`: for each kind and depth, every uniform hidden width
1..``--high`` (d = 3, m = 2) and ``--random`` shapes with every width uniform in 1..``--high``
(:func:`conslaw_lite.families.deep.sweep.random_widths`, from ``--seed``). Each count is held against the
conjecture (:func:`conslaw_lite.families.deep.laws.formula`: Σ_l r_l for ReLU and SwiGLU, 0 for GELU) and
the conjectured laws against the count (``check_laws``). Prints one row per stack, the disagreements and
the inconclusive counts (no clear singular-value gap: no number, so no evidence either way);
writes the rows and how they were made (command, threads, torch, machine, date) to ``--out`` as JSON.
The committed ``benchmarks/deep_stacks.json`` is what chapter 16 loads for the sizes it does not count live.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from conslaw_lite.families.deep.sweep import DEPTHS, KINDS, count_case, random_widths

OUT = Path(__file__).with_name("deep_stacks.json")
D, M = 3, 2  # input and output widths of the uniform stacks


def shapes(depth: int, high: int, n_random: int, seed: int) -> list[tuple[int, ...]]:
    """The uniform stacks ``(3, r, …, r, 2)``, r = 1..high, then ``n_random`` random shapes."""
    uniform = [(D, *[r] * depth, M) for r in range(1, high + 1)]
    return uniform + random_widths(depth, n_random, low=1, high=high, seed=seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random", type=int, default=6, help="random shapes per kind and depth")
    parser.add_argument("--high", type=int, default=8, help="largest width")
    parser.add_argument("--out", type=Path, default=OUT, help="JSON file for the results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start, rows = time.perf_counter(), []
    for kind in KINDS:
        for depth in DEPTHS:
            for widths in shapes(depth, args.high, args.random, args.seed):
                row = count_case(kind, widths, seed=args.seed)
                rows.append(row.to_dict())
                verdict = "ok" if row.agrees else ("DISAGREES" if row.counted is not None else "inconclusive")
                print(f"{kind:7s} {str(widths):28s} D={row.num_params:4d} N={row.counted} conjecture={row.formula} "
                      f"{verdict} {row.seconds:.1f}s {row.reason}", flush=True)  # fmt: skip
    bad = [r for r in rows if r["counted"] is not None and not r["agrees"]]
    unknown = [r for r in rows if r["counted"] is None]
    total = time.perf_counter() - start
    print(f"{len(rows)} stacks: {len(bad)} disagree with the conjecture, {len(unknown)} inconclusive; {total:.0f} s")
    made = {
        "command": "python benchmarks/deep_stacks.py " + " ".join(sys.argv[1:]),
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.write_text(json.dumps({"made": made, "total_seconds": total, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
