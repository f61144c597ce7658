"""Mixtures of experts: sparse dispatch, the gate laws, the sigmoid counterexample, the counts, the drift."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
import torch
from torch.func import functional_call

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.certify import certify
from conslaw_lite.counterexamples import counterexample_moe, moe_gate_sum_rate
from conslaw_lite.drift import arch_setup, slope, trajectory
from conslaw_lite.families.moe.block import MoE, routing_margin
from conslaw_lite.families.moe.symbolic import sympy_form
from conslaw_lite.laws import controls_of, find_blocks, law_functions, laws_of
from conslaw_lite.symbolic import quadratic_laws

ROUTINGS = [("softmax", None), ("softmax", 2), ("softmax", 1), ("sigmoid", None), ("sigmoid", 2)]


def make(gating: str, top_k: int | None, seed: int = 0, **sizes: int) -> MoE:
    torch.manual_seed(seed)
    s = {"d": 3, "n_experts": 4, "hidden": 2, "out": 2, **sizes}
    return MoE(s["d"], s["n_experts"], s["hidden"], s["out"], gating=gating, top_k=top_k).double()


# ---- the counterexample ----------------------------------------------------------------------------------------


def test_counterexample_sigmoid_gate_sum_moves_at_exactly_9_over_250() -> None:
    c = moe_gate_sum_rate("sigmoid")
    assert c.gates == sp.Matrix([sp.Rational(2, 5), sp.Rational(3, 5)])
    assert c.expert_outputs[0] == sp.zeros(3, 1) and c.expert_outputs[1] == sp.Matrix([1, 0, 0])
    assert c.rate == sp.Matrix([sp.Rational(9, 250), 0, 0])


def test_counterexample_softmax_gate_sum_does_not_move() -> None:
    c = moe_gate_sum_rate("softmax")
    assert c.gates == sp.Matrix([sp.Rational(1, 4), sp.Rational(3, 4)])
    assert c.rate == sp.zeros(3, 1)


@pytest.mark.parametrize("gating", ["sigmoid", "softmax"])
def test_counterexample_autograd_agrees_with_sympy(gating: str) -> None:
    model, x, y = counterexample_moe(gating)
    loss = 0.5 * ((model(x) - y) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, [model.gate.weight])
    expected = np.array(moe_gate_sum_rate(gating).rate, dtype=float).ravel()
    np.testing.assert_allclose(-grad.sum(dim=0).numpy(), expected, atol=1e-15)


def test_sympy_derivation_finds_the_gate_sum_for_softmax_only() -> None:
    A1, C1, A2, C2, W11, W21 = sp.symbols("A1_11 C1_11 A2_11 C2_11 W_11 W_21", real=True)
    expert_laws = [A1**2 - C1**2, A2**2 - C2**2]
    assert quadratic_laws(*sympy_form("softmax", 1, 2, 1, 1)) == [*expert_laws, W11 + W21]
    assert quadratic_laws(*sympy_form("sigmoid", 1, 2, 1, 1)) == expert_laws


# ---- sparse dispatch against the dense reference -----------------------------------------------------------------


@pytest.mark.parametrize("gating,top_k", ROUTINGS)
def test_sparse_dispatch_equals_dense_reference_outputs_and_gradients(gating: str, top_k: int | None) -> None:
    model = make(gating, top_k)
    x = torch.randn(5, 7, 3, dtype=torch.float64)
    y_sparse, y_dense = model(x), model.dense_forward(x)
    torch.testing.assert_close(y_sparse, y_dense, rtol=0, atol=1e-14)
    w = torch.randn_like(y_sparse)
    g_sparse = torch.autograd.grad((w * y_sparse).sum(), list(model.parameters()))
    g_dense = torch.autograd.grad((w * y_dense).sum(), list(model.parameters()))
    for a, b in zip(g_sparse, g_dense):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


@pytest.mark.parametrize("top_k", [1, 2])
def test_each_expert_sees_only_its_own_tokens(top_k: int) -> None:
    model = make("softmax", top_k)
    x = torch.randn(50, 3, dtype=torch.float64)
    seen = []
    hooks = [e.register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape[0])) for e in model.experts]
    model(x)
    for h in hooks:
        h.remove()
    assert sum(seen) == 50 * top_k  # n·k expert evaluations, not n·n_E
    tokens_per_expert = model.gates(x).count_nonzero(dim=0).tolist()  # experts with no token are not called
    assert seen == [n for n in tokens_per_expert if n > 0]


def test_gate_values_are_renormalized_over_the_selection() -> None:
    model = make("softmax", 2)
    x = torch.randn(20, 3, dtype=torch.float64)
    g = model.gates(x)
    torch.testing.assert_close(g.sum(dim=-1), torch.ones(20, dtype=torch.float64))
    z = model.gate(x)
    top2 = z.topk(2, dim=-1)
    torch.testing.assert_close(g.gather(1, top2.indices), torch.softmax(top2.values, dim=-1))


def test_routing_margin_is_zero_at_a_tie_and_positive_at_random_inputs() -> None:
    model = make("softmax", 2)
    assert routing_margin(model, torch.randn(100, 3, dtype=torch.float64)) > 0
    with torch.no_grad():
        model.gate.weight[1] = model.gate.weight[2]  # experts 1 and 2 tie on every input
        model.gate.weight[0] = 10 * model.gate.weight[1]
        model.gate.weight[3] = -10 * model.gate.weight[1]
    x = model.gate.weight[1:2].detach().clone()  # a direction where expert 0 wins, then the tie
    assert routing_margin(model, x) == 0.0
    assert routing_margin(make("softmax", None), x) == float("inf")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"gating": "relu"}, "gating"),
        ({"top_k": 5}, "top_k"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MoE(3, 4, 2, 2, **kwargs)


def test_moe_softmax_arch_refuses_top_k() -> None:
    with pytest.raises(ValueError, match="moe-topk"):
        get_arch("moe-softmax").build(ArchOptions(top_k=2))


# ---- laws: ⟨∇h, ∇f⟩ = 0 for the laws, not for the controls --------------------------------------------------------


def max_inner_products(model: MoE, laws: dict, n_inputs: int = 20) -> dict[str, float]:
    """max over x, output i, law entry j of |⟨∇h_j(θ), ∇_θ f_i(x; θ)⟩| / (‖∇h_j‖ ‖∇f_i‖)."""
    theta = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randn(n_inputs, 3, dtype=torch.float64)
    jac_f = torch.func.jacrev(lambda p: functional_call(model, p, (x,)))(theta)  # (n, m, *shape) per name
    out = {}
    for name, law in laws.items():
        jac_h = torch.func.jacrev(lambda p, law=law: law(p).reshape(-1))(theta)  # (entries, *shape)
        dot = sum(torch.einsum("j...,nm...->jnm", jac_h[n], jac_f[n]) for n in theta)
        norm_h = torch.sqrt(sum((jac_h[n] ** 2).flatten(1).sum(1) for n in theta))[:, None, None]
        norm_f = torch.sqrt(sum((jac_f[n] ** 2).flatten(2).sum(2) for n in theta))[None]
        out[name] = float((dot.abs() / (norm_h * norm_f).clamp_min(1e-300)).max())
    return out


@pytest.mark.parametrize("gating,top_k", ROUTINGS)
def test_every_law_is_orthogonal_to_every_output_gradient(gating: str, top_k: int | None) -> None:
    model = make(gating, top_k)
    laws = law_functions(model)
    assert any(k.startswith("experts.3:") for k in laws)  # the experts' SwiGLU laws are found too
    for name, value in max_inner_products(model, laws).items():
        assert value < 1e-12, f"{gating} top-{top_k}: law {name} has ⟨∇h, ∇f⟩ = {value:.2e}"


def test_gate_laws_by_routing() -> None:
    assert "sum_W_e" in laws_of(make("softmax", None)) and "sum_W_e" in laws_of(make("softmax", 2))
    assert "W" in laws_of(make("softmax", 1)) and "W" in laws_of(make("sigmoid", 1))
    assert not any(":" not in k for k in laws_of(make("sigmoid", None)))  # sigmoid: only expert laws
    assert "sum_W_e_(sigmoid)" in controls_of(make("sigmoid", None))
    for gating, k in ROUTINGS:  # gate keys and expert keys ("experts.e:…") never overwrite each other
        model = make(gating, k)
        assert len(law_functions(model)) == sum(len(b.laws) for b in find_blocks(model))
        assert len(law_functions(model, controls=True)) == sum(len(b.controls) for b in find_blocks(model))


@pytest.mark.parametrize("gating,control", [("sigmoid", "sum_W_e_(sigmoid)"), ("softmax", "W_0")])
def test_controls_are_not_conserved(gating: str, control: str) -> None:
    model = make(gating, None)
    value = max_inner_products(model, {control: law_functions(model, controls=True)[control]})[control]
    assert value > 1e-3


def test_top1_gate_gets_exactly_zero_gradient() -> None:
    model = make("softmax", 1)
    x = torch.randn(30, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad((model(x) ** 2).sum(), [model.gate.weight])
    assert torch.count_nonzero(grad) == 0


# ---- the counts: N = D − dim Lie(W), computed, against the formula ---------------------------------------------------

SMALL, LARGE = {"dim": 3, "hidden": 2, "out": 2}, {"dim": 4, "hidden": 3, "out": 2}
CERTIFICATES = [
    ("moe-softmax", ArchOptions(experts=3, **SMALL), 9),  # n_E·r + d
    ("moe-softmax", ArchOptions(experts=4, **LARGE), 16),
    ("moe-topk", ArchOptions(top_k=2, experts=4, **SMALL), 11),  # n_E·r + d
    ("moe-topk", ArchOptions(top_k=2, experts=5, **LARGE), 19),
    ("moe-topk", ArchOptions(top_k=1, experts=4, **SMALL), 20),  # n_E·r + n_E·d
    ("moe-topk", ArchOptions(top_k=1, experts=4, dim=4, hidden=2, out=3), 24),
    ("moe-sigmoid", ArchOptions(experts=3, **SMALL), 6),  # n_E·r
    ("moe-sigmoid", ArchOptions(experts=4, **LARGE), 12),
]


@pytest.mark.parametrize("arch,options,expected", CERTIFICATES, ids=[f"{a}-N{n}" for a, _, n in CERTIFICATES])
def test_certified_count_matches_formula_and_laws_are_complete(arch: str, options: ArchOptions, expected: int) -> None:
    c = certify(arch, options)
    assert c.conclusive, c.reason
    assert c.num_laws == c.formula == expected
    assert c.complete and c.known_laws == expected
    assert c.sigma_kept > 1e6 * c.sigma_dropped


# ---- drift under gradient descent --------------------------------------------------------------------------------


def final_drift(arch: str, options: ArchOptions, name: str, taus: list[float], steps: int) -> np.ndarray:
    setup = arch_setup(arch, options, samples=32)
    return np.array([trajectory(setup, 0, lr=tau, steps=steps).run.drift(name)[-1] for tau in taus])


def test_sigmoid_gate_sum_drifts_at_first_order_softmax_gate_sum_not_at_all() -> None:
    taus = [0.01, 0.02, 0.04]
    sigmoid = final_drift("moe-sigmoid", ArchOptions(), "sum_W_e_(sigmoid)", taus, steps=5)
    assert abs(slope(taus, sigmoid) - 1) < 0.1 and sigmoid.min() > 1e-4
    softmax = final_drift("moe-softmax", ArchOptions(), "sum_W_e", taus, steps=5)
    assert softmax.max() < 1e-14  # a linear law with Σ_e ∇_{W_e} L = 0: each GD step keeps it exactly
    expert = final_drift("moe-softmax", ArchOptions(), "experts.0:|A_{:,i}|^2-|C_{i,:}|^2", taus, steps=5)
    assert abs(slope(taus, expert) - 2) < 0.15


def test_top1_gate_is_frozen_by_training_while_the_experts_learn() -> None:
    model, loss = arch_setup("moe-topk", ArchOptions(top_k=1, seq=4), samples=16)(0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    run = trajectory(lambda seed: (model, loss), 0, lr=0.05, steps=10).run
    assert torch.equal(model.gate.weight, before["gate.weight"]) and run.drift("W").max() == 0.0
    assert not torch.equal(model.experts[0].A.weight, before["experts.0.A.weight"])
    assert run.loss[-1] < run.loss[0]


def test_recorded_gate_row_control_moves_under_softmax_training() -> None:
    run = trajectory(arch_setup("moe-softmax", samples=16), 0, lr=0.05, steps=5).run
    assert run.drift("W_0")[-1] > 1e-4  # recorded values are copies, not views of the live weights
