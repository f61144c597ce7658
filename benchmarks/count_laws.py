"""Benchmark the law counter: ``python benchmarks/count_laws.py [--threads 2] [--quick]``.

Prints one row per case: D (parameters), N (the computed count), the formula it
is checked against, the evidence (smallest kept / largest dropped singular
value) and the seconds :func:`conslaw_lite.counting.count_laws` took (two random
θ, all bracket depths). One warm-up count runs first, so the one-time import of
``torch.func``'s machinery is not charged to the first case.

Reference (THEORY.md §3): the SageMath counter of Marcotte et al. (2023) took
11 s for the linear net [4,4,4] and 543 s for the ReLU net [4,6,3].
"""

from __future__ import annotations

import argparse

import torch

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.counting import count_laws

CASES = [  # (case, architecture, options)
    ("toy a·b·x", "toy", ArchOptions(dim=2)),
    ("toy a·b·c·x", "toy", ArchOptions(dim=3)),
    ("linear net [4,4,4]", "ffn-linear", ArchOptions(dim=4, hidden=4, out=4)),
    ("ReLU net [4,6,3]", "ffn-relu", ArchOptions(dim=4, hidden=6, out=3)),
    ("MHA n=2 d=5 k=4", "mha", ArchOptions(dim=5, heads=2, head_dim=4)),
    ("MHA+RoPE n=2 d=5 k=4", "mha-rope", ArchOptions(dim=5, heads=2, head_dim=4)),
]
LARGE = ("MHA n=4 d=16 k=8 T=4", "mha", ArchOptions(dim=16, heads=4, head_dim=8, seq=4))  # D = 2048


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--quick", action="store_true", help="skip the D ≥ 2000 attention block")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    count_laws(get_arch("toy").build(ArchOptions()).model, (1,))  # warm-up
    print(f"{'case':<24} {'D':>5} {'N':>5} {'formula':>7} {'σ kept':>9} {'σ dropped':>9} {'seconds':>8}")
    for case, arch, options in CASES + ([] if args.quick else [LARGE]):
        built = get_arch(arch).build(options)
        count = count_laws(built.model, built.input_shape)
        n = count.num_laws if count.conclusive else "?"
        print(
            f"{case:<24} {count.num_params:>5} {n:>5} {built.formula:>7} "
            f"{count.sigma_kept:>9.1e} {count.sigma_dropped:>9.1e} {count.seconds:>8.2f}"
        )


if __name__ == "__main__":
    main()
