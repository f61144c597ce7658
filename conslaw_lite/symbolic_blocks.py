"""The blocks of the book written for :func:`conslaw_lite.symbolic.derive`: undefined activations,
softmax and gate entries as undefined functions, and the products a head depends on.

Each builder returns a :class:`SymbolicBlock`: the outputs ``f``, the parameters, the inputs, the
``identities`` of its undefined functions and the ``through`` quantities (a head sees Q_i, K_i only
through ``M_i = Q_i K_iᵀ``, and V_i, O_i only through ``N_i = V_i O_iᵀ``), plus where each
parameter lives in the torch module of the same block (:attr:`SymbolicBlock.torch_entries`), so
:func:`compare_with_closed_form` can hold the derived laws against :func:`conslaw_lite.laws.laws_of`.

* :func:`ffn_block` — ``A·ρ(Bx)`` (GELU, SiLU: ρ undefined; ReLU, linear: with their identity),
  ``A·(ρ(Bx) ⊙ Cx)`` (SwiGLU);
* :func:`attention_block` — ``Σ_i softmax(X̃ M_i X̃ᵀ/√k) X̃ N_i``, optionally with sinusoidal
  (or any absolute) PE, biases, or RoPE (scores ``x_p Q_i R_{s−p} K_iᵀ x_sᵀ``, one
  ``M_i^(Δ) = Q_i R_Δ K_iᵀ`` per offset Δ);
* :func:`moe_block` — ``Σ_e g_e(Wx) E_e(x)`` with SwiGLU experts, softmax or normalized
  sigmoid gates, or a fixed top-k selection.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
import torch
from torch import nn

from conslaw_lite.blocks.ffn import FFN, SwiGLU, sympy_form

RHO = sp.Function("rho")  # the activation ρ, undefined: the derivation uses only its shapes
SOFTMAX = sp.Function("softmax")
GATE = sp.Function("gate")

Entry = tuple[str, tuple[int, ...]]  # (torch parameter name, index)


@dataclass(frozen=True)
class SymbolicBlock:
    """A block ready for :func:`~conslaw_lite.symbolic.derive` (``derive(*block.args, **block.kwargs)``)."""

    f: list[sp.Expr]
    params: list[sp.Symbol]
    inputs: list[sp.Symbol]
    identities: dict = field(default_factory=dict)
    through: dict[sp.Symbol, sp.Expr] = field(default_factory=dict)
    torch_entries: dict[sp.Symbol, Entry] = field(default_factory=dict)
    note: str = ""

    def derive(self, seed: int = 0):
        """:func:`conslaw_lite.symbolic.derive` on this block.

        Examples
        ========
        >>> ffn_block("relu", 2, 1, 1).derive().num_laws  # one law per hidden unit
        1
        """
        from conslaw_lite.symbolic import derive

        return derive(
            self.f, self.params, self.inputs, self.identities or None, through=self.through or None, seed=seed
        )


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}{r + 1}{c + 1}", real=True))


# ---------------------------------------------------------------- feed-forward


FFN_IDENTITIES = {"gelu": None, "silu": None, "relu": "relu", "linear": "linear", "swiglu": None, "geglu": None,
                  "reglu": "relu"}  # fmt: skip
GLU = ("swiglu", "geglu", "reglu")  # A·(ρ(Bx) ⊙ Cx) with ρ = SiLU, GELU, ReLU


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
    if block not in FFN_IDENTITIES:
        raise ValueError(f"block must be one of {tuple(FFN_IDENTITIES)}, got {block!r}")
    f, params, x = sympy_form("swiglu" if block in GLU else block, d, r, m, act=RHO)
    identity = FFN_IDENTITIES[block]
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


# ---------------------------------------------------------------- attention


def _circle_point(k: int, seed: int) -> dict[sp.Symbol, sp.Rational]:
    """RoPE's cos/sin symbols ``c_j, s_j`` at a random rational point of the circle c² + s² = 1."""
    rng = random.Random(seed)
    point = {}
    for j in range(k // 2):
        u = sp.Rational(rng.randint(1, 40), rng.randint(41, 97))
        c, s = sp.symbols(f"c_{j + 1} s_{j + 1}", real=True)
        point[c], point[s] = (1 - u**2) / (1 + u**2), 2 * u / (1 + u**2)
    return point


def rope_rotation(k: int, delta: int) -> sp.Matrix:
    """``R_Δ = R_1^Δ``: block j is the rotation ``[[c_j, −s_j], [s_j, c_j]]`` to the power Δ (c_j² + s_j² = 1).

    Examples
    ========
    >>> rope_rotation(2, -1)
    Matrix([
    [ c_1, s_1],
    [-s_1, c_1]])
    """
    blocks = []
    for j in range(k // 2):
        c, s = sp.symbols(f"c_{j + 1} s_{j + 1}", real=True)
        R = sp.Matrix([[c, -s], [s, c]])
        blocks.append(R**delta if delta >= 0 else (R.T) ** (-delta))  # R⁻¹ = Rᵀ on the circle
    return sp.diag(*blocks)


def attention_block(
    d: int, k: int, n_heads: int = 1, T: int = 2, pe: str = "none", bias: bool = False, seed: int = 0
) -> SymbolicBlock:
    """Multi-head attention ``Σ_i softmax(X M_i Xᵀ/√k) X N_i`` with ``M_i = Q_iK_iᵀ``, ``N_i = V_iO_iᵀ``.

    ``pe="sinusoidal"``: tokens ``x_p + π_p`` with the table entries ``π_pc`` kept as symbols
    and listed among the inputs (a law must hold for all x, hence for every table);
    ``pe="rope"``: scores ``x_p M_i^(s−p) x_sᵀ/√k`` with ``M_i^(Δ) = Q_i R_Δ K_iᵀ``, the
    rotation's cos/sin at a random rational point of the circle. ``bias=True``: q, k, v and
    the output get biases (``X̃ = [X, 1]``, ``Q̃_i = [Q_i; b_q,i]``, ...).

    Examples
    ========
    >>> b = attention_block(1, 1)
    >>> b.through
    {M1_11: K1_11*Q1_11, N1_11: O1_11*V1_11}
    >>> b.f[0]
    N1_11*x_11*softmax(0, M1_11*x_11**2, M1_11*x_11*x_21) + N1_11*x_21*softmax(1, M1_11*x_11**2, M1_11*x_11*x_21)
    """
    if pe not in ("none", "sinusoidal", "rope"):
        raise ValueError(f"pe must be 'none', 'sinusoidal' or 'rope', got {pe!r}")
    if pe == "rope" and (k % 2 or bias):
        raise ValueError("RoPE needs an even head_dim k and no biases here")
    X = _matrix("x_", T, d)
    inputs = list(X)
    if pe == "sinusoidal":
        table = _matrix("π_", T, d)
        X, inputs = X + table, inputs + list(table)
    if bias:
        X = X.row_join(sp.ones(T, 1))  # X̃ = [X, 1]
    circle = _circle_point(k, seed) if pe == "rope" else {}
    params, through, entries, outputs = [], {}, {}, sp.zeros(T, d)
    for i in range(n_heads):
        W = {m: _matrix(f"{m}{i + 1}_", d, k) for m in "QKVO"}
        params += [s for m in "QKVO" for s in W[m]]
        for m in "QKV":  # Q.weight rows i·k..: Q_i = Q.weight[i·k:(i+1)·k, :]ᵀ
            entries.update({W[m][a, b]: (f"{m}.weight", (i * k + b, a)) for a in range(d) for b in range(k)})
        entries.update({W["O"][a, b]: ("O.weight", (a, i * k + b)) for a in range(d) for b in range(k)})
        if bias:
            for m in "QKV":
                b_m = sp.Matrix(1, k, lambda _, c, m=m: sp.Symbol(f"b{m.lower()}{i + 1}_{c + 1}", real=True))
                params += list(b_m)
                entries.update({b_m[c]: (f"{m}.bias", (i * k + c,)) for c in range(k)})
                W[m] = W[m].col_join(b_m)
        offsets = range(-(T - 1), T) if pe == "rope" else [0]
        M = {}
        for delta in offsets:
            name = f"M{i + 1}_" if pe != "rope" else f"M{i + 1}^({delta})_"
            M[delta] = _matrix(name, W["Q"].rows, W["K"].rows)
            product = W["Q"] * rope_rotation(k, delta) * W["K"].T if pe == "rope" else W["Q"] * W["K"].T
            through.update({M[delta][a, b]: sp.expand(product[a, b].xreplace(circle)) for a in range(M[delta].rows)
                            for b in range(M[delta].cols)})  # fmt: skip
        N = _matrix(f"N{i + 1}_", W["V"].rows, d)
        through.update({N[a, b]: sp.expand((W["V"] * W["O"].T)[a, b]) for a in range(N.rows) for b in range(d)})
        scale = 1 / sp.sqrt(k)
        S = sp.Matrix(T, T, lambda p, s: (X[p, :] * M[s - p if pe == "rope" else 0] * X[s, :].T)[0] * scale)
        values = X * N  # (T, d)
        for p in range(T):
            for s in range(T):
                outputs[p, :] += SOFTMAX(s, *S.row(p)) * values[s, :]
    if bias:
        b_o = sp.Matrix(1, d, lambda _, c: sp.Symbol(f"bo_{c + 1}", real=True))
        params += list(b_o)
        entries.update({b_o[c]: ("O.bias", (c,)) for c in range(d)})
        outputs += sp.ones(T, 1) * b_o
    note = f"RoPE rotation at c, s = {circle}" if circle else ""
    return SymbolicBlock(list(outputs), params, inputs, {SOFTMAX: "softmax"}, through, entries, note)


def attention_module(d: int, k: int, n_heads: int = 1, pe: str = "none", bias: bool = False) -> nn.Module:
    """The torch block of :func:`attention_block` (float64).

    Examples
    ========
    >>> attention_module(2, 2, 2).head(1)["Q"].shape
    torch.Size([2, 2])
    """
    from conslaw_lite.blocks.attention import MultiHeadAttention

    return MultiHeadAttention(d, n_heads, k, pe=pe, bias=bias).double()


# ---------------------------------------------------------------- mixture of experts


def moe_block(
    gating: str, d: int, n_experts: int, r: int, m: int, selections: list[tuple[int, ...]] | None = None
) -> SymbolicBlock:
    """``Σ_e g_e(Wx) E_e(x)``, SwiGLU experts ``E_e = A_e(ρ(B_e x) ⊙ C_e x)``, ρ undefined.

    ``gating="softmax"``: ``g_e = gate(e, z)`` with softmax identities; ``"sigmoid"``: the
    normalized sigmoid ``σ(z_e)/Σ_j σ(z_j)``. ``selections``: top-k routing as fixed
    selections, one per region of inputs (the experts chosen there, the gate renormalised
    over them); a law must hold on every region, so each region's outputs are listed.

    Examples
    ========
    >>> b = moe_block("softmax", 1, 2, 1, 1)
    >>> [str(p) for p in b.params]
    ['W_11', 'W_21', 'A1_11', 'B1_11', 'C1_11', 'A2_11', 'B2_11', 'C2_11']
    >>> moe_block("softmax", 1, 2, 1, 1, selections=[(0,), (1,)]).f  # top-1: gate(0, z) = 1 on its region
    [A1_11*C1_11*x_1*gate(0, W_11*x_1)*rho(B1_11*x_1), A2_11*C2_11*x_1*gate(0, W_21*x_1)*rho(B2_11*x_1)]
    """
    if gating not in ("softmax", "sigmoid"):
        raise ValueError(f"gating must be 'softmax' or 'sigmoid', got {gating!r}")
    selections = [tuple(range(n_experts))] if selections is None else [tuple(s) for s in selections]
    for chosen in selections:
        if not chosen or any(not 0 <= e < n_experts for e in chosen) or len(set(chosen)) != len(chosen):
            raise ValueError(f"a selection must list distinct experts among 0..{n_experts - 1}, got {chosen!r}")
    W = sp.Matrix(n_experts, d, lambda e, c: sp.Symbol(f"W_{e + 1}{c + 1}", real=True))
    params = list(W)
    entries = {W[e, c]: ("gate.weight", (e, c)) for e in range(n_experts) for c in range(d)}
    experts, x = [], None
    for e in range(n_experts):
        f, theta, x = sympy_form("swiglu", d, r, m, act=RHO)
        renamed = {t: sp.Symbol(f"{t.name[0]}{e + 1}{t.name[1:]}", real=True) for t in theta}  # A_11 -> A1_11
        params += list(renamed.values())
        for t, new in renamed.items():
            row, col = t.name[2:]
            entries[new] = (f"experts.{e}.{t.name[0]}.weight", (int(row) - 1, int(col) - 1))
        experts.append(sp.Matrix(f).xreplace(renamed))
    outputs = []
    for chosen in selections:
        logits = [(W[j, :] * sp.Matrix(x))[0] for j in chosen]
        outputs += list(sum((GATE(i, *logits) * experts[e] for i, e in enumerate(chosen)), sp.zeros(m, 1)))
    identity = "softmax" if gating == "softmax" else "normalized_sigmoid"
    return SymbolicBlock(outputs, params, list(x), {GATE: identity, RHO: None}, torch_entries=entries)


def moe_module(gating: str, d: int, n_experts: int, r: int, m: int, top_k: int | None = None) -> nn.Module:
    """The torch block of :func:`moe_block` (float64, SwiGLU experts).

    Examples
    ========
    >>> moe_module("sigmoid", 2, 2, 1, 1).gate.weight.shape
    torch.Size([2, 2])
    """
    from conslaw_lite.blocks.moe import MoE

    return MoE(d, n_experts, r, m, gating=gating, top_k=top_k).double()


# ---------------------------------------------------------------- derived laws against the closed forms


@dataclass(frozen=True)
class Comparison:
    """Ranks, as functions of θ, of the derived laws, of the closed forms, and of each side and both
    together with the products P of the derived linear laws (laws too, that one side may list).

    The two lists describe the same laws iff ``[derived, P]``, ``[closed, P]`` and all together
    have one rank.
    """

    derived: int
    closed_form: int
    derived_and_products: int
    closed_and_products: int
    joint: int

    @property
    def same(self) -> bool:
        return self.derived_and_products == self.closed_and_products == self.joint


def compare_with_closed_form(laws: list[sp.Expr], block: SymbolicBlock, model: nn.Module, seed: int = 0) -> Comparison:
    """Evaluate the derived laws and :func:`~conslaw_lite.laws.laws_of` at the same random θ, many times.

    Each θ is drawn in float64, written into the module's parameters through
    :attr:`SymbolicBlock.torch_entries` and into the sympy laws; the ranks of the value
    matrices (points × laws) are compared. Enough points are taken to tell every quadratic
    polynomial apart (more than the number of monomials of degree ≤ 2). Products of linear
    laws (a key bias b_k is conserved, so is b_k b_kᵀ) join the derived side: the derived
    basis leaves them out, a closed form may include them.

    Examples
    ========
    >>> block = ffn_block("relu", 2, 2, 1)
    >>> compare_with_closed_form(block.derive().laws, block, ffn_module("relu", 2, 2, 1)).same
    True
    """
    from conslaw_lite.laws import laws_of

    params = block.params
    D = len(params)
    points = (D + 1) * (D + 2) // 2 + 16
    linear = [h for h in laws if sp.Poly(h, *params).total_degree() == 1]
    products = [sp.expand(u * v) for i, u in enumerate(linear) for v in linear[i:]]  # laws too, left out of the basis
    fn = sp.lambdify(params, laws + products, modules="numpy")
    gen = torch.Generator().manual_seed(seed)
    derived, closed, n_laws = [], [], len(laws)
    for _ in range(points):
        theta = torch.randn(D, dtype=torch.float64, generator=gen)
        with torch.no_grad():
            for value, p in zip(theta, params):
                name, index = block.torch_entries[p]
                model.get_parameter(name)[index] = value
        derived.append(np.asarray(fn(*theta.tolist()), dtype=float).reshape(-1))
        closed.append(
            np.concatenate([v.detach().reshape(-1).numpy() for v in laws_of(model).values()] or [np.zeros(0)])
        )
    values = np.array(derived).reshape(points, -1)
    A, P, B = values[:, :n_laws], values[:, n_laws:], np.array(closed).reshape(points, -1)
    rank = lambda *Ms: _rank(np.hstack(Ms))  # noqa: E731
    return Comparison(rank(A), rank(B), rank(A, P), rank(B, P), rank(A, B, P))


def _rank(M: np.ndarray) -> int:
    return int(np.linalg.matrix_rank(M, tol=1e-8 * max(1.0, np.abs(M).max()))) if M.size else 0


# ---------------------------------------------------------------- the cases of the book


@dataclass(frozen=True)
class Case:
    """A block at one size: its sympy form, its torch module, one input's shape, and the theory's N."""

    block: SymbolicBlock
    module: nn.Module
    input_shape: tuple[int, ...]
    formula: int
    formula_text: str
    sizes: dict[str, int] = field(default_factory=dict)


def case(name: str, size: str = "small") -> Case:
    """The blocks the book derives, by name, at the ``"small"`` size (seconds) or ``"large"`` (≤ a minute).

    Names: ``ffn-gelu``, ``ffn-silu``, ``ffn-relu``, ``ffn-linear``, ``swiglu``, ``mha``
    (one head), ``mha-2heads``, ``mha-sinusoidal``, ``mha-bias``, ``mha-rope`` (k = 2 small,
    k = 4 large), ``moe-softmax``, ``moe-sigmoid``, ``moe-top1``. Small: d = 2 throughout.

    Examples
    ========
    >>> c = case("swiglu")
    >>> c.formula_text, c.input_shape
    ('r = 2', (2,))
    """
    if size not in ("small", "large"):
        raise ValueError(f"size must be 'small' or 'large', got {size!r}")
    big = size == "large"
    if name.startswith("ffn-") or name == "swiglu":
        block = name.removeprefix("ffn-")
        d, r, m = (3, 3, 2) if big else (2, 2, 2)
        half = r * (r + 1) // 2
        formula = {"gelu": (0, "0"), "silu": (0, "0"), "relu": (r, f"r = {r}"),
                   "linear": (half, f"r(r+1)/2 = {half}"), "swiglu": (r, f"r = {r}")}[block]  # fmt: skip
        return Case(ffn_block(block, d, r, m), ffn_module(block, d, r, m), (d,), *formula)
    if name.startswith("mha"):
        n = 2 if name == "mha-2heads" else 1
        pe = {"mha-sinusoidal": "sinusoidal", "mha-rope": "rope"}.get(name, "none")
        bias = name == "mha-bias"
        if pe == "rope":  # k = 4: two 2×2 blocks turning at different speeds (k = 2 has one)
            k = d = 4 if big else 2
            T = 2
        else:
            k, d, T = (2, 3, 3) if big else (2, 2, 2)
        if pe == "rope":
            N, text = n * k // 2 + n * k * (k + 1) // 2, f"n·k/2 + n·k(k+1)/2 = {n * k // 2 + n * k * (k + 1) // 2}"
        elif bias:
            N, text = n * k * (k + 1) + n * k, f"n·k(k+1) + n·k = {n * k * (k + 1) + n * k}"
        else:
            N, text = n * k * (k + 1), f"n·k(k+1) = {n * k * (k + 1)}"
        module = attention_module(d, k, n, pe=pe, bias=bias)
        sizes = {"d": d, "k": k, "n": n, "T": T}
        return Case(attention_block(d, k, n, T=T, pe=pe, bias=bias), module, (T, d), N, text, sizes)
    if name.startswith("moe-"):
        gating = "sigmoid" if name == "moe-sigmoid" else "softmax"
        d, n_e, r, m = (3, 2, 1, 1) if big else (2, 2, 1, 1)
        if name == "moe-top1":
            N, text = n_e * r + n_e * d, f"n_E·r + n_E·d = {n_e * r + n_e * d}"
            top1 = moe_block(gating, d, n_e, r, m, selections=[(e,) for e in range(n_e)])
            return Case(top1, moe_module(gating, d, n_e, r, m, top_k=1), (d,), N, text)
        N, text = (
            (n_e * r + d, f"n_E·r + d = {n_e * r + d}") if gating == "softmax" else (n_e * r, f"n_E·r = {n_e * r}")
        )
        return Case(moe_block(gating, d, n_e, r, m), moe_module(gating, d, n_e, r, m), (d,), N, text)
    raise ValueError(f"unknown case {name!r}")


CASES = ("ffn-gelu", "ffn-silu", "ffn-relu", "ffn-linear", "swiglu", "mha", "mha-2heads", "mha-sinusoidal",
         "mha-bias", "mha-rope", "moe-softmax", "moe-sigmoid")  # fmt: skip


def shift_identity(gating: str, n_experts: int = 2) -> sp.Expr:
    """``Σ_u ∂g_1/∂z_u`` under the gate's identities: the motion of gate 1 when every gate row shifts by v.

    Shifting every row W_e by v adds ``v·x`` to every logit, so ``Σ_e W_e`` is a law only if
    this vanishes. Softmax: the row sum makes it 0. Normalized sigmoid: it is
    ``g_1(Σ_j g_j σ_j − σ_1)``, not 0, and the paper's gate law is lost.

    Examples
    ========
    >>> shift_identity("softmax")
    0
    >>> q1, q2 = sp.symbols("q_1 q_2", real=True)  # q_j = σ(z_j), g_1 = q_1/(q_1 + q_2)
    >>> sp.simplify(shift_identity("sigmoid") - q1 * q2 * (q2 - q1) / (q1 + q2) ** 2)
    0
    """
    from conslaw_lite.shapes import Shapes, rule_for

    if gating not in ("softmax", "sigmoid"):
        raise ValueError(f"gating must be 'softmax' or 'sigmoid', got {gating!r}")
    rule = rule_for(GATE, "softmax" if gating == "softmax" else "normalized_sigmoid")
    shapes = Shapes()
    z = sp.symbols(f"z_1:{n_experts + 1}", real=True)
    app = GATE(0, *z)
    total = sp.Add(*(rule.derivative(app, u + 1, shapes) for u in range(n_experts)))
    return sp.factor(sp.simplify(total.xreplace(shapes.eliminate)))


def rope_commutant(k: int) -> list[sp.Matrix]:
    """A basis of the k×k matrices X with ``X R_1 = R_1 X``: the directions G = I + εX that keep every score.

    ``Q → QG, K → KG^{−ᵀ}`` keeps ``Q R_Δ Kᵀ`` for every offset Δ iff G commutes with the
    rotation R_1 (then with all its powers). Each 2×2 block keeps ``aI + bJ`` (J the quarter
    turn): a scale, whose law is ``‖Q^(j)‖² − ‖K^(j)‖²``, and a rotation, which leaves
    ``Q^(j)ᵀQ^(j) − K^(j)ᵀK^(j)`` no room for another quadratic law.

    Examples
    ========
    >>> [list(X) for X in rope_commutant(2)]
    [[0, -1, 1, 0], [1, 0, 0, 1]]
    """
    if k % 2 or k < 2:
        raise ValueError(f"RoPE needs an even head_dim k ≥ 2, got {k}")
    R = rope_rotation(k, 1).xreplace(_circle_point(k, 0))
    X = sp.Matrix(k, k, lambda a, b: sp.Symbol(f"X_{a}{b}"))
    equations = list(X * R - R * X)
    unknowns = list(X)
    A = sp.Matrix([[sp.diff(e, u) for u in unknowns] for e in equations])
    return [sp.Matrix(k, k, list(v)) for v in A.nullspace()]
