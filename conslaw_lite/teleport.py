"""Symmetry teleportation: jump along the orbit, at unchanged loss, to where a step does the most.

Every point ``g·θ`` of θ's orbit (:mod:`conslaw_lite.orbits`) has the same loss, but not the same
gradient or curvature: rescaling a ReLU unit by λ multiplies the gradient of its input row by λ
and that of its output column by 1/λ. Zhao et al. (2022) move θ to the point of the orbit with
the largest gradient norm; on its own that objective is unbounded (λ → ∞) and, at a fixed step
size τ, leads straight to divergence. :func:`teleport` picks instead the point from which one
gradient step of size τ lowers the loss most,

    g* = argmin_g L(g·θ − τ ∇L(g·θ)),

which weighs the gradient's size against the curvature that τ can take, and is bounded. It
minimises over the group's coordinates ξ by gradient descent with backtracking (a few
forward-and-double-backward passes), checks that the loss did not change, and writes g*·θ.

:func:`train_curve` trains with ``torch.optim.SGD`` (optionally with momentum), teleporting at the
steps asked for, and records the loss and the wall time, teleports included; :func:`race` runs it
against plain training over seeds and reports the steps each needs to reach the loss plain training
reaches at its last step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from conslaw_lite import Diverged
from conslaw_lite.orbits import act, move_to_level, orbits_of, parameters64, pieces_of, write

LossFn = Callable[[nn.Module, int], torch.Tensor]  # loss_fn(model, k): the loss of step k (its mini-batch)
Setup = Callable[[int], tuple[nn.Module, LossFn]]  # seed -> (fresh model, its loss)


class TeleportRefused(ValueError):
    """The move along the orbit changed the loss: the action is not a symmetry of this loss."""


class _LossOf(nn.Module):
    """``loss_fn(model, k)`` as a module, so that ``torch.func.functional_call`` can evaluate it at any θ."""

    def __init__(self, model: nn.Module, loss_fn: LossFn) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, k: int) -> torch.Tensor:
        return self.loss_fn(self.model, k)


def loss_at(model: nn.Module, loss_fn: LossFn, k: int, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """``L_k`` at the parameters ``params`` (by name), differentiable in them; the model itself is not touched.

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> toy, loss = ToyProduct(a=2.0, b=1.0), mse_loss(one, 3 * one)
    >>> float(loss_at(toy, loss, 0, {"a": torch.tensor(3.0, dtype=torch.float64)}).detach())  # ½(3·1 − 3)², b kept
    0.0
    """
    wrapper = _LossOf(model, loss_fn)
    return torch.func.functional_call(wrapper, {f"model.{n}": t for n, t in params.items()}, (k,), strict=False)


@dataclass(frozen=True)
class Teleport:
    """What one teleport did: the loss before and after (equal up to round-off), the one-step look-ahead
    loss ``L(θ − τ∇L(θ))`` and ``‖∇L‖²`` before and after, the wall time and the look-ahead evaluations it cost."""

    loss_before: float
    loss_after: float
    lookahead_before: float
    lookahead_after: float
    grad_sq_before: float
    grad_sq_after: float
    seconds: float
    evaluations: int


def teleport(
    model: nn.Module,
    loss_fn: LossFn,
    *,
    lr: float,
    k: int = 0,
    iterations: int = 8,
    rtol: float | None = None,
) -> Teleport:
    """Move ``model`` in place to ``g*·θ``, ``g* = argmin_g L_k(g·θ − τ∇L_k(g·θ))`` over its symmetry group.

    ``lr`` is τ, the step size of the training that follows; ``iterations`` the descent steps on the
    group's coordinates. The loss at g*·θ is measured: if it differs from L_k(θ) by more than
    ``rtol·|L_k(θ)|`` (default √ε of the model's dtype) the group action is not a symmetry of this loss
    (weight decay, a penalty, a block the action does not describe), and :class:`TeleportRefused`
    says by how much, leaving θ as it was. A model whose laws, or whose blocks' actions, are unknown
    is refused by :func:`conslaw_lite.orbits.orbits_of` (``ValueError``), never moved by a guess.

    Examples
    ========
    ``a·b·x = 3`` from a small, unbalanced start: a²+b² sets the speed, and τ = 0.1 can take 1/τ = 10.

    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> toy = ToyProduct(a=0.5, b=0.1)
    >>> t = teleport(toy, mse_loss(one, 3 * one), lr=0.1)
    >>> abs(t.loss_after - t.loss_before) < 1e-12, t.lookahead_after < 0.5 * t.lookahead_before
    (True, True)
    >>> round(float(toy.a * toy.b), 12)  # the product, hence the function, is unchanged
    0.05
    """
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr}")
    if not (isinstance(iterations, int) and iterations >= 1):
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    start = time.perf_counter()
    pieces = pieces_of(orbits_of(model))
    theta = parameters64(model)
    dtype = next(model.parameters()).dtype
    rtol = math.sqrt(torch.finfo(dtype).eps) if rtol is None else rtol
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    evaluations = 0

    def point(xi: torch.Tensor) -> dict[str, torch.Tensor]:
        moved = act(pieces, theta, xi)
        return {n: (moved[n] if n in moved else t.requires_grad_()).to(dtype) for n, t in theta.items()}

    def lookahead(xi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L(θ'), ‖∇L(θ')‖², L(θ' − τ∇L(θ')))`` at θ' = g(ξ)·θ, differentiable in ξ."""
        nonlocal evaluations
        evaluations += 1
        here = point(xi)
        loss = loss_at(model, loss_fn, k, here)
        grads = torch.autograd.grad(loss, [here[n] for n in trained], create_graph=True)
        stepped = here | {n: here[n] - lr * g for n, g in zip(trained, grads)}
        return loss, sum((g * g).sum() for g in grads), loss_at(model, loss_fn, k, stepped)

    def value_and_grad(xi: torch.Tensor) -> tuple[float, torch.Tensor]:
        xi = xi.detach().requires_grad_()
        phi = lookahead(xi)[2]
        if not torch.isfinite(phi):
            return math.inf, torch.zeros_like(xi)
        return float(phi.detach()), torch.autograd.grad(phi, xi)[0]

    xi = torch.zeros(sum(piece.size for piece in pieces), dtype=torch.float64)
    loss0, grad_sq0, phi0 = (float(v.detach()) for v in lookahead(xi.clone().requires_grad_()))
    phi, grad = value_and_grad(xi)
    eta = 0.1 / max(float(grad.norm()), 1e-300)  # the first trial moves ξ by 0.1
    for _ in range(iterations):
        for _ in range(12):  # backtracking: halve until the look-ahead loss falls (at most 4096 times smaller)
            trial = xi - eta * grad
            phi_trial, grad_trial = value_and_grad(trial)
            if phi_trial < phi:
                xi, phi, grad, eta = trial, phi_trial, grad_trial, 2 * eta
                break
            eta /= 2
        else:
            break  # no descent left along the orbit: ξ is a minimum of the look-ahead loss
    loss1, grad_sq1, phi1 = (float(v.detach()) for v in lookahead(xi.clone().requires_grad_()))
    change = loss1 - loss0
    if abs(change) > rtol * abs(loss0):
        raise TeleportRefused(
            f"teleport refused: moving along the orbit changed the loss by {change:+.3e} (from {loss0:.6g} to "
            f"{loss1:.6g}, more than rtol = {rtol:.1e} of it); the group action is not a symmetry of this loss "
            "(weight decay or a penalty?), so θ was left as it was"
        )
    write(model, act(pieces, theta, xi))
    return Teleport(loss0, loss1, phi0, phi1, grad_sq0, grad_sq1, time.perf_counter() - start, evaluations)


@dataclass
class Curve:
    """One training run: ``loss[k]`` = L_k(θ_k) for k = 0..K (NaN after a divergence), ``seconds[k]`` the wall
    time at which θ_k was reached (teleports included), the teleports made and the step it diverged at, if any."""

    loss: np.ndarray
    seconds: np.ndarray
    teleports: list[Teleport]
    diverged_at: int | None = None

    @property
    def teleport_seconds(self) -> float:
        """Wall time spent teleporting."""
        return sum(t.seconds for t in self.teleports)


def train_curve(
    model: nn.Module,
    loss_fn: LossFn,
    *,
    lr: float,
    steps: int,
    momentum: float = 0.0,
    teleport_at: Sequence[int] = (),
    balance: bool = False,
    iterations: int = 8,
    record: LossFn | None = None,
    max_loss_ratio: float = 1e6,
) -> Curve:
    """``steps`` steps of ``torch.optim.SGD(lr, momentum)``, teleporting before each step in ``teleport_at``.

    ``balance`` first moves θ to the balanced level h = 0 of its orbit (:func:`conslaw_lite.orbits.move_to_level`),
    its time counted. ``record`` (e.g. the full-batch loss, for SGD) is what the curve records instead of the
    training loss of step k; both runs of a :func:`race` pay for it alike. A teleport restarts the optimizer: a
    momentum buffer holds gradients of the old point of the orbit, which the new point's coordinates do not share.
    A loss that is not finite or exceeds ``max_loss_ratio·L_0`` stops the run and is recorded as ``diverged_at``
    (the curve is NaN after it).

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> plain = train_curve(ToyProduct(a=0.5, b=0.1), mse_loss(one, 3 * one), lr=0.1, steps=20)
    >>> jump = train_curve(ToyProduct(a=0.5, b=0.1), mse_loss(one, 3 * one), lr=0.1, steps=20, teleport_at=[0])
    >>> bool(jump.loss[5] < 1e-12 < 1 < plain.loss[5])  # five steps: the teleported run is at round-off
    True
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    start = time.perf_counter()
    if balance:
        move_to_level(model)
    teleport_at = set(teleport_at)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    loss, seconds = np.full(steps + 1, np.nan), np.full(steps + 1, np.nan)
    teleports, diverged_at = [], None
    for k in range(steps + 1):
        if k in teleport_at and k < steps:
            teleports.append(teleport(model, loss_fn, lr=lr, k=k, iterations=iterations))
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        value = loss_fn(model, k)
        seen = value if record is None else record(model, k)
        loss[k], seconds[k] = float(seen.detach()), time.perf_counter() - start
        if not math.isfinite(loss[k]) or loss[k] > max_loss_ratio * max(loss[0], 1e-300):
            loss[k], diverged_at = np.nan, k
            break
        if k == steps:
            break
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    return Curve(loss, seconds, teleports, diverged_at)


def steps_to(loss: np.ndarray, target: float) -> int | None:
    """The first k with ``loss[k] ≤ target`` (``None`` if never).

    Examples
    ========
    >>> steps_to(np.array([3.0, 2.0, 1.0, 0.5]), 1.0), steps_to(np.array([3.0, np.nan]), 1.0)
    (2, None)
    """
    hit = np.flatnonzero(loss <= target)
    return int(hit[0]) if hit.size else None


@dataclass(frozen=True)
class RaceResult:
    """One seed of :func:`race`: the target (plain training's loss at its last step), the steps each run took
    to reach it, the contender's extra time in units of plain steps, and both curves."""

    seed: int
    target: float
    plain_steps: int
    steps: int | None  # None: the contender never reached the target (or diverged)
    overhead_steps: float  # teleport (or balancing) seconds / seconds per plain step
    plain: Curve
    contender: Curve

    @property
    def ratio(self) -> float:
        """Steps to target, contender / plain (< 1: faster); ``inf`` if it never got there."""
        return math.inf if self.steps is None else self.steps / self.plain_steps

    @property
    def ratio_with_cost(self) -> float:
        """The same ratio with the teleport's (or balancing's) time counted as that many plain steps."""
        return math.inf if self.steps is None else (self.steps + self.overhead_steps) / self.plain_steps


def race(
    setup: Setup,
    seeds: Sequence[int],
    *,
    lr: float,
    steps: int,
    momentum: float = 0.0,
    teleport_at: Sequence[int] = (0,),
    balance: bool = False,
    iterations: int = 8,
    record: Callable[[LossFn], LossFn] | None = None,
) -> list[RaceResult]:
    """Plain SGD (or momentum) against the same with teleports (or a balanced start), on ``setup(seed)`` per seed.

    The target is the loss plain training reaches at step ``steps``; :attr:`RaceResult.ratio` is the contender's
    steps to it over plain's. Time per plain step is measured on the plain run. ``record(loss_fn)`` gives, for a
    seed's training loss, the loss the curves record (:func:`train_curve`), e.g. its full batch for SGD.

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> toy = lambda seed: (ToyProduct(a=0.5, b=0.1 * (seed + 1)), mse_loss(one, 3 * one))
    >>> [r.ratio < 0.5 for r in race(toy, [0, 1], lr=0.1, steps=30)]
    [True, True]
    """
    results = []
    for seed in seeds:
        model, loss_fn = setup(seed)
        recorded = None if record is None else record(loss_fn)
        plain = train_curve(model, loss_fn, lr=lr, steps=steps, momentum=momentum, record=recorded)
        if plain.diverged_at is not None:
            why = f"plain training diverged at lr = {lr:g} (seed {seed}); take a smaller lr"
            raise Diverged(plain.diverged_at, why)
        model, loss_fn = setup(seed)
        contender = train_curve(model, loss_fn, lr=lr, steps=steps, momentum=momentum,
                                teleport_at=() if balance else teleport_at, balance=balance, iterations=iterations,
                                record=recorded)
        target = float(plain.loss[-1])
        per_step = plain.seconds[-1] / steps
        overhead = contender.teleport_seconds if not balance else contender.seconds[0] - plain.seconds[0]
        results.append(RaceResult(seed, target, steps_to(plain.loss, target), steps_to(contender.loss, target),
                                  overhead / per_step, plain, contender))
    return results
