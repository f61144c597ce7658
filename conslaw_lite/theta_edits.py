"""Whether θ is edited between optimizer steps: weight decay written by hand, a clamp, a renorm, noise.

The laws hold for the flow that the optimizer's steps follow. Between two steps, θ should not move: forward and
backward passes read it. A loop that writes θ there, ``p.mul_(1 − τλ)`` after ``optimizer.step()`` (weight decay
by hand), ``p.clamp_(−c, c)`` (WGAN's clip), a renorm of rows, Langevin noise, moves the laws far more than the steps
do, and the gradient in ``.grad`` (:mod:`conslaw_lite.gradient_check`) does not show it.

So after some optimizer steps (those of an optimizer that steps a parameter the laws read) θ is copied, and before
the next step compared with the copy. Where it changed, the laws are evaluated before and after the change and once
every optimizer has stepped after it (θ_next), and the change is named where, for some law,

    ‖h_i(θ_edited) − h_i(θ_stepped)‖ > FACTOR · ‖h_i(θ_next) − h_i(θ_edited)‖,

the edit moved the law more than :data:`FACTOR` times what the steps after it moved it. A step moves a law by τ²
terms only (chapter 07), so an edit that is not made to keep the laws stands out; one that is (the law-preserving
projection of :mod:`conslaw_lite.law_preserving`, which moves θ back by what the step moved the laws) does not.
The copies are taken after steps 1, 2 and 3 (one optimizer per layer, stepped in turn: the edit may come after any
of them), 10 to 12, 100 to 102 and every :data:`EVERY` steps, and cost a copy of the watched parameters and a
comparison (a second copy where θ changed); the laws are evaluated only where θ changed. A Lookahead written by hand
that averages every k steps moves the laws by τ² terms too (measured: the drift halves at τ/2), and is not named.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

from conslaw_lite.law_stacks import Plan
from conslaw_lite.snapshots import Snapshots
from conslaw_lite.step_hooks import Holders, listen
from conslaw_lite.watch_conditions import listed

ROUNDOFF = 1e-13  # of a law's size: a change below it may be the round-off of evaluating it
FACTOR = 10  # an edit that moves a law more than this times a step does (a step: τ² terms, the projection back: 1)
STARTS, SPAN, EVERY = (1, 10, 100), 3, 1000  # θ is copied after steps s to s + SPAN − 1, s in STARTS or EVERY·j


class EditCheck:
    """Names an edit of ``theta`` (the parameters ``read``) between the steps of the optimizers that hold one of them,
    judged by the laws of ``plan``: ``norms`` takes a difference of two rows of law values to each law's norm,
    ``names`` and ``judged`` name each law and say whether it is one (not a control). Warns once, from the step after
    the edit; every optimizer's steps are seen (torch's global step hooks), none need be attached.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.law_stacks import stack_sources
    >>> from conslaw_lite.law_values import LawValues
    >>> net = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 1, bias=False))
    >>> units = lambda p: p["0.weight"].square().sum(1) - p["2.weight"].square().sum(0)
    >>> theta = dict(net.named_parameters())
    >>> plan = stack_sources([(units, [0])], {n: p.detach().double() for n, p in theta.items()})
    >>> values = LawValues.start(plan.sources, plan.params)
    >>> check = EditCheck(plan, sorted(theta), list(theta.values()), values.norms, ["unit"])
    >>> optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    >>> def train(decay: float) -> None:
    ...     optimizer.zero_grad()
    ...     net(torch.randn(8, 2)).square().mean().backward()
    ...     optimizer.step()
    ...     with torch.no_grad():
    ...         net[0].weight.mul_(1 - decay)  # weight decay written by hand, on the first layer
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     train(0.0), train(0.0), train(0.01), train(0.01)
    (None, None, None, None)
    >>> print(caught[0].message)  # doctest: +ELLIPSIS
    Monitor: θ changed between two optimizer steps (`0.weight` written after step 3, outside the optimizer): ...
    """

    def __init__(
        self,
        plan: Plan,
        read: list[str],
        theta: list[torch.Tensor],
        norms: Callable[[np.ndarray], np.ndarray],
        names: list[str],
        judged: np.ndarray | None = None,
    ) -> None:
        self.plan, self.read, self.theta, self.norms, self.names = plan, read, theta, norms, names
        self.judged = np.ones(len(names), dtype=bool) if judged is None else judged
        self.steps = 0  # steps taken by an optimizer that holds a watched parameter
        self.stepped: list[torch.Tensor] | None = None  # θ after a step, until the next starts
        self.edited: tuple[int, list[torch.Tensor], list[torch.Tensor], list[int]] | None = None  # θ changed after
        # step k: θ then, θ before the next step, and which tensors changed
        self.since: set[int] = set()  # the optimizers that stepped since
        self.said = False
        self._held = Holders(theta)
        listen(self)

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        """Before a step: where θ was copied after the last, whether it changed since."""
        if self.stepped is None or not self._held(optimizer):
            return
        stepped, self.stepped = self.stepped, None
        if any(p.device != s.device or p.shape != s.shape for p, s in zip(self.theta, stepped, strict=True)):
            return  # the model moved to another device: nothing to compare, and a hook must not raise in a step
        changed = [i for i, (p, s) in enumerate(zip(self.theta, stepped, strict=True)) if not torch.equal(p, s)]
        if changed:
            self.edited, self.since = (self.steps, stepped, _copy(self.theta), changed), set()

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        """After a step: judge an edit found before it once every optimizer has stepped since (one per layer: the
        laws that couple the layers move at first order over one's step), and copy θ where the next is looked at."""
        if self.said or not self._held(optimizer):
            return
        self.steps += 1
        if self.edited is not None:
            seen = id(optimizer) in self.since  # stepped twice since: the others are not stepped in turn
            self.since.add(id(optimizer))
            if not seen and self.since < {id(o) for o in self._held.seen()}:
                return
            why, self.edited = self._judged(*self.edited), None
            if why:
                self.said = True
                warnings.warn(f"Monitor: {why}", stacklevel=3)
                return
        if _looked_at(self.steps):
            self.stepped = _copy(self.theta)

    def _judged(
        self, step: int, stepped: list[torch.Tensor], edited: list[torch.Tensor], changed: list[int]
    ) -> str | None:
        """Why the change from ``stepped`` (θ after ``step``) to ``edited`` (of the tensors ``changed``) breaks the
        laws (None where no law moved more than :data:`FACTOR` times what the steps after it, to θ now, moved it)."""
        ring = Snapshots(self.plan, self.read, slots=3)
        with torch.inference_mode():
            for point in (stepped, edited, self.theta):
                ring.take([t.detach() for t in point])
            h = ring.evaluate().cpu().numpy()
        change, stepping = self.norms(np.diff(h, axis=0))
        size = self.norms(h[:1])[0]  # a law's entries need not be computed bit for bit alike at two points
        seen = self.judged & (change > ROUNDOFF * size)
        ratio = np.where(seen, change / np.maximum(stepping, np.finfo(np.float64).tiny), 0.0)
        moved = [f"`{name}`" for name, r in zip(self.names, ratio, strict=True) if r > FACTOR]
        if not moved:
            return None
        worst = int(np.argmax(ratio))
        next_step = f"{stepping[worst]:.1g}" if stepping[worst] > 0 else "0"
        written = [f"`{self.read[i]}`" for i in changed]
        return (
            f"θ changed between two optimizer steps ({listed(written, 3)} written after step {step}, "
            f"outside the optimizer): the laws {listed(moved, 3)} moved {change[worst]:.1g} there, more than "
            f"{FACTOR} times the next step's {next_step}; an edit of θ between steps (weight decay written by hand, a "
            "clamp or renorm, noise, an average with other weights) breaks the laws, and ε measures how far"
        )


def _looked_at(step: int) -> bool:
    """Whether θ is copied after ``step``: within :data:`SPAN` steps of a start.

    Examples
    ========
    >>> [k for k in range(1, 3000) if _looked_at(k)]
    [1, 2, 3, 10, 11, 12, 100, 101, 102, 1000, 1001, 1002, 2000, 2001, 2002]
    """
    return any(k in STARTS or k % EVERY == 0 for k in range(max(step - SPAN + 1, 1), step + 1))


def _copy(theta: list[torch.Tensor]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in theta]
