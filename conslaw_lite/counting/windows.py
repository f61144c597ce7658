"""θ' aimed into the windows of clamps that exclude 0: ``clamp(z, 0.9, 1.1)``, ``hardtanh(z, 0.5, 2)``.

The scales of :mod:`.covering` are drawn log-uniformly, which meets a kink at 0 and a cap that some scale reaches.
A window [lo, hi] away from 0 is a band of fixed width: a unit lands in it with a probability of about
``log₁₀(hi/lo)`` over the decades drawn. ``W₂ clamp(W₁x, 0.9, 1.1)`` (3-3-2, no laws) met the middle pieces a few
times per unit, too few for the rows of W₁, and counted 3 laws, conclusive; ``clamp(W₁x, 1, 1.001)`` met them never,
W₁'s gradient was zero at every θ and it counted W₁'s 9 entries as laws. A stack of such layers needs one input on
a middle piece in every layer at once.

So :func:`aimed_theta` walks the forward's clamps of such windows in call order. Before each, the tensors first read
since the one before are scaled together, by a factor s found by a few secant steps on ``log |u|`` against
``log |s|`` (s of either sign: θ' is any θ), until one random unit of that clamp lies inside its window on the
input: ``u(s) = s u(1)`` for a linear layer with its bias, ``s^p u(1)`` for a block homogeneous of degree p. A
quarter of the clamps are left where they land, so that the patterns mix middle and outer pieces. Every pattern
is still that of a θ' on its input: the pieces are recorded at the θ' found, as for any other draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from conslaw_lite.counting.covering import FirstUse, first_uses
from conslaw_lite.counting.problem import Problem
from conslaw_lite.counting.strata import CLAMPS, clamp_bounds

AIM_STEPS = 4  # secant steps per clamp: u(s) = s^p u(1) is met at the first for p = 1, the second for any p
LEFT = 0.25  # the share of the clamps not aimed at


def excludes_zero(bounds: tuple[float | None, float | None] | None) -> bool:
    """Whether a clamp's bounds make a finite window [lo, hi] that does not contain 0.

    Examples
    ========
    >>> excludes_zero((0.9, 1.1)), excludes_zero((0.0, 6.0)), excludes_zero((1.0, None)), excludes_zero((-2, -0.5))
    (True, False, False, True)
    """
    if bounds is None or None in bounds or not all(math.isfinite(b) for b in bounds):
        return False
    lo, hi = bounds
    return lo > 0 or hi < 0


class ClampWindows(FirstUse):
    """The order of first use of the parameter tensors and, per clamp whose window excludes 0, in call order,
    ``(u, lo, hi, read)``: what it clamps, its window, and how many parameter tensors were read before it."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        super().__init__(tensors)
        self.calls: list[tuple[torch.Tensor, float, float, int]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in CLAMPS and args and isinstance(args[0], torch.Tensor):
            bounds = clamp_bounds(func, args, kwargs)
            if excludes_zero(bounds):
                self.calls.append((args[0].detach(), *bounds, len(self.order)))
        return super().__torch_function__(func, types, args, kwargs)


def windows(problem: Problem, theta: torch.Tensor, x: torch.Tensor) -> ClampWindows:
    """The clamps of windows that exclude 0 that ``problem``'s forward at θ runs on ``x`` (:class:`ClampWindows`).

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> class Narrow(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = nn.Linear(2, 3), nn.Linear(3, 1)
    ...     def forward(self, x):
    ...         return self.b(self.a(x).clamp(0.9, 1.1).relu())
    >>> problem = problem_of(Narrow().double(), None)
    >>> found = windows(problem, problem.random_theta(torch.Generator()), torch.ones(1, 2, dtype=torch.float64))
    >>> [(lo, hi, read) for _, lo, hi, read in found.calls]  # a.weight and a.bias read before the clamp
    [(0.9, 1.1, 2)]
    """
    return first_uses(problem, theta, x, ClampWindows)


def aimer(
    problem: Problem, found: ClampWindows, draw: Callable[[], torch.Tensor], gen: torch.Generator
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The ``aim`` of :func:`.covering.covering_patterns`: an input ↦ a θ' from ``draw()`` aimed on it
    (:func:`aimed_theta`), where the forward ``found`` recorded runs a clamp whose window excludes 0; None elsewhere.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> problem, gen = problem_of(nn.Sequential(nn.Linear(2, 2), nn.ReLU6()).double(), None), torch.Generator()
    >>> found = windows(problem, problem.random_theta(gen), torch.ones(1, 2).double())  # relu6: 0 in [0, 6]
    >>> aimer(problem, found, lambda: problem.random_theta(gen), gen) is None
    True
    """
    if not found.calls:
        return None
    return lambda x0: aimed_theta(problem, draw(), x0, gen)


def aimed_theta(problem: Problem, theta: torch.Tensor, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """θ scaled, tensor group by tensor group in the order the forward reads them, so that a random unit of each
    clamp whose window excludes 0 lies inside its window on the input ``x`` (one input; the module docstring).

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> model = nn.Sequential(nn.Linear(3, 4, bias=False), nn.Hardtanh(1.0, 1.001)).double()
    >>> problem, gen, x = problem_of(model, None), torch.Generator().manual_seed(0), torch.ones(1, 3).double()
    >>> aimed = aimed_theta(problem, problem.random_theta(gen), x, gen)
    >>> u = aimed.reshape(4, 3) @ x[0]  # the units' inputs to the clamp: one of them inside [1, 1.001]
    >>> bool(((u >= 1.0) & (u <= 1.001)).any()), bool(((u >= 1.0) & (u <= 1.001)).all())
    (True, False)
    """
    found, k, start = windows(problem, theta, x), 0, 0
    while k < len(found.calls):
        u, lo, hi, read = found.calls[k]
        group, start = found.order[start:read], max(start, read)
        if group and u.numel() and float(torch.rand((), generator=gen)) >= LEFT:
            parts = enumerate(problem.split(theta))
            mask = torch.cat([torch.full_like(p, i in group, dtype=torch.bool) for i, (_, p) in parts])
            unit = int(torch.randint(u.numel(), (), generator=gen))
            target = lo + (hi - lo) * (0.1 + 0.8 * float(torch.rand((), generator=gen)))
            value = lambda t, k=k, unit=unit: _entry(problem, t, x, k, unit)  # noqa: E731
            theta = _aimed(value, float(u.flatten()[unit]), theta, mask, target, (lo, hi))
            found = windows(problem, theta, x)
        k += 1
    return theta


def _entry(problem: Problem, theta: torch.Tensor, x: torch.Tensor, k: int, unit: int) -> float:
    """Entry ``unit`` of what clamp ``k`` clamps at θ; NaN where the forward runs fewer clamps or smaller ones."""
    calls = windows(problem, theta, x).calls
    u = calls[k][0].flatten() if k < len(calls) else torch.empty(0)
    return float(u[unit]) if unit < len(u) else math.nan


def _aimed(
    value: Callable[[torch.Tensor], float],
    u: float,
    theta: torch.Tensor,
    mask: torch.Tensor,
    target: float,
    window: tuple[float, float],
) -> torch.Tensor:
    """θ with its ``mask`` coordinates times the s that puts ``value(θ)`` (``u`` at θ) at ``target`` inside
    ``window``: s = −1 first where the sign is wrong, then secant steps on log |s|; θ as it is where the value has
    no sign to aim."""
    scaled = lambda s: torch.where(mask, theta * s, theta)  # noqa: E731  (the θ reached so far)
    if not (u * target > 0 and math.isfinite(u)):
        flipped = scaled(-1.0)
        u = value(flipped)
        if not (u * target > 0 and math.isfinite(u)):
            return theta
        theta = flipped
    power = 1.0
    for _ in range(AIM_STEPS):
        if window[0] <= u <= window[1]:
            break
        s = (target / u) ** (1 / power)
        nearer = scaled(s)
        v = value(nearer)
        if not (v * target > 0 and math.isfinite(v)):
            break
        if abs(math.log(s)) > 1e-12 and v != u:
            power = min(max(math.log(v / u) / math.log(s), 0.1), 10.0)
        theta, u = nearer, v
    return theta
