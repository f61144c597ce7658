"""Feed-forward blocks in sympy: ``A·act(Bx)`` and ``A·(silu(Bx) ⊙ Cx)``, for the symbolic chain.

:func:`sympy_form` writes the blocks of :mod:`.block` as sympy expressions (a concrete activation,
for :func:`conslaw_lite.symbolic.quadratic_laws`); :func:`ffn_block` writes them with an undefined
ρ for :func:`conslaw_lite.symbolic.derive`, and :func:`case` gives the derivation cases of the book.
"""

from __future__ import annotations

import sympy as sp
from torch import nn

from conslaw_lite.activations import ACTIVATIONS
from conslaw_lite.families.ffn.block import FFN, SwiGLU, check_sizes
from conslaw_lite.families.ffn.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock

RHO = sp.Function("rho")  # the activation ρ, undefined: the derivation uses only its shapes


GLU = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}  # A·(ρ(Bx) ⊙ Cx): the gate activation ρ of each


def ffn_block(block: str, d: int, r: int, m: int) -> SymbolicBlock:
    """``A·ρ(Bx)`` (``block`` = gelu, silu, relu, linear) or ``A·(ρ(Bx) ⊙ Cx)`` (swiglu, geglu, reglu).

    GELU and SiLU give the same expression (ρ undefined, independent shapes: the paper's
    rule covers both), and so do SwiGLU and GeGLU; ReLU, linear and ReGLU carry their identity.

    Examples
    ========
    >>> b = ffn_block("relu", 1, 1, 1)
    >>> b.f, b.identities
    ([A_11*rho(B_11*x_1)], {rho: 'relu'})
    """
    if block not in (*ACTIVATIONS, *GLU):
        raise ValueError(f"block must be one of {(*ACTIVATIONS, *GLU)}, got {block!r}")
    f, params, x = sympy_form("swiglu" if block in GLU else block, d, r, m, act=RHO)
    identity = ACTIVATIONS[GLU.get(block, block)].identity
    entries = {}
    for p in params:  # A_ji, B_ik, C_ik (1-based) are A.weight[j−1, i−1], ...
        letter, (row, col) = p.name[0], p.name[2:]
        entries[p] = (f"{letter}.weight", (int(row) - 1, int(col) - 1))
    return SymbolicBlock(f, params, x, {RHO: identity} if identity else {}, torch_entries=entries)


def ffn_module(block: str, d: int, r: int, m: int) -> nn.Module:
    """The torch block that :func:`ffn_block` writes in sympy (float64, no biases).

    Examples
    ========
    >>> type(ffn_module("swiglu", 2, 2, 1)).__name__
    'SwiGLU'
    """
    model = SwiGLU(d, r, m) if block == "swiglu" else FFN(d, r, m, activation=block)
    return model.double()


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
    check_sizes(d, r, m)
    acts = {name: a.sympy for name, a in ACTIVATIONS.items()}
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


def case(name: str, size: str) -> Case:
    """The derivation case ``name`` (``ffn-gelu``, ``ffn-silu``, ``ffn-relu``, ``ffn-linear``, ``swiglu``):
    d = r = m = 2 small, (3, 3, 2) large.

    Examples
    ========
    >>> c = case("ffn-linear", "small")
    >>> c.formula, c.formula_text, c.input_shape
    (3, 'r(r+1)/2 = 2·3/2 = 3', (2,))
    """
    block = name.removeprefix("ffn-")
    d, r, m = (3, 3, 2) if size == "large" else (2, 2, 2)
    return Case(ffn_block(block, d, r, m), ffn_module(block, d, r, m), (d,), *formula(block, r))
