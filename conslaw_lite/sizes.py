"""The widths each block trains at, per scale, and one timed training run at them.

At ``ci`` and ``cpu`` scale a block keeps the small sizes of its chapter (the numbers the
book prints do not move); at ``gpu`` scale it takes the widths people train: SwiGLU with
d = 256 and r = 1,024, attention with d = 192 and 3 heads of 64, a mixture of 8 SwiGLU
experts. :func:`train_block` trains one of them on the device in force, in the scale's
training dtype (:func:`conslaw_lite.config.dtype_for`), and says where, in what and how long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from conslaw_lite.archs import ArchOptions
from conslaw_lite.config import Scale, dtype_for, scale
from conslaw_lite.config import device as default_device
from conslaw_lite.drift import DriftPoint, arch_setup, measure


@dataclass(frozen=True)
class Workload:
    """One block's training at one scale: sizes, random-regression samples, GD steps and step size τ."""

    options: ArchOptions
    samples: int
    steps: int
    lr: float


_SMALL = ArchOptions()  # each architecture's own defaults: the sizes the chapters use on a CPU
_ATTENTION = ArchOptions(dim=192, heads=3, head_dim=64, seq=64)
# τ at gpu scale: θ moves by under 1 % in the first 20 steps (attention's outputs are larger at d = 192).
WORKLOADS: dict[str, dict[str, Workload]] = {
    "swiglu": {
        "ci": Workload(_SMALL, 32, 20, 0.05),
        "cpu": Workload(_SMALL, 32, 50, 0.05),
        "gpu": Workload(ArchOptions(dim=256, hidden=1024), 1024, 2000, 0.05),
    },
    "mha": {
        "ci": Workload(_SMALL, 32, 20, 0.05),
        "cpu": Workload(_SMALL, 32, 50, 0.05),
        "gpu": Workload(_ATTENTION, 256, 2000, 2.5e-4),
    },
    "mha-rope": {
        "ci": Workload(_SMALL, 32, 20, 0.05),
        "cpu": Workload(_SMALL, 32, 50, 0.05),
        "gpu": Workload(_ATTENTION, 256, 2000, 2.5e-4),
    },
    "moe-softmax": {
        "ci": Workload(_SMALL, 32, 20, 0.05),
        "cpu": Workload(_SMALL, 32, 50, 0.05),
        "gpu": Workload(ArchOptions(dim=256, hidden=512, experts=8), 1024, 2000, 0.05),
    },
}


def workload(arch: str, at: Scale | None = None) -> Workload:
    """The :class:`Workload` of ``arch`` at scale ``at`` (default: the scale in force).

    Examples
    ========
    >>> w = workload("swiglu", Scale("gpu"))
    >>> w.options.dim, w.options.hidden
    (256, 1024)
    >>> workload("swiglu", Scale("ci")).options == ArchOptions()  # CI keeps the chapter's sizes
    True
    """
    if arch not in WORKLOADS:
        raise ValueError(f"no workload for {arch!r}; the table has {sorted(WORKLOADS)}")
    return WORKLOADS[arch][(at or scale()).name]


@dataclass
class BlockRun:
    """What :func:`train_block` measured: the drift at the last step, where it ran and how long it took."""

    arch: str
    workload: Workload
    steps: int
    point: DriftPoint
    device: torch.device
    dtype: torch.dtype
    wall_s: float

    def summary(self) -> str:
        """One line: block and sizes, steps, device, dtype, wall time, ε of the laws and of the controls."""
        o = self.workload.options
        sizes = ", ".join(f"{k}={v}" for k, v in vars(o).items() if v is not None and k != "seed") or "default sizes"
        return (
            f"{self.arch} ({sizes}): {self.steps} GD steps, τ = {self.workload.lr:g}, "
            f"on {self.device} in {str(self.dtype).removeprefix('torch.')}: {self.wall_s:.1f} s; "
            f"ε laws {self.point.epsilon:.2e}, controls {self.point.control_epsilon:.2e}"
        )


def train_block(
    arch: str, at: Scale | None = None, *, device: torch.device | str | None = None, steps: int | None = None
) -> BlockRun:
    """Train ``arch`` at its :func:`workload` with full-batch GD on ``device``, in the scale's dtype; time it.

    The laws are evaluated in float64 whatever the training dtype; the wall time covers
    building, training and recording (the device is synchronised before the clock stops).

    Examples
    ========
    >>> run = train_block("swiglu", Scale("ci"), device="cpu", steps=3)
    >>> run.device, run.dtype, run.point.epsilon < run.point.control_epsilon
    (device(type='cpu'), torch.float64, True)
    """
    at = at or scale()
    w = workload(arch, at)
    where, dtype = default_device(device), dtype_for(at.name)
    steps = steps or w.steps
    start = time.perf_counter()
    report = measure(
        arch_setup(arch, w.options, samples=w.samples), [w.lr], steps=steps, name=arch, device=where, dtype=dtype
    )
    if where.type == "cuda":
        torch.cuda.synchronize(where)
    return BlockRun(arch, w, steps, report.points[0], where, dtype, time.perf_counter() - start)
