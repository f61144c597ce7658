"""Benchmark ``find_laws``: ``python benchmarks/find_laws.py [--threads 1]``.

Prints one row per case of issue 18's table: D (parameters), N (the count from
:func:`conslaw_lite.counting.count_laws`), the laws found and whether the list is
complete, the evidence (gap between the kept and the dropped singular values), the seconds
in all and the seconds of the count inside them, and the time to reach; then the laws
as printed. One warm-up run first, so torch.func's one-time imports are not charged.
"""

from __future__ import annotations

import argparse

import torch

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.find_laws import find_laws

CASES = [  # (case, architecture, options, seconds to reach)
    ("toy a·b·x", "toy", ArchOptions(dim=2), None),
    ("ReLU net [4, 6, 3]", "ffn-relu", ArchOptions(dim=4, hidden=6, out=3), 10),
    ("SwiGLU d=4 r=3 m=3", "swiglu", ArchOptions(dim=4, hidden=3, out=3), 10),
    ("MHA n=2 d=4 k=2", "mha", ArchOptions(dim=4, heads=2, head_dim=2), 60),
    ("MoE 3 SwiGLU experts, softmax", "moe-softmax", ArchOptions(experts=3), 60),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: on 2 shared cores, 2 threads oversubscribe them)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    find_laws(get_arch("toy").build(ArchOptions()).model, (1,))  # warm-up
    head = f"{'case':<30} {'D':>4} {'N':>4} {'found':>5} {'complete':>8} {'gap':>8}"
    print(f"{head} {'seconds':>8} {'count s':>8} {'target':>7}")
    printed = []
    for case, arch, options, target in CASES:
        built = get_arch(arch).build(options)
        found = find_laws(built.model, built.input_shape)
        n = found.count.num_laws if found.count.conclusive else "?"
        aim = "—" if target is None else f"< {target} s"
        print(
            f"{case:<30} {found.count.num_params:>4} {n:>4} {found.num_found:>5} {found.complete!s:>8} "
            f"{found.gap:>8.0e} {found.seconds:>8.2f} {found.count.seconds:>8.2f} {aim:>7}",
            flush=True,
        )
        printed.append((case, found))
    for case, found in printed:
        print(f"\n{case}: {found}")


if __name__ == "__main__":
    main()
