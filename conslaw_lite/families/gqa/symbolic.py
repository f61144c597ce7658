"""Grouped-query attention written out in sympy, for :func:`conslaw_lite.symbolic.derive` at the smallest sizes.

Query head h of group g sees its parameters only through ``M_h = Q_h K_gᵀ`` (the scores
``x_p M_h x_sᵀ/√k``) and ``N_h = V_g O_hᵀ`` (the values): the same chain as multi-head attention
(:func:`conslaw_lite.families.attention.symbolic.attention_block`), with K_g and V_g shared by the
``n_q/n_kv`` query heads of a group, so each relation ``⟨∇h, ∇M_h⟩ = 0`` moves K_g together with Q_h.
The softmax entries are an undefined function. With RoPE a head sees one ``M_h^(Δ) = Q_h R_Δ K_gᵀ`` per offset
Δ. QK-norm is not written here: its RMS factor satisfies a polynomial relation with x, which the chain's
independence step does not handle (chapter 5); its counts come from the numerical certificates.
"""

from __future__ import annotations

import sympy as sp

from conslaw_lite.families.attention.symbolic import SOFTMAX, circle_point, rope_rotation
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.gqa.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock, symbol_matrix


def _entries(W: sp.Matrix, name: str, head: int, k: int, *, columns: bool) -> dict:
    """Where each symbol of a head's (d, k) matrix lives in the torch block: rows (Q, K, V) or columns (O)."""
    return {
        W[a, b]: (name, (a, head * k + b) if columns else (head * k + b, a))
        for a in range(W.rows)
        for b in range(W.cols)
    }


def gqa_block(d: int, k: int, n_q: int, n_kv: int, T: int = 2, pe: str = "none", seed: int = 0) -> SymbolicBlock:
    """``Σ_h softmax(X M_h Xᵀ/√k) X N_h`` with ``M_h = Q_h K_gᵀ``, ``N_h = V_g O_hᵀ``, g = h // (n_q/n_kv).

    ``pe="rope"``: the score of query p and key s is ``x_p M_h^(s−p) x_sᵀ/√k``, ``M_h^(Δ) = Q_h R_Δ K_gᵀ``, the
    rotation's cos and sin at a random rational point of the circle (:func:`circle_point`).

    Examples
    ========
    >>> b = gqa_block(1, 1, n_q=2, n_kv=1)
    >>> b.through
    {M1_11: K1_11*Q1_11, N1_11: O1_11*V1_11, M2_11: K1_11*Q2_11, N2_11: O2_11*V1_11}
    """
    if n_q % n_kv:
        raise ValueError(f"n_q ({n_q}) must be a multiple of n_kv ({n_kv}): equal groups")
    X = symbol_matrix("x_", T, d)
    Q, O = ([symbol_matrix(f"{m}{h + 1}_", d, k) for h in range(n_q)] for m in "QO")
    K, V = ([symbol_matrix(f"{m}{g + 1}_", d, k) for g in range(n_kv)] for m in "KV")
    params = [s for group in (Q, K, V, O) for W in group for s in W]
    entries = {}
    for name, group, columns in (("Q.weight", Q, False), ("K.weight", K, False), ("V.weight", V, False),
                                 ("O.weight", O, True)):
        for i, W in enumerate(group):
            entries |= _entries(W, name, i, k, columns=columns)
    through, outputs = {}, sp.zeros(T, d)
    offsets = range(-(T - 1), T) if pe == "rope" else [0]
    circle = circle_point(k, seed) if pe == "rope" else {}
    for h in range(n_q):
        g = h // (n_q // n_kv)
        M = {delta: symbol_matrix(f"M{h + 1}^({delta})_" if pe == "rope" else f"M{h + 1}_", d, d) for delta in offsets}
        N = symbol_matrix(f"N{h + 1}_", d, d)
        products = [(M[delta], Q[h] * (rope_rotation(k, delta) if pe == "rope" else sp.eye(k)) * K[g].T)
                    for delta in offsets] + [(N, V[g] * O[h].T)]
        for sym, product in products:
            through |= {sym[a, b]: sp.expand(product[a, b].xreplace(circle)) for a in range(d) for b in range(d)}
        S = sp.Matrix(T, T, lambda p, s: (X[p, :] * M[s - p if pe == "rope" else 0] * X[s, :].T)[0] / sp.sqrt(k))
        values = X * N  # (T, d)
        for p in range(T):
            for s in range(T):
                outputs[p, :] += SOFTMAX(s, *S.row(p)) * values[s, :]
    note = f"RoPE rotation at c, s = {circle}" if circle else ""
    return SymbolicBlock(list(outputs), params, list(X), {SOFTMAX: "softmax"}, through, entries, note)


def case(name: str, size: str) -> Case:
    """The derivation case ``gqa`` (4 queries on 2 K/V heads), ``mqa`` (2, then 3 queries on one K/V head) or
    ``gqa-rope`` (2 queries on 1 K/V head, then 4 on 2).

    T = 2; small: d = k = 2 (``gqa``: d = 2, k = 1, a few seconds); large: d = 3, k = 2 (``gqa``, ``gqa-rope``:
    d = k = 2).

    Examples
    ========
    >>> c = case("mqa", "small")
    >>> c.formula, c.sizes
    (6, {'d': 2, 'k': 2, 'n_q': 2, 'n_kv': 1, 'T': 2})
    >>> case("gqa", "small").formula_text
    'n_kv·k(k+1) = 2·1·2 = 4'
    """
    big = size == "large"
    n_q, n_kv = {"gqa": (4, 2), "mqa": (3, 1) if big else (2, 1), "gqa-rope": (4, 2) if big else (2, 1)}[name]
    d, k, T = (3 if big else 2), 2, 2
    if name == "gqa":
        d, k = 2, (2 if big else 1)
    if name == "gqa-rope":
        d = 2
    pe = "rope" if name == "gqa-rope" else "none"
    module = GroupedQueryAttention(d, n_q, n_kv, k, pe=pe).double()
    block = gqa_block(d, k, n_q, n_kv, T, pe=pe)
    sizes = {"d": d, "k": k, "n_q": n_q, "n_kv": n_kv, "T": T}
    return Case(block, module, (T, d), *formula(n_kv, k, pe=pe), sizes)
