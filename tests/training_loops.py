"""Small training loops the monitor's checks are tried on: an MLP, its unit laws, a loop of SGD steps with room for
edits, and the warnings the monitor gives over it."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite.monitor import Monitor

X = torch.randn(64, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
Y = torch.randn(64, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
UNITS = {"unit": lambda p: p["0.weight"].square().sum(1) + p["0.bias"].square() - p["2.weight"].square().sum(0)}


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3)).double()


def loss(model: nn.Module) -> torch.Tensor:
    return (model(X) - Y).square().mean()


def monitor_warnings(model: nn.Module, step: Callable[[], None], steps: int = 20, laws: dict = UNITS) -> list[str]:
    """The monitor's warnings over ``steps`` calls of ``step``, which calls ``step.monitor.step()`` itself."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step.monitor = Monitor(model, laws=laws)
        for _ in range(steps):
            step()
    return [str(w.message) for w in caught if str(w.message).startswith("Monitor")]


def sgd_loop(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    edit: Callable[[], None] = lambda: None,
    after: Callable[[], None] = lambda: None,
):
    """A training step: ``edit`` between backward() and the optimizer, ``after`` between the optimizer and the
    monitor."""

    def step() -> None:
        optimizer.zero_grad()
        loss(model).backward()
        edit()
        optimizer.step()
        after()
        step.monitor.step()

    return step
