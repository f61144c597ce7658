"""What monitoring every step costs: the time of ``Monitor.step()`` over the time of one training step.

Three workloads at the scale in force (``CONSLAW_SCALE``, default from :func:`conslaw_lite.scale`):

* the experiment runner's language model and ViT (:mod:`conslaw_lite.experiments.tasks`), as the
  runner trains them: full batch, plain SGD, float64 on a CPU scale (float32 on ``gpu``);
* the small ViT trained with Adam on random 8×8 images in float32, batch 64: a lighter step,
  so the monitor's share is larger.

Each training step (forward, backward, ``optimizer.step()``) and each ``monitor.step()`` is
timed separately at every step of one run; the script prints the means and their ratio.
The target is ≤ 5 % at CI scale.

    CI=true python benchmarks/monitor_overhead.py
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite import scale
from conslaw_lite.config import dtype_for
from conslaw_lite.experiments.tasks import cross_entropy, lm_task, vit_task
from conslaw_lite.models.vit import small_vit
from conslaw_lite.monitor import Monitor, train_watched


def overhead(
    model: nn.Module, opt: torch.optim.Optimizer, loss: Callable[[], torch.Tensor], steps: int, **options: object
) -> tuple:
    """Mean training-step and ``monitor.step()`` times (seconds) over ``steps`` steps, and the monitor (built with
    ``options``). Means, not medians: the monitor evaluates the records of a small model a few at a time
    (:mod:`conslaw_lite.snapshots`)."""
    run = train_watched(model, Monitor(model, **options), opt, lambda _model, _k: loss(), steps)
    # the first steps warm up allocators and, at the monitor's first evaluations, the code paths of its shapes
    return run.step_seconds[10:].mean(), run.monitor_seconds[10:].mean(), run.monitor


def main() -> None:
    torch.set_num_threads(1)  # the CI machine's share; both timings see the same thread
    S = scale()
    steps = S.pick(ci=60, cpu=100, gpu=200)
    dtype = dtype_for(S.name)
    workloads = {}
    for name, make in (("LM (runner, full batch, SGD)", lm_task), ("ViT (runner, full batch, SGD)", vit_task)):
        torch.manual_seed(0)
        task = make(S)
        model = task.build().to(dtype)
        x = task.x.to(dtype) if task.x.is_floating_point() else task.x
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        workloads[f"{name}, {str(dtype).removeprefix('torch.')}"] = (
            model,
            opt,
            lambda model=model, x=x, y=task.y: cross_entropy(model, x, y),
        )
    torch.manual_seed(0)
    vit = small_vit(dim=S.pick(ci=32, cpu=64, gpu=128), depth=S.pick(ci=2, cpu=4, gpu=6))
    x, y = torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,))
    workloads["ViT (Adam, batch 64), float32"] = (
        vit,
        torch.optim.Adam(vit.parameters(), lr=1e-3),
        lambda: nn.functional.cross_entropy(vit(x), y),
    )
    print(f"scale {S.name}, {steps} steps each, monitor after every step")
    print(f"{'workload':42s} {'params':>8s} {'step ms':>8s} {'monitor ms':>11s} {'ratio':>7s}")
    for name, (model, opt, loss) in workloads.items():
        step, watch, monitor = overhead(model, opt, loss, steps)
        groups = [g.key for g in monitor.groups]
        num_params = sum(p.numel() for p in model.parameters())
        print(f"{name:42s} {num_params:8d} {step * 1e3:8.2f} {watch * 1e3:11.3f} {watch / step:7.2%}")
    print(f"groups monitored (ViT): {', '.join(groups)}")


if __name__ == "__main__":
    main()
