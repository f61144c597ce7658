"""Edits of θ between optimizer steps (conslaw_lite.theta_edits): weight decay written by hand, a clamp, a renorm,
noise are named; a loop that leaves θ alone between steps, or puts it back as it was, or moves the laws back where
the step took them, is not."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

from conslaw_lite.families.ffn.block import SwiGLU
from conslaw_lite.law_preserving import LawKeeper
from conslaw_lite.monitor import Monitor
from tests.training_loops import UNITS, loss, mlp, monitor_warnings, sgd_loop

EDITED = "θ changed between two optimizer steps"


def each_parameter(model: nn.Module, edit: Callable[[torch.Tensor], object]) -> Callable[[], None]:
    def after() -> None:
        with torch.no_grad():
            for p in model.parameters():
                edit(p)

    return after


EDITS = {
    "weight decay by hand": lambda p: p.mul_(1 - 0.02 * 1e-2),
    "a clamp that bites": lambda p: p.clamp_(-0.3, 0.3),
    "Langevin noise": lambda p: p.add_(1e-3 * torch.randn_like(p)),
    "a renorm of rows that bites": lambda p: p.copy_(torch.renorm(p, 2, 0, 0.5)) if p.dim() == 2 else None,
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
@pytest.mark.parametrize("where", ["after the step", "before the step"])
def test_an_edit_of_theta_between_steps_is_named_once(edit, where: str) -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    hand = each_parameter(model, edit)
    loop = sgd_loop(model, optimizer, after=hand) if where == "after the step" else sgd_loop(model, optimizer, hand)
    said = [w for w in monitor_warnings(model, loop) if EDITED in w]
    assert len(said) == 1, said
    assert "weight`" in said[0] and "`unit`" in said[0] and "written after step 1" in said[0], said


def test_an_edit_that_starts_late_is_named_at_the_next_look() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    decay = each_parameter(model, EDITS["weight decay by hand"])
    loop = sgd_loop(model, optimizer, after=lambda: decay() if loop.monitor.steps[-1] >= 50 else None)
    said = [w for w in monitor_warnings(model, loop, steps=120) if EDITED in w]
    assert len(said) == 1 and "written after step 100" in said[0], said


def test_an_edit_with_the_monitor_attached_and_one_optimizer_per_layer_is_named() -> None:
    """The edit comes after both optimizers, so after the second's step: each step is looked at in turn."""
    model = mlp()
    first, second = (torch.optim.SGD(model[i].parameters(), lr=0.02) for i in (0, 2))
    with pytest.warns(UserWarning, match=EDITED) as caught:
        monitor = Monitor(model, laws=UNITS)
        monitor.attach(first), monitor.attach(second)
        for _ in range(6):
            first.zero_grad(), second.zero_grad()
            loss(model).backward()
            first.step(), second.step()
            with torch.no_grad():
                model[0].weight.mul_(1 - 1e-3)
    assert sum(EDITED in str(w.message) for w in caught) == 1


def test_a_loop_that_leaves_theta_as_the_step_left_it_is_not_named() -> None:
    """Momentum, an EMA swapped in for an evaluation and back, a state dict loaded back, a clamp that never bites."""
    model = mlp()
    ema = copy.deepcopy(model)

    def swap_and_back() -> None:
        with torch.no_grad():
            kept = [p.clone() for p in model.parameters()]
            for p, q in zip(model.parameters(), ema.parameters(), strict=True):
                q.lerp_(p, 0.1)
                p.copy_(q)
            loss(model)
            for p, k in zip(model.parameters(), kept, strict=True):
                p.copy_(k)
        model.load_state_dict(model.state_dict())
        each_parameter(model, lambda p: p.clamp_(-100, 100))()

    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    assert monitor_warnings(model, sgd_loop(model, optimizer, after=swap_and_back), steps=105) == []


@pytest.mark.parametrize("lr", [0.3, 0.01])
def test_the_law_preserving_projection_between_steps_is_not_named(lr: float) -> None:
    """It moves each law back by what the step moved it: about once a step's change (measured 0.99 to 1.09), not
    ten times."""
    torch.manual_seed(0)
    model = SwiGLU(4, 6, 4).double()
    x, y = torch.randn(16, 4, dtype=torch.float64), torch.randn(16, 4, dtype=torch.float64)
    keeper, optimizer = LawKeeper(model), torch.optim.SGD(model.parameters(), lr=lr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = Monitor(model)
        for _ in range(105):
            optimizer.zero_grad()
            (model(x) - y).square().mean().backward()
            optimizer.step()
            keeper.project()
            monitor.step()
    assert keeper.calls == 105 and not [str(w.message) for w in caught if EDITED in str(w.message)]
