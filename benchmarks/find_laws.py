"""Benchmark ``find_laws``: ``python benchmarks/find_laws.py [--threads 1]``.

Prints one row per case of issue 18's table: D (parameters), N (the count from
:func:`conslaw_lite.counting.count_laws`), the laws found and whether the list is
complete, the evidence (gap between the kept and the dropped singular values), the seconds
in all and the seconds of the count inside them, and the time to reach; then the laws
as printed. One warm-up run first, so torch.func's one-time imports are not charged.

Then issue 27's MLPs, searched per hidden unit: 8-16-4 with biases (D = 212, N = 16), and with ``--large``
the 32-64-16 ReLU MLP without biases (D = 3,072, N = 64; target < 60 s on 2 cores). With ``--attention``, attention
as users write it (:mod:`conslaw_lite.models.user_attention`): q, k, v in one ``c_attn`` split after it and
``nn.MultiheadAttention``, d = 8 with 2 heads (N = 48); Llama's grouped-query attention, 2 query heads on 1 K/V head
(N = 20), the same with one ``qkv_proj`` (Phi-3), 2 heads under RoPE (N = 24); then ``c_attn`` at d = 16 (N = 160)
and grouped-query attention of 4 heads on 2, without and with RoPE (N = 40, 24); with ``--large`` too, ``c_attn`` at
d = 32 with 4 heads and no biases (D = 4,096, N = 288; minutes). With ``--conv``, two ReLU convolutional nets whose
hidden channels' slices are over 96 coordinates (D = 420, N = 4; D = 898, N = 16), and a ResNet basic block with
BatchNorm in eval mode (D = 441, N = 16, 4 of them across four layers of the residual stream: in no slice; the search
of the sums of squares of all of θ finds them).
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.find_laws import find_laws
from conslaw_lite.models.user_attention import GroupedAttention, SplitAttention, TorchSelfAttention

CASES = [  # (case, architecture, options, seconds to reach)
    ("toy a·b·x", "toy", ArchOptions(dim=2), None),
    ("ReLU net [4, 6, 3]", "ffn-relu", ArchOptions(dim=4, hidden=6, out=3), 10),
    ("SwiGLU d=4 r=3 m=3", "swiglu", ArchOptions(dim=4, hidden=3, out=3), 10),
    ("MHA n=2 d=4 k=2", "mha", ArchOptions(dim=4, heads=2, head_dim=2), 60),
    ("MoE 3 SwiGLU experts, softmax", "moe-softmax", ArchOptions(experts=3), 60),
]


MLPS = [("MLP 8-16-4, biases", (8, 16, 4), True, None)]
LARGE_MLP = ("MLP 32-64-16", (32, 64, 16), False, 60)
ATTENTION = [  # (case, module, d)
    ("c_attn split, d=8 h=2", partial(SplitAttention, 8, 2), 8),
    ("nn.MultiheadAttention d=8 h=2", partial(TorchSelfAttention, 8, 2), 8),
    ("GQA 2 on 1, d=8", partial(GroupedAttention, 8, 2, 1), 8),
    ("GQA 2 on 1, one qkv_proj, d=8", partial(GroupedAttention, 8, 2, 1, fused=True), 8),
    ("RoPE h=2, d=8", partial(GroupedAttention, 8, 2, 2, rope=True), 8),
    ("c_attn split, d=16 h=2", partial(SplitAttention, 16, 2), 16),
    ("GQA 4 on 2, d=16", partial(GroupedAttention, 16, 4, 2), 16),
    ("GQA 4 on 2 + RoPE, d=16", partial(GroupedAttention, 16, 4, 2, rope=True), 16),
]
LARGE_ATTENTION = ("c_attn split, d=32 h=4", partial(SplitAttention, 32, 4, bias=False), 32)
CONV = [  # (case, layers, one input's shape): a hidden channel's slice over 96 coordinates, searched on its squares
    ("Conv1d 4-4-16, k=5", lambda: [nn.Conv1d(4, 4, 5), nn.ReLU(), nn.Conv1d(4, 16, 5), nn.Flatten()], (4, 9)),
    (
        "Conv2d 3-8-8, pool, Linear",
        lambda: [
            nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
        ],  # fmt: skip
        (3, 8, 8),
    ),
    (  # 16 laws, 4 of them across the residual stream (conv0, conv1, bn2, fc): in no slice, in the sums of squares
        "ResNet block, BatchNorm eval",
        lambda: [
            nn.Conv2d(3, 4, 3, padding=1), ResidualBlock(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5),
        ],  # fmt: skip
        (3, 6, 6),
    ),
]


class ResidualBlock(nn.Module):
    """``relu(x + bn2(conv2(relu(bn1(conv1(x))))))``, ResNet's basic block, its BatchNorms in eval mode."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def relu_mlp(widths: tuple[int, ...], bias: bool) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for d_in, d_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(d_in, d_out, bias=bias), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: on 2 shared cores, 2 threads oversubscribe them)"
    )
    parser.add_argument("--large", action="store_true", help="add the 32-64-16 MLP (D = 3,072)")
    parser.add_argument("--attention", action="store_true", help="add attention with q, k, v in one matrix")
    parser.add_argument("--conv", action="store_true", help="add two ReLU convolutional nets and a ResNet block")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    find_laws(get_arch("toy").build(ArchOptions()).model, (1,))  # warm-up
    head = f"{'case':<30} {'D':>4} {'N':>4} {'found':>5} {'complete':>8} {'gap':>8}"
    print(f"{head} {'seconds':>8} {'count s':>8} {'target':>7}")
    printed = []
    built = [(case, get_arch(arch).build(options), target) for case, arch, options, target in CASES]
    cases = [(case, b.model, b.input_shape, target) for case, b, target in built]
    mlps = MLPS + ([LARGE_MLP] if args.large else [])
    cases += [(case, relu_mlp(widths, bias), (widths[0],), target) for case, widths, bias, target in mlps]
    attention = (ATTENTION + ([LARGE_ATTENTION] if args.large else [])) if args.attention else []
    for case, make, d in attention:
        torch.manual_seed(0)
        cases.append((case, make().double(), (5, d), None))
    for case, layers, input_shape in CONV if args.conv else []:
        torch.manual_seed(0)
        cases.append((case, nn.Sequential(*layers()).eval(), input_shape, None))
    for case, model, input_shape, target in cases:
        found = find_laws(model, input_shape)
        n = found.count.num_laws if found.count.conclusive else "?"
        aim = "—" if target is None else f"< {target} s"
        print(
            f"{case:<30} {found.count.num_params:>4} {n:>4} {found.num_found:>5} {found.complete!s:>8} "
            f"{found.gap:>8.0e} {found.seconds:>8.2f} {found.count.seconds:>8.2f} {aim:>7}",
            flush=True,
        )
        printed.append((case, found))
    for case, found in printed:
        print(f"\n{case}: {found}\n  searched: {found.searched}")


if __name__ == "__main__":
    main()
