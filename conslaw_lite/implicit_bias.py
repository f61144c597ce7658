"""Implicit bias: the laws' values at the start decide which minimizer gradient descent reaches.

Moving θ₀ along its symmetry orbit (:mod:`conslaw_lite.orbits`) changes neither the function nor
the loss, only the laws' values h(θ₀); gradient flow keeps those, so it must end on the part of the
set of minimizers where ``h = h(θ₀)``. For the toy ``a·b·x = y`` (one data point) that point is
known in closed form (:func:`toy_limit`), and so are its norm and its sharpness (the top Hessian
eigenvalue): both grow with |h(θ₀)|, the balanced start h = 0 reaching the flattest minimum. For
networks :func:`limit_from` measures the same: train, then the loss, ``‖θ‖²`` and the sharpness
(:func:`sharpness`, from the full Hessian) where training ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite import Diverged, mse_loss
from conslaw_lite.families.ffn.block import FFN
from conslaw_lite.orbits import act, dilation, laws, move_to_level, orbits_of, parameters64, pieces_of, write
from conslaw_lite.teleport import LossFn, Setup, loss_at, train_curve

MAX_HESSIAN = 3000  # parameters: the full Hessian is D×D in float64 (72 MB at D = 3000)


def toy_limit(h0: float, c: float) -> tuple[float, float]:
    """Where gradient flow on ``½(a·b·x − y)²`` ends from a start with ``a² − b² = h0``: ``a·b = c = y/x``.

    ``a∞² = (h0 + √(h0² + 4c²)) / 2`` and ``b∞ = c / a∞`` (taking a > 0); ``a∞² + b∞² = √(h0² + 4c²)``,
    so the sharpness at the limit, ``x² (a∞² + b∞²)``, is smallest for the balanced start h0 = 0.

    Examples
    ========
    >>> [round(v, 12) for v in toy_limit(0.0, 3.0)]  # balanced: a = b = √3
    [1.732050807569, 1.732050807569]
    >>> a, b = toy_limit(8.0, 3.0); round(a * a - b * b, 12), round(a * b, 12)
    (8.0, 3.0)
    """
    a_sq = (h0 + math.sqrt(h0 * h0 + 4 * c * c)) / 2
    return math.sqrt(a_sq), c / math.sqrt(a_sq)


def sharpness(model: nn.Module, loss_fn: LossFn, k: int = 0) -> float:
    """``λ_max(∇²L_k(θ))``, the top eigenvalue of the full Hessian of the loss, in float64.

    Only for models of at most :data:`MAX_HESSIAN` parameters (``ValueError`` otherwise).

    Examples
    ========
    At a minimum of ``½(a·b − 3)²`` the Hessian is ``[b, a]ᵀ[b, a]``: λ_max = a² + b².

    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> round(sharpness(ToyProduct(a=3.0, b=1.0), mse_loss(one, 3 * one)), 12)
    10.0
    """
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    D = sum(p.numel() for _, p in named)
    if D > MAX_HESSIAN:
        raise ValueError(f"sharpness builds the full Hessian: the model has D = {D} > {MAX_HESSIAN} parameters")
    flat = torch.cat([p.detach().reshape(-1) for _, p in named]).double()

    def loss_of(theta: torch.Tensor) -> torch.Tensor:
        params, start = {}, 0
        for name, p in named:
            params[name] = theta[start : start + p.numel()].reshape(p.shape).to(p.dtype)
            start += p.numel()
        return loss_at(model, loss_fn, k, params)

    hessian = torch.autograd.functional.hessian(loss_of, flat)
    return float(torch.linalg.eigvalsh(hessian)[-1])


def set_imbalance(model: nn.Module, s: float) -> None:
    """Move ``model`` along its orbit to the balanced point h = 0, then by ``e^s`` along the dilation.

    The function is unchanged; ``s = 0`` is balanced, ``|s|`` sets how unbalanced (every rescaled unit's
    first side e^s times larger, the other e^s times smaller).

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=2.0, b=0.5)
    >>> set_imbalance(toy, math.log(2.0))  # from (1, 1): a → 2, b → 1/2
    >>> round(toy.a.item(), 12), round(toy.b.item(), 12)
    (2.0, 0.5)
    """
    move_to_level(model)
    pieces = pieces_of(orbits_of(model))
    write(model, act(pieces, parameters64(model), dilation(pieces, s)))


def imbalance(model: nn.Module) -> float:
    """``‖h(θ)‖``: the Euclidean norm of every orbit law of ``model`` together (0 when balanced).

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> imbalance(ToyProduct(a=2.0, b=1.0))  # |a² − b²|
    3.0
    """
    pieces = pieces_of(orbits_of(model))
    return float(torch.cat(laws(pieces, parameters64(model))).norm())


@dataclass(frozen=True)
class Limit:
    """Where a run ended: the start's ``‖h(θ₀)‖``, then the loss, ``‖θ‖²`` and the sharpness at the end."""

    imbalance: float
    loss: float
    norm_sq: float
    sharpness: float


def limit_from(model: nn.Module, loss_fn: LossFn, *, lr: float, steps: int) -> Limit:
    """Train ``model`` in place with ``steps`` steps of GD (:func:`conslaw_lite.teleport.train_curve`), measure the end.

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> end = limit_from(ToyProduct(a=2.0, b=1.0), mse_loss(one, 3 * one), lr=0.05, steps=400)
    >>> a, b = toy_limit(3.0, 3.0)  # GD with a small step ends near the flow's limit
    >>> end.loss < 1e-20, abs(end.sharpness - (a * a + b * b)) < 0.05
    (True, True)
    """
    start = imbalance(model)
    curve = train_curve(model, loss_fn, lr=lr, steps=steps)
    if curve.diverged_at is not None:
        raise Diverged(curve.diverged_at, f"GD at lr = {lr:g} blew up; the limit needs a smaller step")
    norm_sq = float(sum((p.detach().double() ** 2).sum() for p in model.parameters()))
    return Limit(start, float(curve.loss[-1]), norm_sq, sharpness(model, loss_fn))


def teacher_setup(activation: str, d: int, r: int, m: int, *, samples: int = 20) -> Setup:
    """``seed -> (student, loss)``: an :class:`~conslaw_lite.families.ffn.block.FFN` ``A·act(Bx)`` and the MSE on the
    outputs of a teacher FFN of the same shape, so that a minimizer of loss 0 exists and every start can reach one.

    Examples
    ========
    >>> student, loss = teacher_setup("relu", 4, 3, 3)(0)
    >>> tuple(loss.x.shape), float(loss(student, 0).detach()) > 0
    ((20, 4), True)
    """

    def setup(seed: int) -> tuple[FFN, LossFn]:
        g = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        student, teacher = FFN(d, r, m, activation=activation).double(), FFN(d, r, m, activation=activation).double()
        x = torch.randn(samples, d, generator=g, dtype=torch.float64)
        with torch.no_grad():
            return student, mse_loss(x, teacher(x))

    return setup
