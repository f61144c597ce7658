"""A residual block ``f(x) = x + A·ρ(Bx + b) + a``: the FFN of :mod:`conslaw_lite.families.ffn` plus a skip.

The skip has no parameter, and it is the identity: it adds nothing that a rescaling of hidden unit i
(``B_{i,:} → λB_{i,:}``, ``b_i → λb_i``, ``A_{:,i} → A_{:,i}/λ``) would have to respect, so the block keeps
the FFN's laws, no more and no fewer (Marcotte, Gribonval & Peyré 2025, for ReLU ResNets).
"""

from __future__ import annotations

import torch

from conslaw_lite.families.ffn.block import FFN


class ResidualFFN(FFN):
    """``f(x) = x + A·ρ(Bx + b) + a`` with B = ``B.weight`` (r×d), A = ``A.weight`` (d×r).

    Examples
    ========
    >>> block = ResidualFFN(3, 4, activation="relu").double()
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> bool(torch.allclose(block(x) - x, FFN.forward(block, x)))  # the skip adds x
    True
    >>> ResidualFFN(3, 0)
    Traceback (most recent call last):
    ...
    ValueError: r must be a positive integer, got 0
    """

    def __init__(self, d: int, r: int, activation: str = "relu", bias: bool = False) -> None:
        super().__init__(d, r, d, activation=activation, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """``x + A·ρ(Bx)`` (plus biases when ``bias=True``).

        Examples
        ========
        With A = 0 the block is the identity:

        >>> block = ResidualFFN(2, 3).double()
        >>> _ = torch.nn.init.zeros_(block.A.weight)
        >>> block(torch.tensor([[1.0, -2.0]], dtype=torch.float64)).tolist()
        [[1.0, -2.0]]
        """
        return x + super().forward(x)
