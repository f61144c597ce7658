"""conslaw_lite.symbolic.derive: the paper's derivation run on each block, against the closed forms and the counter.

Each case: derive (condition → shapes → independence rule → x-free PDE system → exact laws →
exact count), then the derived laws span the same functions as ``laws_of``'s closed forms,
N equals the theory's formula, and the numerical counter ``count_laws`` agrees. The small
sizes run everywhere; the larger ones (≤ 60 s each on one core) only outside the ``ci`` scale.
"""

from __future__ import annotations

import pytest
import sympy as sp
import torch
from torch import nn

from conslaw_lite.config import scale
from conslaw_lite.counting import count_laws
from conslaw_lite.families.ffn.symbolic import RHO, ffn_block
from conslaw_lite.families.moe.symbolic import moe_block
from conslaw_lite.symbolic import derive, orthogonality_condition
from conslaw_lite.symbolic.cases import case, case_names, compare_with_closed_form

large = pytest.mark.skipif(scale().name == "ci", reason="larger sizes run at the cpu and gpu scales")
SIZES = [pytest.param(name, "small", id=f"{name}-small") for name in case_names()] + [
    pytest.param(name, "large", id=f"{name}-large", marks=large) for name in case_names()
]


@pytest.mark.parametrize(("name", "size"), SIZES)
def test_derived_laws_match_closed_form_formula_and_counter(name: str, size: str, one_thread) -> None:
    c = case(name, size)
    derived = c.block.derive()
    assert derived.num_laws == c.formula, derived.certificate
    assert len(derived.laws) == derived.law_rank == c.formula  # the list holds independent laws only
    comparison = compare_with_closed_form(derived.laws, c.block, c.module)
    assert comparison.same, comparison
    counted = count_laws(c.module, c.input_shape)
    assert counted.conclusive and counted.num_laws == derived.num_laws


def test_swiglu_chain_step_by_step() -> None:
    """The PDEs of the issue: ∂_{A_ji}h·C_ik + A_ji·∂_{C_ik}h = 0, and ∂h/∂B = 0 (B only through the gate)."""
    c = case("swiglu")
    d = c.block.derive()
    A11, C11, B11 = (sp.Symbol(n, real=True) for n in ("A_11", "C_11", "B_11"))
    fields = [dict(zip(d.params, V)) for V in d.fields]
    assert {A11: C11, C11: A11} in [{k: v for k, v in F.items() if v != 0} for F in fields]
    assert {B11: 1} in [{k: v for k, v in F.items() if v != 0} for F in fields]
    assert "proved in the paper" in d.rule
    values = [k for k, v in d.shapes.items() if str(v.func) == "rho"]  # s_i = ρ(B_i·x)
    slopes = [k for k, v in d.shapes.items() if str(v.func) == "rho′"]  # t_i = ρ′(B_i·x)
    assert len(values) == len(slopes) == 2
    z = sp.Symbol("z")
    silu = [e.replace(sp.Function("rho"), sp.Lambda(z, z / (1 + sp.exp(-z)))) for e in c.block.f]
    for h in d.laws:  # each law is exact for the block with a true SiLU, too
        assert all(sp.simplify(orthogonality_condition(fi, c.block.params, h)) == 0 for fi in silu)


def test_attention_pde_is_the_matrix_equation() -> None:
    """Relations ⟨∇h, ∇M_ab⟩ = 0 with M = QKᵀ: the field of (a, b) is Σ_c K_bc ∂_{Q_ac} + Q_ac ∂_{K_bc}."""
    c = case("mha")
    d = c.block.derive()
    assert [str(r) for r in d.relations] == [f"⟨∇h,∇{m}1_{a}{b}⟩" for m in "MN" for a in (1, 2) for b in (1, 2)]
    Q = sp.Matrix(2, 2, lambda a, b: sp.Symbol(f"Q1_{a + 1}{b + 1}", real=True))
    K = sp.Matrix(2, 2, lambda a, b: sp.Symbol(f"K1_{a + 1}{b + 1}", real=True))
    field = dict(zip(d.params, d.fields[1]))  # M_12 = Q_1· K_2·
    expected = {Q[0, 0]: K[1, 0], Q[0, 1]: K[1, 1], K[1, 0]: Q[0, 0], K[1, 1]: Q[0, 1]}
    assert {k: v for k, v in field.items() if v != 0} == expected


def test_normalized_sigmoid_breaks_the_shift_identity() -> None:
    """Σ_u ∂g_e/∂z_u: 0 for softmax (row sum), g_e(Σ_j g_jσ_j − σ_e) ≠ 0 for the normalized sigmoid."""
    from conslaw_lite.families.moe.symbolic import shift_identity

    assert shift_identity("softmax") == 0
    residual = shift_identity("sigmoid")
    assert residual != 0
    assert moe_block("sigmoid", 1, 2, 1, 1).derive().num_laws == 2  # only the experts' laws


def test_top1_routing_conserves_every_gate_entry() -> None:
    c = case("moe-top1")
    d = c.block.derive()
    assert d.num_laws == c.formula
    W = [p for p in c.block.params if p.name.startswith("W")]
    assert set(W) <= set(d.laws)  # each gate entry is itself a law


def test_identities_are_checked() -> None:
    a, b, x = sp.symbols("a b x")
    rho, tau = sp.Function("rho"), sp.Function("tau")
    with pytest.raises(ValueError, match="identity for rho must be"):
        derive(a * rho(b * x), [a, b], [x], {rho: "tanh"})
    with pytest.raises(ValueError, match="tau, which does not occur"):
        derive(a * rho(b * x), [a, b], [x], {tau: "relu"})
    with pytest.raises(ValueError, match="not polynomial in the inputs"):
        derive(a * sp.exp(b * x), [a, b], [x])
    with pytest.raises(ValueError, match="one layer only"):
        derive(a * rho(b * rho(x)), [a, b], [x])
    # an identity given as an equation: σ(z) = z σ'(z) is ReLU's
    z = sp.Symbol("z")
    relu = sp.Eq(rho(z), z * sp.Derivative(rho(z), z))
    assert derive(a * rho(b * x), [a, b], [x], {rho: relu}).laws == [a**2 - b**2]


def test_chapter_one_pde_takes_undefined_activations() -> None:
    """pde and characteristics are derive's steps 1–4: with ρ undefined, a·ρ(bx) leaves ∂_a h = ∂_b h = 0."""
    from conslaw_lite.symbolic import characteristics, pde

    a, b, x = sp.symbols("a b x")
    rho = sp.Function("rho")
    h = sp.Function("h")(a, b)
    assert pde(a * rho(b * x), [a, b], [x]) == [sp.Derivative(h, a), sp.Derivative(h, b)]
    assert characteristics(a * rho(b * x), [a, b], [x]).invariants == []
    relu = derive(a * rho(b * x), [a, b], [x], {rho: "relu"})
    assert relu.pde == pde(a * b * x, [a, b], [x])  # ReLU's identity merges the shapes: the toy's PDE
    assert relu.num_laws == 1 and "ReLU" in relu.rule


def test_glu_variants() -> None:
    """GeGLU has SwiGLU's shapes (r laws); ReGLU's identity merges the gate's and adds ‖A_:,i‖² − ‖B_i,:‖² (2r)."""

    assert ffn_block("geglu", 2, 2, 1).derive().num_laws == 2
    reglu = ffn_block("reglu", 2, 2, 1).derive()
    assert reglu.num_laws == 4
    A11, B11, B12 = (sp.Symbol(n, real=True) for n in ("A_11", "B_11", "B_12"))
    assert A11**2 - B11**2 - B12**2 in reglu.laws


Z = sp.Symbol("z")


class _Activated(nn.Module):
    """A·act(Bx) with any torch activation: the torch side of ``ffn_block(..., d, r, m)`` with ρ = act."""

    def __init__(self, d: int, r: int, m: int, act) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.B, self.A, self.act = nn.Linear(d, r, bias=False), nn.Linear(r, m, bias=False), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(self.act(self.B(x)))


def test_an_undefined_activation_is_a_hypothesis() -> None:
    """ρ undefined: N = 0 only *if* ρ satisfies the independence rule, and the result says so in a typed field."""
    block = ffn_block("gelu", 2, 2, 2)
    d = block.derive()
    assert d.num_laws == 0 and d.conditional
    assert [(h.function, h.rule) for h in d.hypotheses] == [("rho", "independent")]
    assert d.message.startswith("N = 0 if rho satisfies the independence rule: rho(B_i·x) and rho′(B_i·x)")
    assert d.message in d.certificate and "N = 0 if" in d.report()
    a, b, x = sp.symbols("a b x")
    assert not derive(a * b * x, [a, b], [x]).conditional  # no undefined function: nothing assumed
    assert derive(a * b * x, [a, b], [x]).message == "N = 1"


@pytest.mark.parametrize(
    ("rho", "act", "p"),
    [(Z**2, torch.square, 2), (Z * sp.Abs(Z), lambda z: z * z.abs(), 2), (Z**3, lambda z: z**3, 3),
     (sp.Max(Z, 0), torch.relu, 1)],
    ids=["z²", "z·|z|", "z³", "Max(z, 0)"],
)  # fmt: skip
def test_a_homogeneous_activation_keeps_one_law_per_unit(rho, act, p, one_thread) -> None:
    """Where the assumed rule says N = 0, ρ = z² (and any ρ homogeneous of degree p) has r = 2 laws
    ‖A_{:,i}‖² − ‖B_{i,:}‖²/p, found by checking ρ, not assuming: and count_laws agrees on the torch block."""
    block = ffn_block("gelu", 2, 2, 2)
    d = derive(block.f, block.params, block.inputs, {RHO: sp.Lambda(Z, rho)})
    assert d.num_laws == 2 and not d.conditional and d.message == "N = 2"
    A = sp.Matrix(2, 2, lambda j, i: sp.Symbol(f"A_{j + 1}{i + 1}", real=True))
    B = sp.Matrix(2, 2, lambda i, k: sp.Symbol(f"B_{i + 1}{k + 1}", real=True))
    expected = [sp.expand(A.col(i).dot(A.col(i)) - B.row(i).dot(B.row(i)) / p) for i in range(2)]
    assert [sp.expand(h) for h in d.laws] == expected
    counted = count_laws(_Activated(2, 2, 2, act).double(), (2,))
    assert counted.conclusive and counted.num_laws == d.num_laws


@pytest.mark.parametrize(
    ("rho", "act"),
    [(sp.tanh(Z), torch.tanh), (Z / 2 * (1 + sp.erf(Z / sp.sqrt(2))), nn.functional.gelu),
     (Z / (1 + sp.exp(-Z)), nn.functional.silu)],
    ids=["tanh", "erf-gelu", "silu"],
)  # fmt: skip
def test_the_independence_rule_is_checked_for_a_given_activation(rho, act, one_thread) -> None:
    block = ffn_block("gelu", 2, 2, 2)
    d = derive(block.f, block.params, block.inputs, {RHO: sp.Lambda(Z, rho)})
    assert d.num_laws == 0 and d.hypotheses == () and d.message == "N = 0"  # checked, not assumed
    assert "checked" in d.rule
    counted = count_laws(_Activated(2, 2, 2, act).double(), (2,))
    assert counted.conclusive and counted.num_laws == 0


def test_an_activation_that_breaks_the_rule_is_refused() -> None:
    """ρ = z + z·|z| obeys 2ρ − zρ′ = z: with a skip term c·x the shapes are dependent; no count is given."""
    a, b, c, x = sp.symbols("a b c x")
    with pytest.raises(ValueError, match="independence rule fails on this block.*sp.Eq"):
        derive(a * RHO(b * x) + c * x, [a, b, c], [x], {RHO: sp.Lambda(Z, Z + Z * sp.Abs(Z))})
    with pytest.raises(ValueError, match="sp.Lambda\\(z, expr\\) in the one variable"):
        derive(a * RHO(b * x), [a, b], [x], {RHO: sp.Lambda((Z, c), Z * c)})
