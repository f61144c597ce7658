"""The toy models of chapter 1: ``f(x) = a·b·x`` and ``f(x) = a·b·c·x``.

One scalar parameter per factor. Its laws are in :mod:`conslaw_lite.laws.toy`.
"""

from __future__ import annotations

import torch
from torch import nn


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
        """``f(x) = (Π_j θ_j) · x`` for each row.

        Examples
        ========
        >>> ToyProduct(a=2.0, b=3.0, c=0.5)(torch.tensor([[1.0], [2.0]], dtype=torch.float64))  # 3x
        tensor([[3.],
                [6.]], dtype=torch.float64, grad_fn=<MulBackward0>)
        """
        return torch.stack(list(self.parameters())).prod() * x
