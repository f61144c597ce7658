"""Multi-head latent attention written out in sympy for :func:`conslaw_lite.symbolic.derive` (chapter 15).

As for attention (:mod:`conslaw_lite.families.attention.symbolic`), the softmax entries are undefined
functions and head h is seen through two d×d matrices per offset Δ = s − p of query p and key s:

    M_h^(Δ) = DQᵀ (UQ_hᵀ UK_h DKV + QR_hᵀ R_Δ KR)      (score x_p M_h^(Δ) x_sᵀ / √(k + d_r))
    N_h     = DKVᵀ UV_hᵀ O_hᵀ                          (value-output: row p gets Σ_s A_ps x_s N_h)

with R_Δ the RoPE rotation at a random rational point of the circle. The latent RMSNorm is not
written here: its RMS factor obeys a polynomial relation with x, which ``derive``'s independence
step does not reduce (chapter 05, QK-norm), so ``mla-norm`` is counted numerically only.
"""

from __future__ import annotations

import sympy as sp

from conslaw_lite.families.attention.symbolic import SOFTMAX, circle_point, rope_rotation
from conslaw_lite.families.mla.archs import generic_block
from conslaw_lite.families.mla.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock, symbol_matrix


def _rows_of(name: str, M: sp.Matrix, offset: int = 0, columns: bool = False) -> dict:
    """Where each entry of M lives in the torch weight ``name``: rows offset.. (or columns offset.. of O)."""
    if columns:
        return {M[a, b]: (name, (a, offset + b)) for a in range(M.rows) for b in range(M.cols)}
    return {M[a, b]: (name, (offset + a, b)) for a in range(M.rows) for b in range(M.cols)}


def mla_block(
    d: int, n: int, k: int, k_v: int, d_r: int, d_c: int, d_cq: int, T: int = 2, seed: int = 0
) -> SymbolicBlock:
    """The block ``Σ_h Σ_s softmax_s(x_p M_h^(s−p) x_sᵀ/√(k+d_r)) x_s N_h`` with M_h, N_h of the module docstring.

    Examples
    ========
    >>> b = mla_block(1, 1, 1, 1, 2, 1, 1)
    >>> len(b.params), len(b.through)  # D = 1+1+2+1+1+1+2+1; M^(−1), M^(0), M^(1) and N: 1×1 each
    (10, 4)
    """
    X = symbol_matrix("x_", T, d)
    DQ, DKV, KR = symbol_matrix("DQ_", d_cq, d), symbol_matrix("DKV_", d_c, d), symbol_matrix("KR_", d_r, d)
    params = list(DQ) + list(DKV) + list(KR)
    entries = _rows_of("DQ.weight", DQ) | _rows_of("DKV.weight", DKV) | _rows_of("KR.weight", KR)
    circle = circle_point(d_r, seed)
    through, outputs = {}, sp.zeros(T, d)
    for h in range(n):
        UQ, QR = symbol_matrix(f"UQ{h + 1}_", k, d_cq), symbol_matrix(f"QR{h + 1}_", d_r, d_cq)
        UK, UV = symbol_matrix(f"UK{h + 1}_", k, d_c), symbol_matrix(f"UV{h + 1}_", k_v, d_c)
        O = symbol_matrix(f"O{h + 1}_", d, k_v)
        params += list(UQ) + list(QR) + list(UK) + list(UV) + list(O)
        entries |= _rows_of("UQ.weight", UQ, h * k) | _rows_of("QR.weight", QR, h * d_r)
        entries |= _rows_of("UK.weight", UK, h * k) | _rows_of("UV.weight", UV, h * k_v)
        entries |= _rows_of("O.weight", O, h * k_v, columns=True)
        M = {}
        for delta in range(-(T - 1), T):
            M[delta] = symbol_matrix(f"M{h + 1}^({delta})_", d, d)
            rope = (QR.T * rope_rotation(d_r, delta) * KR).xreplace(circle)
            product = DQ.T * (UQ.T * UK * DKV + rope)  # (d, d)
            through |= {M[delta][a, b]: sp.expand(product[a, b]) for a in range(d) for b in range(d)}
        N = symbol_matrix(f"N{h + 1}_", d, d)
        through |= {N[a, b]: sp.expand((DKV.T * UV.T * O.T)[a, b]) for a in range(d) for b in range(d)}
        S = sp.Matrix(T, T, lambda p, s: (X[p, :] * M[s - p] * X[s, :].T)[0] / sp.sqrt(k + d_r))
        values = X * N  # (T, d)
        for p in range(T):
            for s in range(T):
                outputs[p, :] += SOFTMAX(s, *S.row(p)) * values[s, :]
    note = f"RoPE rotation at c, s = {circle}"
    return SymbolicBlock(list(outputs), params, list(X), {SOFTMAX: "softmax"}, through, entries, note)


# size -> (d, n, k, k_v, d_r, d_c, d_cq): two heads; two RoPE blocks. A capped size (k > d_cq + d_c) derives to
# the formula too, but its quadratic laws are more than N (polynomially dependent): tests/test_mla.py has it.
SIZES = {"small": (1, 2, 1, 1, 2, 1, 1), "large": (2, 1, 1, 1, 4, 1, 1)}
NAMES = ("d", "n", "k", "k_v", "d_r", "d_c", "d_cq")


def case(name: str, size: str) -> Case:
    """The derivation case ``mla`` (no latent norm) at ``size``: two heads (small), two RoPE blocks (large).

    Examples
    ========
    >>> c = case("mla", "small")
    >>> c.formula, c.sizes["n"]
    (7, 2)
    """
    if name != "mla":
        raise ValueError(f"the mla family derives only the case 'mla' (no latent norm), not {name!r}")
    sizes = SIZES[size]
    return Case(mla_block(*sizes), generic_block(*sizes), (2, sizes[0]), *formula(*sizes), dict(zip(NAMES, sizes)))
