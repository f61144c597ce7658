"""Deep feed-forward stacks: L hidden layers of a plain activation, or of SwiGLU units, then a linear read-out.

``widths = (d, r_1, …, r_L, m)``. Plain (``relu``, ``gelu``, ``silu``)::

    h_0 = x,   h_l = ρ(W_l h_{l−1}),   f(x) = A h_L          W_l = ``W.{l−1}.weight`` (r_l × r_{l−1})

SwiGLU (``swiglu``): ``h_l = silu(B_l h_{l−1}) ⊙ (C_l h_{l−1})`` with ``B_l, C_l`` = ``B.{l−1}``, ``C.{l−1}``.
With L = 1 these are the FFN and SwiGLU blocks of :mod:`conslaw_lite.families.ffn`; no biases, no skips
(a skip between hidden layers of unequal width has no meaning, and the laws of ``x + ·`` are chapter 16's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.activations import ACTIVATIONS

KINDS = ("relu", "gelu", "silu", "swiglu")


class DeepFFN(nn.Module):
    """``A·ρ(W_L ⋯ ρ(W_1 x))`` (plain ρ) or ``A·h_L`` with SwiGLU hidden layers, ``widths = (d, r_1, …, r_L, m)``.

    Examples
    ========
    >>> net = DeepFFN((3, 4, 4, 2), "swiglu").double()
    >>> net(torch.randn(5, 3, dtype=torch.float64)).shape, net.depth
    (torch.Size([5, 2]), 2)
    >>> [tuple(p.shape) for p in DeepFFN((3, 4, 2, 1), "relu").parameters()]
    [(4, 3), (2, 4), (1, 2)]
    >>> DeepFFN((3, 2), "relu")
    Traceback (most recent call last):
    ...
    ValueError: widths must be (d, r_1, ..., r_L, m) with L ≥ 1 hidden layers, got (3, 2)
    """

    def __init__(self, widths: tuple[int, ...], kind: str = "relu") -> None:
        super().__init__()
        widths = tuple(widths)
        if len(widths) < 3:
            raise ValueError(f"widths must be (d, r_1, ..., r_L, m) with L ≥ 1 hidden layers, got {widths}")
        if not all(isinstance(w, int) and w >= 1 for w in widths):
            raise ValueError(f"every width must be a positive integer, got {widths}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.widths, self.kind, self.depth = widths, kind, len(widths) - 2
        pairs = list(zip(widths[:-2], widths[1:-1]))  # (r_{l−1}, r_l) for the hidden layers
        if kind == "swiglu":
            self.B = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in pairs)
            self.C = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in pairs)
        else:
            self.W = nn.ModuleList(nn.Linear(a, b, bias=False) for a, b in pairs)
        self.A = nn.Linear(widths[-2], widths[-1], bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """The stack, layer by layer; then the read-out A.

        Examples
        ========
        One ReLU layer with W = [1, −1], A = [2] is the FFN: ``f(3, 1) = 2·relu(2) = 4``.

        >>> net = DeepFFN((2, 1, 1), "relu").double()
        >>> with torch.no_grad(): _ = net.W[0].weight.copy_(torch.tensor([[1.0, -1.0]])), net.A.weight.fill_(2.0)
        >>> net(torch.tensor([[3.0, 1.0]], dtype=torch.float64)).item()
        4.0
        """
        if x.shape[-1] != self.widths[0]:
            raise ValueError(f"expected input of width {self.widths[0]}, got shape {tuple(x.shape)}")
        h = x
        if self.kind == "swiglu":
            for B, C in zip(self.B, self.C):
                h = F.silu(B(h)) * C(h)  # (..., r_l)
        else:
            for W in self.W:
                h = ACTIVATIONS[self.kind].torch(W(h))  # (..., r_l)
        return self.A(h)  # (..., m)
