"""Feed-forward blocks: ``FFN = A·act(Bx)`` and ``SwiGLU = A·(silu(Bx) ⊙ Cx)``.

The paper writes an input row x ∈ R^d and matrices A ∈ R^(m×r), B, C ∈ R^(r×d).
In ``nn.Linear`` terms (``y = W x``, ``W ∈ R^(out×in)``) the weights are exactly
the paper's matrices: ``B.weight`` is B (r×d), ``C.weight`` is C (r×d) and
``A.weight`` is A (m×r), so hidden unit i owns row ``B_{i,:}`` (and ``C_{i,:}``)
and column ``A_{:,i}``. Optional biases are ``B.bias = b``, ``C.bias = c`` (r)
and ``A.bias = a`` (m).

:func:`sympy_form` writes the same blocks as sympy expressions at small sizes,
for :func:`conslaw_lite.symbolic.quadratic_laws`. Their laws are in
:mod:`conslaw_lite.laws.ffn`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {
    "gelu": F.gelu,  # x Φ(x), the exact (erf) form
    "silu": F.silu,  # x σ(x)
    "relu": F.relu,
    "linear": lambda z: z,
}


def _check_sizes(d: int, r: int, m: int) -> None:
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
        _check_sizes(d, r, m)
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
        hidden = ACTIVATIONS[self.activation](self.B(x))  # (..., r)
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
        _check_sizes(d, r, m)
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


def sympy_form(block: str, d: int, r: int, m: int, act=None) -> tuple[list, list, list]:
    """The block as sympy expressions: ``(outputs f_1..f_m, parameters, inputs x_1..x_d)``.

    ``block`` is ``"gelu"``, ``"silu"``, ``"relu"``, ``"linear"`` (an :class:`FFN`)
    or ``"swiglu"``. Parameters are the symbols ``A_ji, B_ik, C_ik`` (1-based);
    GELU is ``z/2·(1 + erf(z/√2))``, SiLU ``z/(1 + e^{−z})``, ReLU ``max(z, 0)``.
    ``act``, an undefined sympy ``Function`` (ρ), stands for the activation instead (the
    gate's, for SwiGLU), as :func:`conslaw_lite.symbolic.derive` wants it.
    No biases: the symbolic chapter studies the paper's matrices.

    Examples
    ========
    >>> import sympy as sp
    >>> f, params, xs = sympy_form("swiglu", 1, 1, 1)
    >>> f
    [A_11*B_11*C_11*x_1**2/(1 + exp(-B_11*x_1))]
    >>> [str(p) for p in params]
    ['A_11', 'B_11', 'C_11']
    >>> sympy_form("swiglu", 1, 1, 1, act=sp.Function("rho"))[0]
    [A_11*C_11*x_1*rho(B_11*x_1)]
    """
    import sympy as sp

    _check_sizes(d, r, m)
    acts = {
        "gelu": lambda z: z / 2 * (1 + sp.erf(z / sp.sqrt(2))),
        "silu": lambda z: z / (1 + sp.exp(-z)),
        "relu": lambda z: sp.Max(z, 0),
        "linear": lambda z: z,
    }
    if act is not None:
        acts = {name: act for name in acts}
    if block not in (*acts, "swiglu"):
        raise ValueError(f"block must be one of {(*acts, 'swiglu')}, got {block!r}")
    x = list(sp.symbols(f"x_1:{d + 1}", real=True))
    A = sp.Matrix(m, r, lambda j, i: sp.Symbol(f"A_{j + 1}{i + 1}", real=True))
    B = sp.Matrix(r, d, lambda i, k: sp.Symbol(f"B_{i + 1}{k + 1}", real=True))
    Bx = B * sp.Matrix(x)  # (r, 1)
    params = list(A) + list(B)
    if block == "swiglu":
        C = sp.Matrix(r, d, lambda i, k: sp.Symbol(f"C_{i + 1}{k + 1}", real=True))
        Cx = C * sp.Matrix(x)
        hidden = sp.Matrix(r, 1, lambda i, _: acts["silu"](Bx[i]) * Cx[i])
        params += list(C)
    else:
        hidden = Bx.applyfunc(acts[block])
    return list(A * hidden), params, x
