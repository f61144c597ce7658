"""Linear attention written out in sympy, for :func:`conslaw_lite.symbolic.derive`.

Head i sees its parameters only through ``M_i = Q_i K_iᵀ`` and ``N_i = V_i O_iᵀ``, as softmax attention
does, but the output ``Σ_s (x_p M_i x_sᵀ)(x_s N_i)/(T√k)`` is a polynomial: no undefined function, and the
x-free system comes from its coefficients alone. The scale between M_i and N_i is then one more direction
the PDEs leave free, and ``derive`` finds its law.
"""

from __future__ import annotations

import sympy as sp

from conslaw_lite.families.linear_attention.block import LinearAttention
from conslaw_lite.families.linear_attention.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock, symbol_matrix


def linear_attention_block(d: int, k: int, n_heads: int = 1, T: int = 2) -> SymbolicBlock:
    """``Σ_i (X M_i Xᵀ/√k) X N_i / T`` with ``M_i = Q_i K_iᵀ``, ``N_i = V_i O_iᵀ``.

    Examples
    ========
    >>> b = linear_attention_block(1, 1, T=1)
    >>> b.f, b.through
    ([M1_11*N1_11*x_11**3], {M1_11: K1_11*Q1_11, N1_11: O1_11*V1_11})
    """
    X = symbol_matrix("x_", T, d)
    params, through, entries, outputs = [], {}, {}, sp.zeros(T, d)
    for i in range(n_heads):
        W = {m: symbol_matrix(f"{m}{i + 1}_", d, k) for m in "QKVO"}
        params += [s for m in "QKVO" for s in W[m]]
        for m in "QKV":  # Q_i = Q.weight[i·k:(i+1)·k, :]ᵀ
            entries |= {W[m][a, b]: (f"{m}.weight", (i * k + b, a)) for a in range(d) for b in range(k)}
        entries |= {W["O"][a, b]: ("O.weight", (a, i * k + b)) for a in range(d) for b in range(k)}
        M, N = symbol_matrix(f"M{i + 1}_", d, d), symbol_matrix(f"N{i + 1}_", d, d)
        for sym, product in ((M, W["Q"] * W["K"].T), (N, W["V"] * W["O"].T)):
            through |= {sym[a, b]: sp.expand(product[a, b]) for a in range(d) for b in range(d)}
        outputs += (X * M * X.T) * (X * N) / (T * sp.sqrt(k))  # (T, T)·(T, d)
    return SymbolicBlock([sp.expand(e) for e in outputs], params, list(X), {}, through, entries)


def case(name: str, size: str) -> Case:
    """The derivation case ``linear-attention``: one head, T = 2, d = k = 2 (small) or d = 3, k = 1 (large).

    (d = 3, k = 2 derives too, in about two minutes on one core: the PDE fields' common factors are slow to divide out.)

    Examples
    ========
    >>> case("linear-attention", "small").formula_text
    'n·(k(k+1) + 1) = 1·(2·3 + 1) = 7'
    """
    (d, k), n, T = ((3, 1) if size == "large" else (2, 2)), 1, 2
    module = LinearAttention(d, n, k).double()
    block = linear_attention_block(d, k, n, T)
    return Case(block, module, (T, d), *formula(n, k), {"d": d, "k": k, "n": n, "T": T})
