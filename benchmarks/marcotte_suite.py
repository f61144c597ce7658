"""Marcotte et al.'s benchmark: ``python benchmarks/marcotte_suite.py [--threads 2] [--out FILE]``.

Counts the laws of 50 random linear networks (depth 2–4, widths 2–5) and 50
random ReLU networks (depth 2–4, widths 2–9, no biases), drawn from ``--seed``,
with :func:`conslaw_lite.counting.count_laws`, and checks each count against an
independent one (:mod:`conslaw_lite.marcotte`: the rank of the balancedness laws'
Jacobian for linear nets, one law per hidden unit for ReLU nets). Prints one row
per network, the failures, and the total time (wall clock, and the processor
time of the counts: on a shared machine the wall clock measures the other users); writes the rows, the totals and
how they were made (threads, torch version, machine) to ``--out`` as JSON. The
committed ``benchmarks/marcotte_suite.json`` is what chapter 2 shows.

Reference: Marcotte et al.'s SageMath notebook took 34 min (linear) and
1 h 53 min (ReLU) for their 50 + 50 networks, with 64 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from conslaw_lite.marcotte import random_widths, run_case

OUT = Path(__file__).with_name("marcotte_suite.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: processor time = idle wall time)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=50, help="networks of each kind")
    parser.add_argument("--out", type=Path, default=OUT, help="JSON file for the results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run_case("linear", (2, 2, 2))  # warm-up: torch.func's one-time set-up is not charged to the first network
    cases = [("linear", w) for w in random_widths("linear", args.count, args.seed)]
    cases += [("relu", w) for w in random_widths("relu", args.count, args.seed + 1)]
    print(
        f"{'kind':<7} {'widths':<18} {'D':>4} {'N':>4} {'ref':>4} {'right':>6} {'θ skipped':>9} "
        f"{'seconds':>8} {'CPU s':>6}"
    )
    rows, start = [], time.perf_counter()
    for kind, widths in cases:
        r = run_case(kind, widths, args.seed)
        rows.append(r.to_dict())
        print(
            f"{kind:<7} {str(list(widths)):<18} {r.num_params:>4} {str(r.counted):>4} {r.reference:>4} "
            f"{str(r.right):>6} {r.skipped:>9} {r.seconds:>8.2f} {r.cpu_seconds:>6.2f}"
        )
    total = time.perf_counter() - start
    failures = [r for r in rows if not r["right"]]
    cpu = {kind: sum(r["cpu_seconds"] for r in rows if r["kind"] == kind) for kind in ("linear", "relu")}
    print(
        f"\nright: {len(rows) - len(failures)} / {len(rows)}; wall-clock {total:.1f} s with {args.threads} threads; "
        f"count_laws' processor time: linear {cpu['linear']:.1f} s, ReLU {cpu['relu']:.1f} s"
    )
    for r in failures:
        print(f"FAILED {r['kind']} {r['widths']}: counted {r['counted']}, reference {r['reference']} {r['reason']}")
    made = {
        "command": f"python benchmarks/marcotte_suite.py --threads {args.threads} --seed {args.seed}",
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.write_text(
        json.dumps({"made": made, "total_seconds": total, "cpu_seconds": cpu, "rows": rows}, indent=1) + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
