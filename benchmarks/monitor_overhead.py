"""What monitoring every step costs: the time of ``Monitor.step()`` over the time of one training step.

Trains the book's small timm ViT (SwiGLU MLP, learned PE; :func:`conslaw_lite.models.vit.small_vit`)
with Adam on random images at the scale in force (``CONSLAW_SCALE``, default from
:func:`conslaw_lite.scale`), float32 as in practice, and times the training step
(forward, backward, ``optimizer.step()``) and ``monitor.step()`` separately at every
step of one run. Prints the medians and their ratio; the target is ≤ 5 %.

    python benchmarks/monitor_overhead.py
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from conslaw_lite import scale
from conslaw_lite.models.vit import small_vit
from conslaw_lite.monitor import Monitor


def main() -> float:
    torch.set_num_threads(1)  # the CI machine's share; both timings see the same thread
    S = scale()
    steps, batch = S.pick(ci=60, cpu=100, gpu=200), S.pick(ci=64, cpu=128, gpu=256)
    dim, depth = S.pick(ci=32, cpu=64, gpu=128), S.pick(ci=2, cpu=4, gpu=6)
    torch.manual_seed(0)
    model = small_vit(dim=dim, depth=depth)  # 8×8 images in 2×2 patches: the book's digits ViT
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    monitor = Monitor(model)
    x, y = torch.randn(batch, 1, 8, 8), torch.randint(0, 10, (batch,))
    step_s, monitor_s = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        t1 = time.perf_counter()
        monitor.step()
        t2 = time.perf_counter()
        step_s.append(t1 - t0)
        monitor_s.append(t2 - t1)
    step, watch = np.median(step_s[5:]), np.median(monitor_s[5:])  # the first steps warm up allocators
    num_params = sum(p.numel() for p in model.parameters())
    print(f"scale {S.name}: ViT dim {dim}, depth {depth}, {num_params} parameters, batch {batch}, {steps} Adam steps")
    print(f"groups monitored: {', '.join(monitor.names)}")
    print(f"median training step {step * 1e3:.2f} ms, median monitor.step() {watch * 1e3:.3f} ms")
    print(f"overhead ratio = {watch / step:.4f} ({watch / step:.2%} of the step time; target ≤ 5 %)")
    return watch / step


if __name__ == "__main__":
    main()
