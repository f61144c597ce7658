"""A law-preserving step: after each optimizer step, move θ back to its level set along the orbit.

A discrete step drifts every law by ``τ² h(g)`` (chapter 07). The orbit of θ under the symmetry
group crosses every level set near θ (:mod:`conslaw_lite.orbits`), and moving along it changes
neither the model's output nor its loss. So after each step the :class:`LawKeeper` solves, piece
by piece,

    find ξ with h(g(ξ)·θ_{k+1}) = h(θ_0),

in closed form for rescalings and the gate shift (``u = λ²`` solves ``‖up‖²u − ‖down‖²/u = t``),
by Newton's method for ``GL(k)`` (a few steps, each a k²×k² least-norm solve), and writes
``g(ξ)·θ_{k+1}``. The laws then stay at h(θ₀) to round-off, whatever the step size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from conslaw_lite import Monitor
from conslaw_lite.orbits import act, laws, level_coordinates, orbits_of, parameters64, pieces_of, write


class LawKeeper:
    """Keeps every law of ``model`` at its value now, h(θ₀), by :meth:`project` after each step.

    Refuses (``ValueError``, from :func:`conslaw_lite.orbits.orbits_of`) a model whose laws or whose
    blocks' group actions are not known. ``seconds`` and ``calls`` count the time spent projecting.

    Examples
    ========
    >>> from conslaw_lite import laws_of
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=2.0, b=1.0)
    >>> keeper = LawKeeper(toy)
    >>> opt = torch.optim.SGD(toy.parameters(), lr=0.1)
    >>> handle = keeper.attach(opt)
    >>> for _ in range(5):
    ...     opt.zero_grad(); ((toy(torch.ones(1, 1, dtype=torch.float64)) - 3) ** 2).sum().backward(); opt.step()
    >>> abs(float(laws_of(toy)["a^2-b^2"]) - 3.0) < 1e-14  # a² − b² = 3 as at the start, to round-off
    True
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.pieces = pieces_of(orbits_of(model))
        self.names = {name for piece in self.pieces for name in piece.names}
        self.levels = laws(self.pieces, parameters64(model, self.names))
        self.seconds, self.calls = 0.0, 0

    def project(self) -> None:
        """Move θ along its orbit back to the level h = h(θ₀)."""
        start = time.perf_counter()
        p = parameters64(self.model, self.names)
        write(self.model, act(self.pieces, p, level_coordinates(self.pieces, p, self.levels)))
        self.seconds += time.perf_counter() - start
        self.calls += 1

    def attach(self, optimizer: torch.optim.Optimizer) -> torch.utils.hooks.RemovableHandle:
        """Project after every ``optimizer.step()``; attach it before a :class:`~conslaw_lite.Monitor` (θ projected)."""
        return optimizer.register_step_post_hook(lambda *_: self.project())


LossFn = Callable[[nn.Module, int], torch.Tensor]
Setup = Callable[[int], tuple[nn.Module, LossFn]]  # seed -> (fresh model, its loss)


@dataclass(frozen=True)
class KeptRun:
    """One SGD run: ``loss[k]`` (the loss of step k's batch), ``drift[k]`` the largest relative drift
    ``‖h_i(θ_k) − h_i(θ₀)‖/‖h_i(θ₀)‖`` over the laws (the :class:`~conslaw_lite.Monitor`'s), and the wall time per
    step, projection included (``projection_seconds`` of it)."""

    loss: np.ndarray
    drift: np.ndarray
    seconds_per_step: float
    projection_seconds_per_step: float


def sgd_run(setup: Setup, seed: int, *, lr: float, steps: int, keep: bool) -> KeptRun:
    """Train ``setup(seed)`` with ``torch.optim.SGD(lr)`` for ``steps`` steps, with a :class:`LawKeeper` if ``keep``.

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> toy = lambda seed: (ToyProduct(a=2.0, b=1.0), mse_loss(one, 3 * one))
    >>> plain, kept = (sgd_run(toy, 0, lr=0.05, steps=50, keep=keep) for keep in (False, True))
    >>> bool(kept.drift.max() < 1e-14 < 1e-3 < plain.drift.max())
    True
    """
    model, loss_fn = setup(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    keeper = LawKeeper(model) if keep else None
    if keeper is not None:
        keeper.attach(optimizer)  # before the monitor, which then records θ projected
    monitor = Monitor(model)
    monitor.attach(optimizer)
    losses = []
    start = time.perf_counter()
    for k in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(model, k)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    seconds = (time.perf_counter() - start) / steps
    keys = [g.key for g in monitor.groups if g.kind == "law"]
    drift = np.nanmax(np.concatenate([monitor.relative_drift(key) for key in keys], axis=1), axis=1)
    return KeptRun(np.array(losses), drift, seconds, keeper.seconds / steps if keeper else 0.0)
