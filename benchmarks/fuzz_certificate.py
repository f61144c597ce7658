"""Fuzz the certificate: random small modules, each count graded against an independent oracle (issue 26).

    python benchmarks/fuzz_certificate.py --cases 300 --seed 0 --jobs 2 --json fuzz.json [--complement]

Prints one row per family (right / inconclusive / refused / wrong-but-conclusive / oracle-undecided / error),
every wrong-but-conclusive case with its evidence, and the summary line. Exit status 1 when a count was wrong.
The cases are those of ``conslaw_lite.fuzz.make_case(seed · 100000 + i)``, i < N: the same on every machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conslaw_lite.fuzz import FAMILIES, make_case  # noqa: E402
from conslaw_lite.fuzz_oracle import OUTCOMES, CaseResult, run_case  # noqa: E402

COLUMNS = {"right": "right", "inconclusive": "inconcl.", "refused": "refused", "wrong": "WRONG",
           "undecided": "undecided", "error": "error", "oracle-error": "orac.err"}  # fmt: skip


def _one(args: tuple[int, str | None]) -> CaseResult:
    torch.set_num_threads(1)  # one case a process: the pool's processes share the cores
    seed, family = args
    return run_case(make_case(seed, family))


def table(results: list[CaseResult]) -> str:
    """Outcomes per family, with the mean seconds a case (counter + oracle)."""
    lines = [f"{'family':<10} {'cases':>5} " + " ".join(f"{c:>9}" for c in COLUMNS.values()) + "   s/case"]
    for family in [*FAMILIES, "all"]:
        rows = [r for r in results if family in ("all", r.family)]
        if not rows:
            continue
        n = Counter(r.outcome for r in rows)
        seconds = sum(r.counter_seconds + r.oracle_seconds for r in rows) / len(rows)
        lines.append(f"{family:<10} {len(rows):>5} " + " ".join(f"{n[o]:>9}" for o in OUTCOMES) + f"   {seconds:6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--family", choices=list(FAMILIES), default=None, help="only this family")
    parser.add_argument("--jobs", type=int, default=2, help="processes (one case each at a time)")
    parser.add_argument("--json", type=Path, default=None, help="write every case's result here")
    parser.add_argument("--complement", action="store_true",
                        help="count every case through the complement (the path above 8,192 parameters)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.complement:
        from conslaw_lite.counting import count

        count.COMPLEMENT_MIN_D = 0  # the pool's processes are forked: they inherit it
    start = time.perf_counter()
    work = [(args.seed * 100_000 + i, args.family) for i in range(args.cases)]
    results = []
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for r in pool.imap_unordered(_one, work):  # one line a case as it ends: a partial run still tells
            results.append(r)
            seconds = r.counter_seconds + r.oracle_seconds
            print(f"[{len(results)}/{len(work)}] seed {r.seed} {r.family}: {r.outcome} counted {r.counted} "
                  f"oracle [{r.lower}, {r.upper}] {seconds:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    results.sort(key=lambda r: r.seed)
    wall = time.perf_counter() - start
    print(table(results))
    for r in results:
        if r.outcome in ("wrong", "error", "oracle-error"):
            bounds = "must refuse" if r.lower is None else f"oracle N ∈ [{r.lower}, {r.upper}]"
            print(f"{r.outcome.upper()} seed {r.seed}: {r.description} (D = {r.num_params}): counted {r.counted}, "
                  f"{bounds}; {r.reason}")  # fmt: skip
    n = Counter(r.outcome for r in results)
    print(f"cases {len(results)}, right {n['right']}, inconclusive {n['inconclusive']}, refused {n['refused']}, "
          f"wrong-but-conclusive {n['wrong']} (must be 0), oracle-undecided {n['undecided']}, error {n['error']}, "
          f"oracle-error {n['oracle-error']}, "
          f"time {wall:.0f} s ({wall / max(len(results), 1):.2f} s a case, {args.jobs} processes)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "seconds": wall,
                                         "results": [asdict(r) for r in results]}, indent=1))  # fmt: skip
    return 1 if n["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
