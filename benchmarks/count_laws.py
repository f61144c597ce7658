"""Benchmark the law counter: ``python benchmarks/count_laws.py [--threads 2] [--quick] [--large] [--whole]``.

``--mlp 2000 20000 50000 [--device cuda]`` counts ReLU MLPs of about those sizes instead (20-50-20,
50-200-50, 100-250-100; N = the hidden width), each in its own process, and prints D, N, the seconds, the
peak memory (resident set on a CPU, ``torch.cuda.max_memory_allocated`` on a GPU) and the estimate the
counter made before starting; a count that would not fit is refused at once, with its estimate.

Prints one row per case: D (parameters), N (the computed count), the formula it
is checked against, the evidence (smallest kept / largest dropped singular
value, and whether they are the stacked vectors' spectrum or, above 4,096 parameters,
the orthogonalization's residuals) and the seconds :func:`conslaw_lite.counting.count_laws` took (two random
θ, all bracket depths). One warm-up count runs first, so the one-time import of
``torch.func``'s machinery is not charged to the first case.

``--large`` adds multi-head attention with n = 8, d = 32, k = 8 (D = 8,192);
``--whole`` adds whole small networks: a one-block timm ViT (at LayerNorm ε = 0.1 and timm's 10⁻⁶) and a two-block
pre-norm transformer with embeddings, each compared with the laws
:func:`conslaw_lite.laws.law_functions` knows (independent entries, and whether
they are all conserved and as many as the count). ``benchmarks/marcotte_suite.py``
runs Marcotte et al.'s random linear and ReLU networks.

Reference (chapter 2): the SageMath counter of Marcotte et al. (2023) took
11 s for the linear net [4,4,4] and 543 s for the ReLU net [4,6,3].
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time

import torch
from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.laws import law_functions

CASES = [  # (case, architecture, options)
    ("toy a·b·x", "toy", ArchOptions(dim=2)),
    ("toy a·b·c·x", "toy", ArchOptions(dim=3)),
    ("linear net [4,4,4]", "ffn-linear", ArchOptions(dim=4, hidden=4, out=4)),
    ("ReLU net [4,6,3]", "ffn-relu", ArchOptions(dim=4, hidden=6, out=3)),
    ("MHA n=2 d=5 k=4", "mha", ArchOptions(dim=5, heads=2, head_dim=4)),
    ("MHA+RoPE n=2 d=5 k=4", "mha-rope", ArchOptions(dim=5, heads=2, head_dim=4)),
    ("GQA+RoPE 4 on 2, d=5 k=4", "gqa-rope", ArchOptions(dim=5, heads=2, head_dim=4)),
    ("linear attn n=2 d=5 k=3", "linear-attention", ArchOptions(dim=5, heads=2, head_dim=3)),
]
LARGE = ("MHA n=4 d=16 k=8 T=4", "mha", ArchOptions(dim=16, heads=4, head_dim=8, seq=4))  # D = 2048
GQA_LARGE = ("GQA+RoPE 6 on 3, d=20 k=6", "gqa-rope", ArchOptions(dim=20, heads=3, head_dim=6, seq=4))  # D = 2160
LARGER = ("MHA n=8 d=32 k=8", "mha", ArchOptions(dim=32, heads=8, head_dim=8))  # D = 8192


def whole_networks() -> list[tuple[str, nn.Module, tuple[int, ...]]]:
    """(case, model, input shape): a one-block timm ViT at two LayerNorm ε, a two-block transformer with embeddings.

    At timm's ε = 10⁻⁶ the ViT is 10⁻⁶ away from ε = 0, where the stream's scale is a symmetry too
    (two more laws): the directions that tell the two apart are that small, and the counter may say so.
    """
    from conslaw_lite.models.tiny import TinyTransformer
    from conslaw_lite.models.vit import embeddings_at_weight_scale, small_vit  # timm is optional

    cases = []
    for eps in (0.1, 1e-6):
        with torch.random.fork_rng():  # seeded weights (only their scale matters) without touching the caller's state
            torch.manual_seed(0)
            vit = small_vit(img_size=4, patch_size=2, dim=4, depth=1, num_classes=10, num_heads=2, norm_eps=eps)
            embeddings_at_weight_scale(vit.double())  # timm's own scales sit beside a degenerate point
        cases.append((f"timm ViT, 1 block, ε={eps:g}", vit, (1, 4, 4)))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        two_block = TinyTransformer(vocab=8, d=8, n_heads=2, head_dim=4, hidden=8, n_layers=2).double()
    return [*cases, ("transformer, 2 blocks", two_block, (3, 8))]


MLPS = {2000: (20, 50, 20), 20000: (50, 200, 50), 50000: (100, 250, 100), 100000: (200, 250, 200)}


def count_mlp(widths: tuple[int, int, int], device: str, threads: int) -> dict:
    """Count a bias-free ReLU MLP ``widths`` on ``device`` here: D, N, seconds, peak bytes, or the refusal."""
    from conslaw_lite.counting import TooLarge

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    d, r, m = widths
    model = nn.Sequential(nn.Linear(d, r, bias=False), nn.ReLU(), nn.Linear(r, m, bias=False))
    D = d * r + r * m
    start = time.perf_counter()
    try:
        count = count_laws(model, (d,), device=device, progress=True)
    except TooLarge as err:
        return {"D": D, "refused": str(err), "seconds": time.perf_counter() - start, "peak": _peak(device)}
    n = count.num_laws if count.conclusive else f"? ({count.reason})"
    gap = f"{count.sigma_kept:.1e} / {count.sigma_dropped:.1e} ({count.evidence})"
    return {"D": D, "N": n, "expected": r, "seconds": count.seconds, "peak": _peak(device),
            "estimate": count.estimated.short(), "gap": gap}  # fmt: skip


def _peak(device: str) -> float:
    """Peak bytes: the GPU's allocator on cuda, the process's resident set on the CPU (Linux: ru_maxrss in kB)."""
    if device.startswith("cuda"):
        return float(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0


def mlp_rows(sizes: list[int], device: str, threads: int) -> list[dict]:
    """One row per MLP size, each counted in a fresh process (its own peak memory), printed and returned."""
    rows = []
    print(f"{'MLP':<14} {'D':>7} {'N':>5} {'expected':>8} {'seconds':>8} {'peak GB':>8}  estimate / evidence")
    for size in sizes:
        widths = MLPS[size]
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            row = pool.apply(count_mlp, (widths, device, threads))
        rows.append({"widths": widths, "device": device, **row})
        name = "-".join(map(str, widths))
        if "refused" in row:
            print(f"{name:<14} {row['D']:>7} {'—':>5} {widths[1]:>8} {row['seconds']:>8.2f} {row['peak'] / 1e9:>8.2f}"
                  f"  refused: {row['refused']}", flush=True)  # fmt: skip
            continue
        print(f"{name:<14} {row['D']:>7} {row['N']!s:>5} {row['expected']:>8} {row['seconds']:>8.1f} "
              f"{row['peak'] / 1e9:>8.2f}  est. {row['estimate']}; σ kept / dropped {row['gap']}",
              flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--quick", action="store_true", help="skip the D ≥ 2000 attention blocks")
    parser.add_argument("--large", action="store_true", help="add the D = 8192 attention block")
    parser.add_argument("--whole", action="store_true", help="add the whole small networks")
    parser.add_argument("--mlp", type=int, nargs="*", choices=sorted(MLPS), help="count ReLU MLPs of these sizes")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (float64 on either)")
    args = parser.parse_args()
    if args.mlp:
        mlp_rows(args.mlp, args.device, args.threads)
        return
    torch.set_num_threads(args.threads)
    count_laws(get_arch("toy").build(ArchOptions()).model, (1,))  # warm-up
    print(f"{'case':<28} {'D':>5} {'N':>5} {'formula':>7} {'σ kept':>9} {'σ dropped':>9} {'seconds':>8}  evidence")
    for case, arch, options in CASES + ([] if args.quick else [LARGE, GQA_LARGE]) + ([LARGER] if args.large else []):
        built = get_arch(arch).build(options)
        count = count_laws(built.model, built.input_shape, device=args.device)
        n = count.num_laws if count.conclusive else "?"
        print(
            f"{case:<28} {count.num_params:>5} {n:>5} {built.formula:>7} "
            f"{count.sigma_kept:>9.1e} {count.sigma_dropped:>9.1e} {count.seconds:>8.2f}  {count.evidence}"
        )

    for case, model, input_shape in whole_networks() if args.whole else []:
        check = check_laws(model, law_functions(model), input_shape)
        count = check.count
        n = count.num_laws if count.conclusive else f"? ({count.reason})"
        print(
            f"{case:<28} {count.num_params:>5} {n:>5} {check.independent:>7} {count.sigma_kept:>9.1e} "
            f"{count.sigma_dropped:>9.1e} {count.seconds:>8.2f}   complete: {check.complete}, "
            f"ranks by depth {count.ranks_by_depth}"
        )


if __name__ == "__main__":
    main()
