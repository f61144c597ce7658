"""Teleportation and the law-preserving step, measured over more seeds than chapter 13 runs at build time.

For each model and optimizer of the chapter (toy ``a·b·x``, ReLU MLP, SwiGLU, attention; GD, SGD on mini-batches
of 16, momentum β = 0.9 at a tenth of the step), :func:`conslaw_lite.teleport.race` over ``--seeds`` seeds: the
steps a single teleport before the first step needs to reach the loss plain training reaches after ``--steps``
steps, over plain's, per seed and in the median, without and with the teleport's wall time counted as plain
steps. Then :func:`conslaw_lite.law_preserving.sgd_run` on three blocks for ``--keep-steps`` SGD steps at
τ = 0.3: the largest relative drift of the laws with and without the keeper, and the time per step.

    python benchmarks/teleport.py --seeds 5 --steps 200 --keep-steps 1000
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from conslaw_lite import mse_loss
from conslaw_lite.archs import ArchOptions
from conslaw_lite.drift import arch_setup
from conslaw_lite.law_preserving import sgd_run
from conslaw_lite.teleport import race

NET = ArchOptions(dim=4, hidden=16, out=2)
MODELS = {"toy a·b·x": ("toy", None), "ReLU MLP": ("ffn-relu", NET), "SwiGLU": ("swiglu", NET),
          "attention": ("mha", None)}
OPTIMIZERS = {"GD": dict(lr=0.1), "SGD": dict(lr=0.1, batch=16), "momentum": dict(lr=0.01, momentum=0.9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--keep-steps", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"teleport once, then train: steps to plain's loss at step {args.steps}, teleported / plain, "
          f"seeds 0..{args.seeds - 1}")
    for name, (arch, options) in MODELS.items():
        for opt, kw in OPTIMIZERS.items():
            full = (lambda train_loss: mse_loss(train_loss.x, train_loss.y)) if "batch" in kw else None
            results = race(arch_setup(arch, options, batch=kw.get("batch")), range(args.seeds), lr=kw["lr"],
                           steps=args.steps, momentum=kw.get("momentum", 0.0), record=full)
            ratio = np.array([r.ratio for r in results])
            cost = np.array([r.ratio_with_cost for r in results])
            overhead = np.median([r.overhead_steps for r in results])
            print(f"  {name:10s} {opt:9s} steps {np.round(ratio, 2).tolist()} median {np.median(ratio):.2f}; "
                  f"with cost {np.round(cost, 2).tolist()} median {np.median(cost):.2f}; "
                  f"one teleport = {overhead:.0f} plain steps")
    print(f"law-preserving step: SGD (batch 8), τ = 0.3, {args.keep_steps} steps")
    for arch in ("ffn-relu", "swiglu", "mha-rope"):
        plain, kept = (sgd_run(arch_setup(arch, batch=8), 0, lr=0.3, steps=args.keep_steps, keep=keep)
                       for keep in (False, True))
        print(f"  {arch:9s} max relative drift {plain.drift.max():.2e} → {kept.drift.max():.2e}; "
              f"{plain.seconds_per_step * 1e3:.2f} → {kept.seconds_per_step * 1e3:.2f} ms a step "
              f"({kept.projection_seconds_per_step * 1e3:.2f} ms projecting)")


if __name__ == "__main__":
    main()
