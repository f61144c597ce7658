"""Benchmark the symbolic derivation: ``python benchmarks/symbolic_derive.py [--size small|large|both] [CASE ...]``.

Prints one row per case of :func:`conslaw_lite.symbolic.cases.case_names`: D (parameters), the
number of x-free equations, N from the exact Lie rank, the theory's formula, whether the two
exact bounds met, and the CPU seconds :func:`conslaw_lite.symbolic.derive` took, the whole
chain included (target: under 60 s per case on one core).
"""

from __future__ import annotations

import argparse
import time

import torch

from conslaw_lite.symbolic.cases import case, case_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = case_names()
    parser.add_argument("cases", nargs="*", default=list(names), help=f"among {', '.join(names)}")
    parser.add_argument("--size", choices=["small", "large", "both"], default="both")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sizes = ["small", "large"] if args.size == "both" else [args.size]
    print(f"{'case':16s} {'size':6s} {'D':>4s} {'eqs':>5s} {'N':>4s}  {'theory':28s} {'certified':9s} {'CPU s':>7s}")
    for size in sizes:
        for name in args.cases:
            c = case(name, size)
            start = time.process_time()
            derived = c.block.derive()
            seconds = time.process_time() - start
            D, N = len(derived.params), derived.num_laws
            print(f"{name:16s} {size:6s} {D:4d} {len(derived.relations):5d} {N!s:>4s}  {c.formula_text:28s} "
                  f"{N is not None!s:9s} {seconds:7.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
