"""Feed-forward blocks: ``FFN = A·act(Bx)`` and ``SwiGLU = A·(silu(Bx) ⊙ Cx)``.

The paper writes an input row x ∈ R^d and matrices A ∈ R^(m×r), B, C ∈ R^(r×d).
In ``nn.Linear`` terms (``y = W x``, ``W ∈ R^(out×in)``) the weights are exactly
the paper's matrices: ``B.weight`` is B (r×d), ``C.weight`` is C (r×d) and
``A.weight`` is A (m×r), so hidden unit i owns row ``B_{i,:}`` (and ``C_{i,:}``)
and column ``A_{:,i}``. Optional biases are ``B.bias = b``, ``C.bias = c`` (r)
and ``A.bias = a`` (m).

:mod:`.symbolic` writes the same blocks in sympy; their laws are in :mod:`.laws`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.activations import ACTIVATIONS


def check_sizes(d: int, r: int, m: int) -> None:
    """``ValueError`` naming the size (d, r or m) that is not a positive integer.

    Examples
    ========
    >>> check_sizes(3, 0, 2)
    Traceback (most recent call last):
    ...
    ValueError: r must be a positive integer, got 0
    """
    for name, v in (("d", d), ("r", r), ("m", m)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


class FFN(nn.Module):
    """``f(x) = A·act(Bx + b) + a`` with B = ``self.B.weight`` (r×d), A = ``self.A.weight`` (m×r).

    ``activation`` is ``"gelu"``, ``"silu"``, ``"relu"`` or ``"linear"``; biases
    b, a only when ``bias=True``. Input ``(batch, d)`` or ``(batch, T, d)``.

    Examples
    ========
    >>> f = FFN(3, 4, 2, activation="relu").double()
    >>> f(torch.ones(5, 3, dtype=torch.float64)).shape
    torch.Size([5, 2])
    >>> tuple(f.B.weight.shape), tuple(f.A.weight.shape)  # B: r×d, A: m×r
    ((4, 3), (2, 4))
    """

    def __init__(self, d: int, r: int, m: int, activation: str = "gelu", bias: bool = False) -> None:
        super().__init__()
        check_sizes(d, r, m)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.B = nn.Linear(d, r, bias=bias)
        self.A = nn.Linear(r, m, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """``f(x) = A·act(Bx)`` (plus biases when ``bias=True``).

        Examples
        ========
        ReLU with ``B = [1, −1]``, ``A = [2]``: ``f(3, 1) = 2·relu(2) = 4`` and ``f(1, 3) = 2·relu(−2) = 0``.

        >>> f = FFN(2, 1, 1, activation="relu").double()
        >>> with torch.no_grad():
        ...     _ = f.B.weight.copy_(torch.tensor([[1.0, -1.0]])), f.A.weight.copy_(torch.tensor([[2.0]]))
        >>> f(torch.tensor([[3.0, 1.0], [1.0, 3.0]], dtype=torch.float64)).flatten().tolist()
        [4.0, 0.0]
        """
        hidden = ACTIVATIONS[self.activation].torch(self.B(x))  # (..., r)
        return self.A(hidden)  # (..., m)


class SwiGLU(nn.Module):
    """``f(x) = A·(silu(Bx + b) ⊙ (Cx + c)) + a``: B is the gate, C the linear ("value") branch.

    B = ``self.B.weight``, C = ``self.C.weight`` (r×d), A = ``self.A.weight`` (m×r);
    biases b, c, a only when ``bias=True``. Input ``(batch, d)`` or ``(batch, T, d)``.

    Examples
    ========
    >>> f = SwiGLU(3, 4, 2).double()
    >>> f(torch.ones(5, 7, 3, dtype=torch.float64)).shape
    torch.Size([5, 7, 2])
    """

    def __init__(self, d: int, r: int, m: int, bias: bool = False) -> None:
        super().__init__()
        check_sizes(d, r, m)
        self.B = nn.Linear(d, r, bias=bias)
        self.C = nn.Linear(d, r, bias=bias)
        self.A = nn.Linear(r, m, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        """``f(x) = A·(silu(Bx) ⊙ Cx)`` (plus biases when ``bias=True``), ``silu(z) = z/(1 + e^{−z})``.

        Examples
        ========
        >>> f = SwiGLU(3, 4, 2).double()
        >>> x = torch.randn(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> B, C, A = f.B.weight, f.C.weight, f.A.weight
        >>> bool(torch.allclose(f(x), (F.silu(x @ B.T) * (x @ C.T)) @ A.T))
        True
        """
        hidden = F.silu(self.B(x)) * self.C(x)  # (..., r)
        return self.A(hidden)  # (..., m)


