"""LayerNorm written out in elementary operations, so the law counter can differentiate it three times.

``LayerNorm(x) = γ ⊙ (x − x̄) / √(mean((x − x̄)²) + ε) (+ β)`` over the last dimension,
the same function as ``torch.nn.LayerNorm``. Why not use that one: the law counter
takes brackets of brackets (third derivatives, forward-over-reverse through
``torch.func``), and through torch's fused ``layer_norm`` kernel those come out
wrong — a depth-3 bracket of a ``Linear → nn.LayerNorm → Linear`` net has a
component of relative size ~1 along the gradient of a conservation law, which is
impossible (brackets of fields tangent to a level set stay tangent), and the count
drops from 7 to 3. Written out here, every derivative is composed from elementary
ones and the count is the theorem's (tested in ``tests/test_beyond.py``).
"""

from __future__ import annotations

import torch
from torch import nn


class LayerNorm(nn.Module):
    """``γ ⊙ (x − x̄) / √(var(x) + ε) + β`` over the last dimension (β only when ``bias=True``).

    Examples
    ========
    >>> import torch
    >>> x = torch.randn(2, 5, dtype=torch.float64)
    >>> norm = LayerNorm(5, eps=1e-5).double()
    >>> torch.allclose(norm(x), torch.nn.functional.layer_norm(x, (5,), eps=1e-5))
    True
    """

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = False) -> None:
        super().__init__()
        if eps < 0:
            raise ValueError(f"eps must be ≥ 0, got {eps}")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        centered = x - x.mean(-1, keepdim=True)
        out = self.weight * centered / torch.sqrt((centered * centered).mean(-1, keepdim=True) + self.eps)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, bias={self.bias is not None}"
