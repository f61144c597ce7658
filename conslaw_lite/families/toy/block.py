"""The toy models of chapter 1: ``f(x) = a·b·x`` and ``f(x) = a·b·c·x``.

One scalar parameter per factor, or one vector per factor for an ensemble: entry i of
every factor is toy model i, and all of them train at once. Its laws are in
:mod:`conslaw_lite.families.toy.laws`.
"""

from __future__ import annotations

import torch
from torch import nn


class ToyProduct(nn.Module):
    """``f(x) = (Π_j θ_j) · x`` with parameters named ``a, b, c, ...``: scalars, or N-vectors for N models.

    Examples
    ========
    >>> import torch
    >>> f = ToyProduct(a=2.0, b=3.0)
    >>> f(torch.ones(1, 1, dtype=torch.float64)).item()
    6.0
    >>> ensemble = ToyProduct(a=torch.tensor([1.0, 2.0]), b=torch.tensor([3.0, 4.0]))  # two models
    >>> ensemble(torch.ones(1, 1, dtype=torch.float64)).tolist()  # (batch, N): model i in column i
    [[3.0, 8.0]]
    """

    def __init__(self, **factors: float | torch.Tensor) -> None:
        super().__init__()
        if len(factors) < 2:
            raise ValueError(f"a product needs at least two factors, got {list(factors)}")
        shapes = {name: tuple(torch.as_tensor(value).shape) for name, value in factors.items()}
        if len(set(shapes.values())) > 1 or len(next(iter(shapes.values()))) > 1:
            raise ValueError(f"the factors must be scalars or vectors of one length N, got shapes {shapes}")
        for name, value in factors.items():
            self.register_parameter(name, nn.Parameter(torch.as_tensor(value, dtype=torch.float64).clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, 1) -> (batch, 1), or (batch, N) for N models
        """``f(x) = (Π_j θ_j) · x`` for each row (and each model of an ensemble).

        Examples
        ========
        >>> ToyProduct(a=2.0, b=3.0, c=0.5)(torch.tensor([[1.0], [2.0]], dtype=torch.float64))  # 3x
        tensor([[3.],
                [6.]], dtype=torch.float64, grad_fn=<MulBackward0>)
        """
        return torch.stack(list(self.parameters())).prod(0) * x
