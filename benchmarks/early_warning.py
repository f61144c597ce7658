"""Drift as an early warning, measured over more seeds and step sizes than chapter 13 runs at build time.

For the toy ``a·b·x``, the chapter's ReLU MLP and its language model (``ci`` size),
:func:`conslaw_lite.early_warning.sweep` over a grid of τ from stable to divergent and ``--seeds`` seeds. A run
diverges once L_k > 10 L_0 or is not finite.
Per model: the runs that did not diverge and how many of them each alarm fired on (false alarms); the diverging runs,
split into slow (10 steps or more: a 5-step warning is possible at all) and fast; the drift alarm's and the loss
alarm's (L_k > 3 L_0) leads; and :func:`~conslaw_lite.early_warning.tuned_leads`, each statistic at the most
favourable level that fires on none of the non-diverging runs of all seeds.

    python benchmarks/early_warning.py --seeds 3
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

from conslaw_lite import mse_loss
from conslaw_lite.config import Scale
from conslaw_lite.early_warning import Setup, SweepPoint, sweep, tuned_leads
from conslaw_lite.experiments.tasks import cross_entropy, lm_task
from conslaw_lite.families.ffn.block import FFN
from conslaw_lite.families.toy.block import ToyProduct

ONE = torch.ones(1, 1, dtype=torch.float64)


def toy_setup(seed: int) -> tuple[nn.Module, object]:
    return ToyProduct(a=1.0, b=0.5), mse_loss(ONE, ONE)  # the seed does not matter: one run per τ


def mlp_setup(seed: int) -> tuple[nn.Module, object]:
    torch.manual_seed(seed)
    model = nn.Sequential(FFN(8, 32, 8, activation="relu"), FFN(8, 32, 1, activation="relu")).double()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=g, dtype=torch.float64)
    return model, mse_loss(x, torch.randn(64, 1, generator=g, dtype=torch.float64))


def lm_setup() -> Setup:
    task = lm_task(Scale("ci"))

    def setup(seed: int) -> tuple[nn.Module, object]:
        torch.manual_seed(seed)
        return task.build().double(), lambda model, k: cross_entropy(model, task.x, task.y)

    return setup


def _leads(leads: list[int | None]) -> str:
    got = [lead for lead in leads if lead is not None]
    return (f"{sum(lead >= 5 for lead in got)} of {len(leads)} ≥ 5 steps, {len(leads) - len(got)} missed, "
            f"median {np.median(got) if got else float('nan'):.0f}, max {max(got, default=0)}")


def report(name: str, points: list[SweepPoint]) -> None:
    stable = [p for p in points if p.diverged_at is None]
    diverging = [p for p in points if p.diverged_at is not None]
    slow = [p for p in diverging if p.diverged_at >= 10]
    false_drift = sum(p.warned_at is not None for p in stable)
    false_loss = sum(p.loss_warned_at is not None for p in stable)
    print(f"{name}: {len(stable)} runs did not diverge; false alarms: drift {false_drift}, loss > 3 L_0 {false_loss}")
    print(f"  {len(diverging)} diverged, {len(slow)} of them at step 10 or later; fastest at step "
          f"{min((p.diverged_at for p in diverging), default=None)}")
    for label, group in (("all diverging", diverging), ("slow only", slow)):
        print(f"  {label:14s} drift alarm: {_leads([p.lead for p in group])}")
        print(f"  {'':14s} loss alarm:  {_leads([p.loss_lead for p in group])}")
    if stable and diverging:
        tuned = tuned_leads(points)
        print(f"  tuned levels   drift: {_leads(tuned['drift'])}")
        print(f"  {'':14s} loss:  {_leads(tuned['loss'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = range(args.seeds)
    models = {  # name: (setup, τ grid, steps, seeds)
        "toy a·b·x": (toy_setup, np.r_[np.linspace(0.5, 1.8, 14), np.linspace(1.81, 1.86, 11), 1.9, 2.0, 2.5], 100,
                      [0]),
        "ReLU MLP": (mlp_setup, np.geomspace(0.2, 3.2, 17), 150, seeds),
        "language model": (lm_setup(), np.geomspace(0.35, 4.0, 15), 60, seeds),
    }
    for name, (setup, lrs, steps, runs) in models.items():
        points = [p for seed in runs for p in sweep(setup, lrs.tolist(), steps=steps, seed=seed)]
        report(f"{name}, {len(lrs)} τ × {len(runs)} seed(s), {steps} steps", points)


if __name__ == "__main__":
    main()
