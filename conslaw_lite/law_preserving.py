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

import torch
from torch import nn

from conslaw_lite.orbits import act, laws, level_coordinates, orbits_of, parameters64, pieces_of, write


class LawKeeper:
    """Keeps every law of ``model`` at its value now, h(θ₀), by :meth:`project` after each step.

    Refuses (``ValueError``, from :func:`conslaw_lite.orbits.orbits_of`) a model whose laws or whose
    blocks' group actions are not known. ``seconds`` and ``calls`` count the time spent projecting.

    Examples
    ========
    >>> from conslaw_lite import laws_of
    >>> from conslaw_lite.blocks.toy import ToyProduct
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
