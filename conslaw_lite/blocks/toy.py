"""The toy models of chapter 1: ``f(x) = a·b·x`` and ``f(x) = a·b·c·x``.

One scalar parameter per factor. Gradient flow keeps ``a² − b²`` (and, with a
third factor, ``a² − c²``): the characteristics of ``b ∂_a h + a ∂_b h = 0``.
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.laws.registry import BlockLaws, Law, register_laws

NAMES = "abcdefgh"


class ToyProduct(nn.Module):
    """``f(x) = (Π_j θ_j) · x`` with scalar parameters named ``a, b, c, ...``.

    Examples
    ========
    >>> import torch
    >>> f = ToyProduct(a=2.0, b=3.0)
    >>> f(torch.ones(1, 1, dtype=torch.float64)).item()
    6.0
    """

    def __init__(self, **factors: float) -> None:
        super().__init__()
        if len(factors) < 2:
            raise ValueError(f"a product needs at least two factors, got {list(factors)}")
        for name, value in factors.items():
            self.register_parameter(name, nn.Parameter(torch.tensor(float(value), dtype=torch.float64)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, 1)
        return torch.stack(list(self.parameters())).prod() * x


def toy_laws(model: ToyProduct, prefix: str = "") -> dict[str, Law]:
    """``a² − θ_j²`` for each factor θ_j after the first: ``{"a²−b²": ..., "a²−c²": ...}``."""
    first, *rest = [n for n, _ in model.named_parameters(recurse=False)]
    return {f"{first}²−{n}²": _square_difference(prefix + first, prefix + n) for n in rest}


def _square_difference(u: str, v: str) -> Law:
    return lambda p: p[u] ** 2 - p[v] ** 2


@register_laws(ToyProduct)
def _toy_block(module: ToyProduct, prefix: str) -> BlockLaws:
    names = [n for n, _ in module.named_parameters(recurse=False)]
    controls = {f"{n}²": (lambda p, key=prefix + n: p[key] ** 2) for n in names}
    return BlockLaws(prefix.rstrip("."), "toy", toy_laws(module, prefix), controls)
