"""The law counter against the known counts, the law checker against laws and non-laws, and bad input."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import jvp
from torch.nn.utils import prune

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.counting import GAP, check_laws, count_laws, lie_rank
from conslaw_lite.counting.check import RESIDUAL_TOL, law_residuals
from conslaw_lite.counting.covering import covering_patterns
from conslaw_lite.counting.exact_ops import exact_derivatives
from conslaw_lite.counting.problem import problem_of
from conslaw_lite.counting.strata import forced_patterns
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.find_laws import find_laws


def two_layer(d: int, r: int, m: int, activation: nn.Module | None = None) -> nn.Sequential:
    """``A·act(B x)`` without biases, as an ``nn.Sequential``: ``0`` is B (r×d), last is A (m×r)."""
    torch.manual_seed(0)
    layers = [nn.Linear(d, r, bias=False)] + ([activation] if activation is not None else [])
    return nn.Sequential(*layers, nn.Linear(r, m, bias=False))


def assert_clear_gap(count) -> None:
    assert count.conclusive, count.reason
    assert count.sigma_kept >= GAP * count.sigma_dropped
    assert count.num_laws == count.num_params - count.rank_lie


@pytest.mark.parametrize("factors, expected", [({"a": 1.0, "b": 2.0}, 1), ({"a": 1.0, "b": 2.0, "c": -0.5}, 2)])
def test_toy_products(factors: dict, expected: int) -> None:
    count = count_laws(ToyProduct(**factors), (1,))
    assert_clear_gap(count)
    assert count.num_laws == expected == len(factors) - 1


def test_linear_net_has_r_r_plus_1_over_2_laws() -> None:
    r = 4
    count = count_laws(two_layer(4, r, 4), (4,))
    assert_clear_gap(count)
    assert count.num_params == 32
    assert count.num_laws == r * (r + 1) // 2 == 10
    # W alone (the tangent space of the product AB) has dimension 16; brackets add the rest, then stop.
    assert count.ranks_by_depth[:2] == (16, 22) and count.ranks_by_depth[-1] == 22


def test_relu_net_has_r_laws() -> None:
    count = count_laws(two_layer(4, 6, 3, nn.ReLU()), (4,))
    assert_clear_gap(count)
    assert (count.num_params, count.num_laws) == (42, 6)


def test_gelu_net_has_no_law() -> None:
    count = count_laws(two_layer(3, 4, 2, nn.GELU()), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 0


@pytest.mark.parametrize("activation", [nn.GELU(approximate="tanh"), nn.Mish()])
def test_activations_whose_torch_derivatives_overflow_are_counted(activation: nn.Module) -> None:
    """torch's third derivative of the tanh GELU is NaN past |z| ≈ 30 (mish's second and third past 10³), which the
    counter's θ' reach: every such model was refused as "not analytic". Written in elementary ops, both are
    counted: no law, as for the erf GELU."""
    count = count_laws(two_layer(3, 4, 2, activation), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 0


def test_function_model_with_params_dict() -> None:
    def linear(p, x):  # f = A B x with r = 3
        return x @ p["B"].T @ p["A"].T

    count = count_laws(linear, (4,), params={"B": torch.ones(3, 4), "A": torch.ones(5, 3)})
    assert count.num_laws == 6


def test_same_seed_same_evidence_and_other_seed_same_count() -> None:
    model = two_layer(3, 2, 3)
    first, again, other = count_laws(model, (3,)), count_laws(model, (3,)), count_laws(model, (3,), seed=5)
    np.testing.assert_array_equal(first.singular_values, again.singular_values)
    assert other.num_laws == first.num_laws == 3
    assert not np.array_equal(first.singular_values, other.singular_values)


class WeakDirection(nn.Module):
    """``f = a x₁ + (a + 10⁻⁷ b) x₂ + (a + 10⁻¹⁰ c) x₃``: c's direction is barely above round-off."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c = self.theta
        coefficients = torch.stack([a, a + 1e-7 * b, a + 1e-10 * c])
        return (x * coefficients).sum(-1, keepdim=True)


def test_no_clear_gap_gives_no_count() -> None:
    count = count_laws(WeakDirection(), (3,))
    assert not count.conclusive and "gap" in count.reason
    assert count.num_laws is None and count.rank_lie is None
    assert count.sigma_kept < GAP * count.sigma_dropped


def test_a_nan_bound_is_no_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound that came out NaN (an inf in a solve) fails the gap test instead of passing every comparison."""
    from dataclasses import replace

    from conslaw_lite.counting import count as count_module

    rank = count_module.lie_rank
    monkeypatch.setattr(count_module, "lie_rank", lambda *a, **k: replace(rank(*a, **k), sigma_kept=float("nan")))
    count = count_laws(ToyProduct(a=1.0, b=2.0), (1,))
    assert not count.conclusive and count.num_laws is None and "no clear gap" in count.reason


def test_residual_evidence_agrees_with_the_spectrum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SPECTRUM_MAX_D the evidence is the orthogonalization's residuals: same count, and their dropped
    norm bounds the spectrum's largest dropped singular value (the stack minus the dropped parts has rank r)."""
    built = get_arch("mha").build(ArchOptions(dim=5, heads=2, head_dim=4))
    spectrum = count_laws(built.model, built.input_shape)
    monkeypatch.setattr(lie_rank, "SPECTRUM_MAX_D", 0)
    residuals = count_laws(built.model, built.input_shape)
    assert (spectrum.evidence, residuals.evidence) == ("spectrum", "residuals")
    assert_clear_gap(residuals)
    assert residuals.num_laws == spectrum.num_laws == built.formula
    assert spectrum.sigma_dropped <= residuals.sigma_dropped < 1e-10
    assert 0.01 < residuals.sigma_kept / spectrum.sigma_kept < 100  # an estimate of the spectrum's σ_r


def test_residuals_without_a_gap_fall_back_to_the_spectrum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lie_rank, "SPECTRUM_MAX_D", 0)
    count = count_laws(WeakDirection(), (3,))
    assert count.evidence == "spectrum" and not count.conclusive and "gap" in count.reason


def test_check_accepts_toy_law_and_rejects_a_non_law() -> None:
    toy = ToyProduct(a=1.0, b=2.0)
    good = check_laws(toy, {"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2}, (1,))
    assert good.complete and good.independent == good.num_laws == 1
    assert good.max_residual < 1e-12
    bad = check_laws(toy, {"a²+b²": lambda p: p["a"] ** 2 + p["b"] ** 2}, (1,))
    assert not bad.complete
    assert bad.residuals["a²+b²"] > 0.1


class Faint(nn.Module):
    """A linear net 3-3-3 whose hidden layer is scaled by ``faint``, beside a skip ``Linear``: at 10⁻¹⁰ its
    gradients are 10⁻¹⁰ of the skip's."""

    def __init__(self, faint: float) -> None:
        super().__init__()
        self.faint = faint
        self.first, self.second, self.skip = (nn.Linear(3, 3, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.faint * self.first(x)) + self.skip(x)


@pytest.mark.parametrize("faint", [1.0, 1e-10])
def test_a_wrong_law_on_layers_whose_gradients_vanish_fails_the_check(faint: float) -> None:
    model = Faint(faint)
    count = count_laws(model, (3,))

    def gram(p: dict[str, torch.Tensor]) -> torch.Tensor:
        W1, W2 = p["first.weight"], p["second.weight"]
        return W1 @ W1.T - W2.T @ W2

    right = check_laws(model, {"W₁W₁ᵀ − W₂ᵀW₂": gram}, (3,), count=count)
    assert right.complete and right.independent == count.num_laws == 6
    wrong = check_laws(model, {"‖W₁‖²": lambda p: p["first.weight"].square().sum()}, (3,), count=count)
    # its cosine with ∇f over all of θ is 10⁻¹¹ at faint = 10⁻¹⁰: below RESIDUAL_TOL, it would pass
    assert wrong.max_residual > 100 * RESIDUAL_TOL


def test_check_matrix_law_counts_independent_entries() -> None:
    model = two_layer(4, 3, 4)  # "0" is B (r×d, nn.Linear layout), "1" is A (m×r)

    def gram_difference(p):  # AᵀA − BBᵀ, r×r symmetric: r(r+1)/2 = 6 independent entries of 9
        A, B = p["1.weight"], p["0.weight"]
        return A.T @ A - B @ B.T

    full = check_laws(model, {"AᵀA−BBᵀ": gram_difference}, (4,))
    assert full.complete and full.independent == 6 == full.num_laws
    diagonal = check_laws(model, {"diag": lambda p: torch.diagonal(gram_difference(p))}, (4,), count=full.count)
    assert diagonal.max_residual < 1e-12 and diagonal.independent == 3 and not diagonal.complete


class Argmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x).argmax(-1)


class Rounded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.W = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(self.W(x))


def nan_linear() -> nn.Linear:
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    return model


@pytest.mark.parametrize(
    "model, shape, error, words",
    [
        (nn.ReLU(), (3,), ValueError, "no trainable parameters"),
        (Argmax(), (3,), TypeError, "dtype torch.int64"),
        (Rounded(), (3,), ValueError, "gradient in θ is zero"),
        (nan_linear(), (3,), ValueError, "'weight' contains NaN"),
        (nn.Linear(3, 2), (4,), ValueError, "fails on inputs of shape (4,)"),
        (nn.Linear(3, 2), None, ValueError, "give input_shape"),
        (lambda p, x: x * p["a"], (1,), TypeError, "needs params"),
        ("not a model", (1,), TypeError, "nn.Module or a function"),
    ],
)
def test_bad_input_names_the_problem(model, shape, error, words: str) -> None:
    with pytest.raises(error) as caught:
        count_laws(model, shape)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_inputs_that_are_not_one_tensor_are_named() -> None:
    """A model of two inputs given them as a tuple: an AttributeError of ours ('tuple' has no is_floating_point)."""
    x = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match="inputs must be one tensor, a batch of inputs, got a tuple"):
        count_laws(nn.Linear(3, 2).double(), inputs=(x, x))


def test_law_that_does_not_fit_the_model_is_named() -> None:
    with pytest.raises(ValueError, match="law 'h'"):
        check_laws(ToyProduct(a=1.0, b=2.0), {"h": lambda p: p["missing"]}, (1,))


class MaskedReLU(nn.Module):
    """``A·relu(Bx)`` written with data-dependent indexing (``nonzero``), which ``vmap`` cannot batch."""

    def __init__(self, d: int, r: int, m: int) -> None:
        super().__init__()
        self.B, self.A = nn.Linear(d, r, bias=False), nn.Linear(r, m, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.B(x)
        on = torch.nonzero(h > 0, as_tuple=True)
        return self.A(torch.zeros_like(h).index_put(on, h[on]))


def test_module_vmap_cannot_batch_is_counted_one_vector_at_a_time() -> None:
    count = count_laws(MaskedReLU(3, 2, 2), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 2


# --- torch ops with wrong higher derivatives (conslaw_lite.counting.exact_ops) ---

D_IN, D_NORM, M_OUT = 3, 4, 2


def elementary_layer_norm_net(p: dict, x: torch.Tensor, eps: float) -> torch.Tensor:
    """``W · LN(E x)`` with ``LN = γ ⊙ (h − h̄) / √(var h + ε)`` written out in elementary ops."""
    h = x @ p["0.weight"].T
    centered = h - h.mean(-1, keepdim=True)
    return (p["1.weight"] * centered / torch.sqrt((centered * centered).mean(-1, keepdim=True) + eps)) @ p["2.weight"].T


@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_torch_layer_norm_counts_like_the_elementary_one(eps: float) -> None:
    torch.manual_seed(0)
    norm = nn.LayerNorm(D_NORM, eps=eps, bias=False)
    net = nn.Sequential(nn.Linear(D_IN, D_NORM, bias=False), norm, nn.Linear(D_NORM, M_OUT, bias=False))
    params = {n: p.detach() for n, p in net.named_parameters()}
    elementary = count_laws(lambda p, x: elementary_layer_norm_net(p, x, eps), (D_IN,), params=params)
    fused = count_laws(net, (D_IN,))
    assert_clear_gap(fused)
    assert fused.num_laws == elementary.num_laws == D_NORM + D_IN + (eps == 0)  # formula: chapter 11, Linear→LN→Linear
    unguarded = count_laws(net, (D_IN,), exact_ops=False)  # torch's layer_norm as it is: caught, no count
    assert not unguarded.conclusive and unguarded.num_laws is None
    assert "derivatives" in unguarded.reason


def second_derivative(fn, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``d²fn(x)[u, v]``, forward mode over forward mode (as the brackets' forward pass sees it)."""
    return jvp(lambda y: jvp(fn, (y,), (u,))[1], (x,), (v,))[1]


def central_difference(fn, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, h: float = 1e-4) -> torch.Tensor:
    first = lambda y: jvp(fn, (y,), (u,))[1]  # noqa: E731
    return (first(x + h * v) - first(x - h * v)) / (2 * h)


NORMS = {
    "layer_norm": (lambda x: F.layer_norm(x, (6,), eps=1e-5), (3, 6)),
    "torch.layer_norm": (lambda x: torch.layer_norm(x, (6,), None, None, 1e-5), (3, 6)),
    "batch_norm": (lambda x: F.batch_norm(x, None, None, training=True), (5, 3)),
    "instance_norm": (lambda x: F.instance_norm(x), (2, 3, 4)),
}


@pytest.mark.parametrize("name", NORMS)
def test_exact_derivatives_fixes_second_derivatives_of_fused_norms(name: str) -> None:
    fn, shape = NORMS[name]
    gen = torch.Generator().manual_seed(0)
    x, u, v = (torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(3))
    reference = central_difference(fn, x, u, v)  # first derivatives are right; differencing them is accurate to ~1e-8
    torch_error = (second_derivative(fn, x, u, v) - reference).norm() / reference.norm()
    with exact_derivatives():
        assert torch.allclose(fn(x), NORMS[name][0](x))
        exact_error = (second_derivative(fn, x, u, v) - reference).norm() / reference.norm()
    assert exact_error < 1e-6
    assert torch_error > 1e-2  # torch 2.14's fused kernel (if this fails, torch is fixed: drop the route)


def test_scaled_dot_product_attention_counts_like_softmax_attention() -> None:
    def attention(sdpa):
        return lambda p, x: sdpa(x @ p["Q"].T, x @ p["K"].T, x @ p["V"].T)  # x (S, T, d) -> (S, T, k)

    def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v

    params, k = {n: torch.ones(2, 3) for n in "QKV"}, 2
    fused = count_laws(attention(F.scaled_dot_product_attention), (3, 3), params=params, num_samples=32)
    elementary = count_laws(attention(softmax_attention), (3, 3), params=params, num_samples=32)
    assert_clear_gap(fused)
    assert fused.num_laws == elementary.num_laws == k * (k + 1) // 2  # formula: W_Q W_Qᵀ − W_K W_Kᵀ, symmetric k×k


def test_unrouted_fused_attention_counts_right_or_refuses() -> None:
    """Without exact_ops, SDPA runs on whatever kernel torch picks. Whether that kernel has forward-mode
    derivatives depends on the torch release (none on 2.14's CPU flash kernel, some on 2.13), so the
    property is: the counter either gives the right count or refuses by name, never a wrong count."""
    params, k = {n: torch.ones(2, 3) for n in "QKV"}, 2

    def net(p: dict, x: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(x @ p["Q"].T, x @ p["K"].T, x @ p["V"].T)

    try:
        count = count_laws(net, (3, 3), params=params, num_samples=32, exact_ops=False)
    except ValueError as err:  # no forward-mode derivative at all: refused by name
        assert "forward AD" in str(err)
        return
    if count.conclusive:
        assert count.num_laws == k * (k + 1) // 2
    else:  # derivatives present but wrong: the self-check refuses with a reason
        assert count.num_laws is None and count.reason


def test_an_unrouted_wrong_op_gives_no_count() -> None:
    def net(p: dict, x: torch.Tensor) -> torch.Tensor:  # aten's layer norm called directly: exact_ops cannot see it
        h = torch.native_layer_norm(x @ p["0.weight"].T, (D_NORM,), p["1.weight"], None, 1e-5)[0]
        return h @ p["2.weight"].T

    shapes = {"0.weight": (D_NORM, D_IN), "1.weight": (D_NORM,), "2.weight": (M_OUT, D_NORM)}
    count = count_laws(net, (D_IN,), params={n: torch.ones(s) for n, s in shapes.items()})
    assert not count.conclusive and count.num_laws is None
    assert "derivatives" in count.reason


def test_exact_derivatives_restores_torch_even_after_an_error() -> None:
    originals = (F.layer_norm, torch.layer_norm, F.batch_norm, F.instance_norm)
    with pytest.raises(KeyError), exact_derivatives():
        assert F.layer_norm is not originals[0]
        raise KeyError("inside")
    assert (F.layer_norm, torch.layer_norm, F.batch_norm, F.instance_norm) == originals
    assert torch.backends.cuda.flash_sdp_enabled()


# --- piecewise-linear models: ReLU strata (conslaw_lite.counting.strata) ---


def relu_net(*widths: int) -> nn.Sequential:
    """``W_L relu(⋯ relu(W_1 x))`` without biases (Marcotte et al.'s random ReLU nets)."""
    from conslaw_lite.marcotte import deep_net

    return deep_net(widths, relu=True)


@pytest.mark.parametrize("seed", range(4))
def test_relu_net_counts_one_law_per_hidden_unit_whichever_units_a_random_theta_leaves_dead(seed: int) -> None:
    # Widths [8, 2, 3, 3]: a layer-2 unit reads two non-negative inputs, so about half of all θ leave it dead
    # (or always active) for every input; the count is that of the whole parameter space all the same.
    count = count_laws(relu_net(8, 2, 3, 3), (8,), seed=seed)
    assert_clear_gap(count)
    assert count.num_laws == 2 + 3 and count.patterns == "realizable"


@pytest.mark.slow  # three of the Marcotte suite's hardest ReLU nets
def test_narrow_relu_nets_count_one_law_per_hidden_unit() -> None:
    # Each is a net where drawing θ until every unit is used was not enough: [2, 2, 9, 9, 3] almost never has
    # such a θ, [3, 6, 9, 7, 6] has them, but its rank at them varies (139 to 151 below the 155 of the count).
    for widths in [(2, 2, 9, 9, 3), (3, 6, 9, 7, 6), (3, 4, 9, 7, 7)]:
        count = count_laws(relu_net(*widths), (widths[0],))
        assert_clear_gap(count)
        assert count.num_laws == sum(widths[1:-1]), widths


def test_leaky_relu_net_counts_one_law_per_hidden_unit() -> None:
    net = nn.Sequential(nn.Linear(3, 4, bias=False), nn.LeakyReLU(0.2), nn.Linear(4, 3, bias=False),
                        nn.LeakyReLU(), nn.Linear(3, 2, bias=False)).double()  # fmt: skip
    count = count_laws(net, (3,))
    assert_clear_gap(count)
    assert count.num_laws == 4 + 3


def test_relu_net_with_a_dead_layer_at_some_theta_is_counted_without_error() -> None:
    count = count_laws(relu_net(5, 2, 2, 4), (5,))  # at some θ both layer-2 units die: the output is constant there
    assert_clear_gap(count)
    assert count.num_laws == 4


def test_a_dead_unit_theta_given_with_at_has_a_larger_count() -> None:
    net = relu_net(3, 4, 4, 2)
    with torch.no_grad():
        net[2].weight[0] = -net[2].weight[0].abs()  # unit 0 of layer 2 reads ReLU outputs with negative weights
    whole = count_laws(net, (3,))
    dead = count_laws(net, (3,), at=dict(net.named_parameters()))
    assert_clear_gap(whole)
    assert_clear_gap(dead)
    assert whole.num_laws == 8 and dead.num_laws > whole.num_laws
    assert dead.patterns == "at θ" and dead.strata[0].dead == ("3[0]",) and dead.strata[0].rank == dead.rank_lie


def test_near_a_theta_a_relu_net_has_at_least_the_laws_of_the_whole_parameter_space() -> None:
    net = relu_net(3, 5, 4, 2)
    whole = count_laws(net, (3,))
    for seed in range(3):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            values = {n: torch.randn_like(p) for n, p in net.named_parameters()}
        near = count_laws(net, (3,), at=values)
        assert near.conclusive and near.num_laws >= whole.num_laws == 9


def test_relu_of_the_weights_alone_is_counted_with_its_own_pattern() -> None:
    model = lambda p, x: x @ torch.relu(p["W"]).T  # noqa: E731  no input to pair the ReLU's pattern with
    W = torch.tensor([[1.0, -2.0, 0.5], [-0.3, 2.0, 1.5]])
    count = count_laws(model, (3,), params={"W": W}, at={"W": W})
    assert_clear_gap(count)
    assert count.patterns == "at θ" and count.num_laws == 2  # each negative entry: no gradient reaches it
    assert count_laws(model, (3,), params={"W": W}).patterns == "at θ"  # at random θ too, and no error


class ClampedWeights(nn.Module):
    """``fc(relu(x clamp(W, −½, ½)ᵀ + b))``: the clamp acts on the weight alone, no input to pair its pieces with."""

    def __init__(self) -> None:
        super().__init__()
        self.W, self.b, self.fc = nn.Parameter(0.5 * torch.randn(6, 4)), nn.Parameter(torch.zeros(6)), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(x @ self.W.clamp(-0.5, 0.5).T + self.b))


def test_a_clamp_of_the_weights_alone_is_no_count_at_a_random_theta() -> None:
    """Each θ's saturated entries are conserved near it: counted 7, 8 or 9 (conclusive where two θ agreed) at
    seeds where 45 of D = 51 is reached elsewhere. Near a given θ the count is that θ's. A clamp whose entries every
    random θ leaves on one piece is no count either (CLIP's logit scale ``exp(s).clamp(max=100)`` counted 1, the
    law of (W, s) → (λW, s − ln λ), which the capped piece breaks: s stops, W moves), but near its θ it is 1."""
    for seed in (0, 6):
        torch.manual_seed(0)
        count = count_laws(ClampedWeights().double(), (4,), seed=seed)
        assert not count.conclusive and "acts on a tensor without the batch of inputs first" in count.reason
    model = ClampedWeights().double()
    assert count_laws(model, (4,), at=dict(model.named_parameters())).conclusive
    scale = lambda p, x: (x @ p["W"].T) * p["s"].exp().clamp(max=100.0)  # noqa: E731  CLIP's logit scale
    params = {"W": torch.randn(3, 4, dtype=torch.float64), "s": torch.tensor(2.659, dtype=torch.float64)}
    assert not count_laws(scale, (4,), params=params).conclusive
    assert count_laws(scale, (4,), params=params, at=params).num_laws == 1  # (W, s) → (λW, s − ln λ)


@pytest.mark.parametrize("bound", [1.0, 3.0])
def test_a_weight_clip_that_random_theta_stay_inside_is_no_count(bound: float) -> None:
    """``x W₁.clamp(−c, c)ᵀ W₂ᵀ`` (WGAN's clip) at nn.Linear's scale: every entry of W₁ inside (−c, c) at every θ
    drawn, the linear net's 6 laws counted, conclusive; entries beyond c break all of them (a probe's exact rank: 0)."""
    clipped = lambda p, x: x @ p["W1"].clamp(-bound, bound).T @ p["W2"].T  # noqa: E731
    params = {"W1": torch.randn(3, 3, dtype=torch.float64) / 3, "W2": torch.randn(2, 3, dtype=torch.float64) / 3}
    for seed in range(3):
        count = count_laws(clipped, (3,), params=params, seed=seed)
        assert not count.conclusive, count  # the θ disagree, or they agree on θ's own pattern, which says so


@pytest.mark.parametrize("eps", [0.5, 1e-12])
def test_a_kink_of_the_weights_inside_a_torch_function_is_no_count(eps: float) -> None:
    """``V F.normalize(W, eps=ε) x``: the clamp of ‖w‖ at ε runs inside ``F.normalize``, where no activation pattern
    is taken. At ε = 0.5 it counted 3, conclusive at some seeds (an oracle forcing both pieces: 0); rows below ε are
    linear, rows above are scale-invariant. Near a θ whose rows are all longer than ε, each row's ‖w‖² is a law."""
    normalized = lambda p, x: x @ F.normalize(p["W"], dim=1, eps=eps).T @ p["V"].T  # noqa: E731
    gen = torch.Generator().manual_seed(0)
    params = {
        "W": torch.randn(4, 3, generator=gen, dtype=torch.float64),
        "V": torch.randn(2, 4, generator=gen, dtype=torch.float64),
    }
    assert bool((params["W"].norm(dim=1) > 0.5).all())
    for seed in range(3):
        count = count_laws(normalized, (3,), params=params, seed=seed)
        assert not count.conclusive and "aten.clamp_min" in count.reason, count
    near = count_laws(normalized, (3,), params=params, at=params)
    assert near.conclusive and near.num_laws == 4, near


def test_an_unseen_kink_of_tokens_flattened_with_the_batch_is_no_count() -> None:
    """A per-token MLP whose ReLU runs on (batch·tokens, features) as ``torch.ops.aten.relu``: no unit's pieces can
    be read per input, so a θ that keeps a unit on one piece would be ranked with its own laws. It counted,
    conclusive, where the same ReLU on a tensor with the batch first gets the unseen kinks' four θ."""

    def tokens(p: dict, x: torch.Tensor) -> torch.Tensor:
        z = torch.ops.aten.relu(x.reshape(-1, 2) @ p["W1"].T + p["b1"])
        return (z @ p["W2"].T).reshape(len(x), -1, 2).mean(1)

    gen = torch.Generator().manual_seed(0)
    params = {"W1": torch.randn(3, 2, generator=gen, dtype=torch.float64), "b1": torch.randn(3, generator=gen,
              dtype=torch.float64), "W2": torch.randn(2, 3, generator=gen, dtype=torch.float64)}  # fmt: skip
    count = count_laws(tokens, (3, 2), params=params)
    assert not count.conclusive and "(aten.relu) acts on a tensor whose first dimension is not" in count.reason


def test_a_forward_hook_that_marks_an_output_as_requiring_grad_is_counted() -> None:
    """transformers' ``gradient_checkpointing_enable()`` hooks the input embeddings to call ``requires_grad_()`` on
    their output, which torch.func refuses inside its transforms: every count of such a model (in eval mode too)
    raised its RuntimeError, the CLI's exit 3. The mark is for autograd's backward; the count is the plain model's."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    mlp[0].register_forward_hook(lambda module, args, out: out.requires_grad_(True))
    count = count_laws(mlp, (3,))
    assert count.conclusive and count.num_laws == 4, count


@pytest.mark.parametrize(
    ("reentrant", "message"),
    [(False, "saved tensor hooks .* count the model without them"),
     (True, "autograd.Function without setup_context .*use_reentrant=True.* without checkpointing")],
)
def test_activation_checkpointing_is_refused_with_what_to_do(reentrant: bool, message: str) -> None:
    """torch.func has no saved tensor hooks, and differentiates no autograd.Function without setup_context (the
    reentrant checkpoint's): the count ended in a traceback (the CLI's exit 3, an internal error)."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.mlp[1:], self.mlp[0](x), use_reentrant=reentrant)  # an input that needs grad

    with pytest.raises(ValueError, match=message):
        count_laws(Checkpointed(), (4,))


class ScaledWithoutGradient(nn.Module):
    """A ReLU MLP times a scale computed from x, held constant as users write it: ``.detach()``, a
    ``torch.no_grad()`` block, or a ``@torch.no_grad()`` helper (which backward treats the same way)."""

    def __init__(self, style: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.scale, self.style = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(3, 1), style

    @torch.no_grad()
    def _constant_scale(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.scale(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.style == "detach":
            s = torch.sigmoid(self.scale(x)).detach()
        elif self.style == "block":
            with torch.no_grad():
                s = torch.sigmoid(self.scale(x))
        else:
            s = self._constant_scale(x)
        return self.b(torch.relu(self.a(x))) * s


@pytest.mark.parametrize("style", ["block", "decorator"])
def test_what_forward_computes_without_gradients_is_a_constant(style: str) -> None:
    """jvp ignores no_grad: the count was inconclusive ('an op torch differentiates wrongly'). The 4 unit laws and
    the 4 entries of the scale layer, which no gradient reaches, as with .detach()."""
    count = count_laws(ScaledWithoutGradient(style), (3,))
    assert count.conclusive, count.reason
    assert count.num_laws == count_laws(ScaledWithoutGradient("detach"), (3,)).num_laws == 4 + 4


class SoftplusBehindTanh(nn.Module):
    """``c(softplus_β(b(tanh(a x))))``: behind the bounded tanh, a large bias keeps a unit past softplus's threshold
    (βz > 20, where torch returns z) on every input, a linear unit at that θ."""

    def __init__(self, beta: float, bias_scale: float, offset: float = 0.0) -> None:
        super().__init__()
        self.beta, self.offset = beta, offset
        self.a, self.b, self.c = nn.Linear(1, 3), nn.Linear(3, 3), nn.Linear(3, 1)
        with torch.no_grad():
            self.b.bias.mul_(bias_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(F.softplus(self.b(torch.tanh(self.a(x))) + self.offset, beta=self.beta))


@pytest.mark.parametrize("seed", range(4))
def test_a_softplus_unit_past_its_threshold_is_no_count_of_a_linear_unit(seed: int) -> None:
    """β = 100, biases ×10: both θ of seed 2 kept units on torch's linear piece, 8 conclusive laws (N = 0). Now the
    θ are drawn smaller there: 0, or no count where the θ still disagree."""
    torch.manual_seed(seed)
    count = count_laws(SoftplusBehindTanh(100.0, 10.0).double(), (1,), seed=seed)
    assert not count.conclusive or count.num_laws == 0, count.num_laws


def test_a_softplus_unit_past_its_threshold_at_every_scale_is_said() -> None:
    torch.manual_seed(0)
    count = count_laws(SoftplusBehindTanh(1.0, 1.0, offset=100.0).double(), (1,))
    assert not count.conclusive and "stays on or near torch's linear piece" in count.reason, count.reason


class RoundedWeight(nn.Module):
    """``l2(relu(x (round(8 W)/8)ᵀ + b))``, a weight fake-quantized without a straight-through estimator: W gets no
    gradient (its 12 entries are laws), and the first layer is a fixed matrix that θ chooses."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(x @ (torch.round(self.l1.weight * 8) / 8).T + self.l1.bias))


@pytest.mark.parametrize("seed", range(3))
def test_zeros_at_every_scale_are_ranked_at_the_models_scale_too(seed: int) -> None:
    """W's zero gradient sent the θ ten times smaller, down to 10⁻³, where round(8 W) = 0 and the first layer reads
    no input: 16 laws, conclusive at three seeds (rank 14 at the model's own scale: N = 12)."""
    count = count_laws(RoundedWeight().double(), (3,), seed=seed)
    assert count.conclusive and count.num_laws == 12, (count.num_laws, count.reason)


class RoutedUnderIf(nn.Module):
    """Top-1 routing written the usual way: each expert runs on its inputs, only when some are routed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, 2)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top_p, idx = torch.softmax(self.gate(x), dim=-1).max(dim=-1)
        out = torch.zeros(len(x), 2, dtype=x.dtype)
        for e, expert in enumerate(self.experts):
            if (idx == e).any():
                out[idx == e] = top_p[idx == e, None] * expert(x[idx == e])
        return out


def test_an_expert_run_only_when_inputs_are_routed_to_it_is_told_what_to_change() -> None:
    """The refusal named an internal function (kinked_calls) and said nothing of the routing."""
    with pytest.raises(ValueError, match="under an `if` or not.* apply each expert to every input and weight its"):
        count_laws(RoutedUnderIf(), (4,))


def test_model_constant_for_every_theta_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="does not depend on θ"):
        count_laws(lambda p, x: x.sum(-1, keepdim=True) + 0 * p["a"].sum(), (3,), params={"a": torch.ones(2)})


def test_at_names_a_missing_parameter() -> None:
    with pytest.raises(ValueError, match="'0.weight'"):
        count_laws(relu_net(3, 2, 2), (3,), at={})


class Activated(nn.Module):
    """``A·ρ(Bx)`` written as users write it: ρ any callable, d = r = 3, m = 2, no biases."""

    def __init__(self, act, scale: float = 1.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.B, self.A, self.act = nn.Linear(3, 3, bias=False), nn.Linear(3, 2, bias=False), act
        with torch.no_grad():
            self.B.weight.mul_(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(self.act(self.B(x)))


@pytest.mark.parametrize(
    "act",
    [nn.ReLU6(), nn.Hardtanh(), nn.Hardsigmoid(), nn.Hardswish(), lambda z: torch.clamp(z, -3, 3),
     lambda z: z.clamp(min=40.0), lambda z: torch.minimum(z, torch.full_like(z, 0.002))],
    ids=["relu6", "hardtanh", "hardsigmoid", "hardswish", "clamp3", "clamp_min40", "minimum_0.002"],
)  # fmt: skip
def test_a_cap_at_any_threshold_breaks_the_rescaling(act) -> None:
    """A capped piece ``ρ = c ≠ 0`` is not a rescaling of the input: no law (standard-normal inputs alone
    never reached relu6's cap at nn.Linear's scale, and the count was the 3 laws of A·relu(Bx))."""
    count = count_laws(Activated(act), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 0
    per_unit = {"u": lambda p: (p["A.weight"] ** 2).sum(0) - (p["B.weight"] ** 2).sum(1)}
    check = check_laws(Activated(act), per_unit, (3,), count=count)
    assert not check.complete and check.independent == 3


@pytest.mark.parametrize(
    "act", [nn.Hardshrink(), nn.Threshold(0.5, 0.0), lambda z: torch.where(z > 2, z, 0.3 * z)],
    ids=["hardshrink", "threshold", "where"],
)  # fmt: skip
def test_pieces_through_zero_keep_the_rescaling_laws(act) -> None:
    """Every piece of these is ``c·z``: whichever piece a unit is on, (B_i, A_i) → (λB_i, A_i/λ) keeps it,
    so the per-unit laws hold although ρ jumps (the flow only sees ∇f)."""
    count = count_laws(Activated(act), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 3


@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_saturated_attention_is_counted_at_a_smaller_scale(scale: float) -> None:
    """Weights ×1000 make every attention row one-hot behind a LayerNorm (the inputs' scale cannot undo it):
    Q and K get exactly zero gradient on almost every input, and were counted as 18 spurious laws."""
    from conslaw_lite.families.attention.block import MultiHeadAttention

    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(4, elementwise_affine=False), MultiHeadAttention(4, 2, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    count = count_laws(model, (3, 4))
    assert_clear_gap(count)
    assert count.num_laws == 24  # 12 of the heads + 12 of the direction LayerNorm removes (rows of Q, K, V)


def test_a_parameter_the_output_never_reads_is_conserved() -> None:
    """Exactly zero gradient at every θ, at every scale and on the same entries: structural, each entry a law."""

    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear, self.extra = nn.Linear(3, 2), nn.Parameter(torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    count = count_laws(Unused(), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 2


def test_zeros_that_move_from_theta_to_theta_are_refused() -> None:
    """Exact zeros on entries that change from θ to θ, at every scale tried: an error naming the tensor."""

    def flickering(p, x):  # G's entries reach the output through a mask that depends on θ itself
        mask = (p["G"] > p["G"].median()).to(x.dtype)
        return x @ (p["G"] * mask).T + x @ p["W"].T

    with pytest.raises(ValueError, match="'G'.*exactly zero gradient.*not at the same entries"):
        count_laws(flickering, (3,), params={"G": torch.ones(2, 3), "W": torch.ones(2, 3)})


class OneByOneMaps(nn.Module):
    """A 3 × 3 convolution on 1 × 1 maps after a pool, as a ResNet's last stage on small images: of its 54 weights
    only the 6 centre taps read the input, the other 48 multiply its zero padding at every θ."""

    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 3, 3, padding=1, bias=False), nn.Conv2d(3, 2, 3, padding=1, bias=False)
        self.pool, self.fc = pool, nn.Linear(2, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.c2(self.pool(torch.relu(self.c1(x))))).flatten(1))


@pytest.mark.parametrize("pool", [nn.AvgPool2d(2), nn.MaxPool2d(2)], ids=["avg", "max"])
def test_taps_that_read_only_padding_are_laws_behind_a_max_pool_too(pool: nn.Module) -> None:
    """48 taps, one law per hidden channel (3 + 2). A max-pool is a kink the counter does not see: shrinking θ after
    the taps' zero gradients left its units on one piece, and it was no count; the zeros stay at 10⁻³ of the scale,
    so they are structural and θ at the model's scale are ranked."""
    torch.manual_seed(0)
    count = count_laws(OneByOneMaps(pool), (1, 2, 2))
    assert_clear_gap(count)
    assert count.num_laws == 48 + 3 + 2


def test_an_overflowing_large_input_is_left_out() -> None:
    """Inputs far from the standard scale may overflow an exp; they are dropped, the count stays right."""
    exp_net = lambda p, x: torch.exp(x @ p["B"].T) @ p["A"].T  # noqa: E731  no rescaling law; exp(10³·z) overflows
    count = count_laws(exp_net, (2,), params={"B": torch.ones(2, 2), "A": torch.ones(2, 2)})
    assert_clear_gap(count)
    assert count.num_laws == 0


def test_round_off_over_summed_terms_is_not_a_wrong_derivative() -> None:
    """Two stacked one-head attentions on six-decade inputs: the terms of ⟨a, D²f⟩ are 150× their sum, and the
    two ways of computing it agree to round-off of the terms. Counted (formula 2·n·k(k+1) + d(d+1)/2), not refused."""
    from conslaw_lite.families.attention.block import MultiHeadAttention
    from conslaw_lite.models.tiny import Stack

    torch.manual_seed(0)
    net = Stack(MultiHeadAttention(4, 1, 2), MultiHeadAttention(4, 1, 2), residual=False).double()
    count = count_laws(net, (3, 4))
    assert_clear_gap(count)
    assert count.num_laws == 2 * 1 * 2 * 3 + 4 * 5 // 2


def test_a_model_returning_several_tensors_is_counted_on_all_of_them() -> None:
    """Each output tensor keeps one row per input; one without the batch dimension is named."""

    class Pair(nn.Module):
        def __init__(self, extra: str) -> None:
            super().__init__()
            self.a, self.b, self.extra = nn.Linear(4, 6, bias=False), nn.Linear(6, 3, bias=False), extra

        def forward(self, x: torch.Tensor):
            y = self.b(torch.relu(self.a(x)))
            return {"y": y, "sum": x.sum(-1)} if self.extra == "input" else (y, y.sum())

    torch.manual_seed(0)
    assert count_laws(Pair("input").double(), (4,)).num_laws == 6  # x.sum(-1) does not move with θ
    with pytest.raises(ValueError, match="tensor 1 has shape \\(\\), without the batch dimension"):
        count_laws(Pair("scalar").double(), (4,))


def test_a_plain_dict_with_a_logits_key_is_counted_on_all_its_tensors() -> None:
    """Only a transformers ``ModelOutput`` is read as its logits; a user's dict keeps every tensor (l3's 8 entries
    were counted as laws when its key happened to be ``logits``)."""

    class Heads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.l3 = nn.Linear(4, 6, bias=False), nn.Linear(6, 3, bias=False), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.b(torch.relu(self.a(x))), "aux": self.l3(x)}

    torch.manual_seed(0)
    assert count_laws(Heads().double(), 4).num_laws == 6  # input_shape=4 is (4,)


def test_a_model_output_of_ones_own_subclass_is_its_logits() -> None:
    """A ``ModelOutput`` subclassed in a user's file, as research code writes its outputs, is read as its logits, as
    transformers' own are: its ``hidden`` is not counted."""
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")

    @dataclasses.dataclass
    class Out(modeling_outputs.ModelOutput):
        logits: torch.Tensor | None = None
        hidden: torch.Tensor | None = None

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 6, bias=False), nn.Linear(6, 3, bias=False), nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> Out:
            return Out(logits=self.b(torch.relu(self.a(x))), hidden=self.c(x))

    torch.manual_seed(0)
    count = count_laws(Net().double(), (4,))
    assert count.num_laws == 6 + 10  # the 6 unit laws, and c's 10 entries, which the logits do not read


@pytest.mark.parametrize("reduce", [lambda y: y.sum(), lambda y: y.mean(0)], ids=["sum", "mean over the batch"])
def test_a_forward_that_reduces_over_the_batch_is_refused(reduce) -> None:
    """``l1(x).sum()`` was counted as one output of the whole batch: N = 23 of D = 24, conclusive."""
    net = nn.Linear(4, 4).double()
    reduced = lambda p, x: reduce(torch.func.functional_call(net, p, (x,)))  # noqa: E731
    with pytest.raises(ValueError, match="forward reduces over the batch"):
        count_laws(reduced, 4, params=dict(net.named_parameters()))


class SeqFirstGRU(nn.Module):
    """``nn.GRU`` left at ``batch_first=False`` reads the counter's batch of inputs as time: row i of the output
    depends on rows 0..i, so cutting the batch to its first rows changes nothing, and it was counted (6)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def test_a_batch_coupled_through_its_earlier_rows_is_refused() -> None:
    with pytest.raises(ValueError, match=r"`rnn` \(GRU\) mixes the inputs of a batch \(batch_first=False"):
        count_laws(SeqFirstGRU().double(), (3, 2))


class ReluRNN(nn.Module):
    """Two ReLU layers of 2 units over 3 steps, then a linear head. The parameter space keeps 8 laws: each layer's
    ``b_ih − b_hh`` (read only as their sum, 4) and each hidden unit's rescaling (4): the squares of its row of
    W_ih, of W_hh and of its biases, less those of its column of W_hh and of the weights of the next layer."""

    def __init__(self, cells: bool) -> None:
        super().__init__()
        self.cells = cells
        if cells:
            self.c0, self.c1 = nn.RNNCell(2, 2, nonlinearity="relu"), nn.RNNCell(2, 2, nonlinearity="relu")
        else:
            self.rnn = nn.RNN(2, 2, num_layers=2, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.cells:
            return self.head(self.rnn(x)[0])
        h0 = h1 = x.new_zeros(len(x), 2)
        steps = []
        for t in range(x.shape[1]):
            h0 = self.c0(x[:, t], h0)
            h1 = self.c1(h0, h1)
            steps.append(h1)
        return self.head(torch.stack(steps, 1))


@pytest.mark.parametrize("cells", [False, True], ids=["nn.RNN", "nn.RNNCell"])
def test_a_relu_rnn_is_counted_with_every_pattern(cells: bool) -> None:
    """Through torch's fused kernel no ReLU was seen: at seed 1 both θ left a unit on one piece for every input,
    and the count was that θ's own, 9, conclusive."""
    for seed in (0, 1):
        torch.manual_seed(seed)
        count = count_laws(ReluRNN(cells), (3, 2), seed=seed)
        assert count.conclusive and count.patterns == "realizable", count.reason
        assert count.num_laws == 8


class Layers(nn.Module):
    """A net with biases and a ReLU written ``act`` between its layers: one law per hidden unit."""

    def __init__(self, act: Callable, *widths: int) -> None:
        super().__init__()
        self.act, self.layers = act, nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


UNSEEN_RELUS = {
    "aten.relu": lambda z: torch.ops.aten.relu(z),
    "amax": lambda z: torch.stack([z, torch.zeros_like(z)]).amax(0),
    "sign": lambda z: z * (torch.sign(z) + 1) / 2,
    "max_pool1d": lambda z: F.max_pool1d(torch.stack([z, torch.zeros_like(z)], -1).flatten(-2)[:, None], 2)[:, 0],
}


@pytest.mark.parametrize("act", UNSEEN_RELUS.values(), ids=UNSEEN_RELUS.keys())
def test_a_relu_the_patterns_do_not_see_is_counted_only_where_its_units_take_two_pieces(act: Callable) -> None:
    """Spelled so, no ReLU pattern is taken. A 2-2-2-2 net leaves a unit on one piece for every input at most
    random θ: at seed 12 both θ ranked did (N = 5, conclusive; right: 4), at seed 63 four θ did. Such θ are passed
    over now, and where too few others are drawn there is no count; one hidden layer of Gaussian inputs has them."""
    for seed in (12, 63):
        torch.manual_seed(seed)
        count = count_laws(Layers(act, 2, 2, 2, 2), (2,), seed=seed)
        assert not count.conclusive and "a kink of θ the counter does not see (aten." in count.reason
    torch.manual_seed(0)
    count = count_laws(Layers(act, 3, 4, 2), (3,))
    assert count.conclusive and count.num_laws == 4, count.reason


class GroupSort(nn.Module):
    """Each pair of units sorted: a kink torch reaches through ``aten.sort``."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sort(z.unflatten(-1, (-1, 2)), dim=-1).values.flatten(-2)


def test_a_sort_is_an_unseen_kink_and_a_pair_kept_in_one_order_is_passed_over() -> None:
    """A 3-4-4-2 GroupSort net keeps 10 laws; at seed 19 both θ ranked kept a pair in one order for every input, and
    it counted 12, conclusive (an oracle of the whole parameter space: 10)."""
    torch.manual_seed(19)
    net = nn.Sequential(nn.Linear(3, 4), GroupSort(), nn.Linear(4, 4), GroupSort(), nn.Linear(4, 2)).double()
    count = count_laws(net, (3,), seed=19)
    assert count.conclusive and count.num_laws == 10, count.reason


@pytest.mark.parametrize(
    "act", [nn.ReLU6(), nn.Hardtanh(), nn.Hardsigmoid()], ids=["relu6", "hardtanh", "hardsigmoid"]
)  # fmt: skip
def test_a_cap_far_from_the_model_scale_is_met(act) -> None:
    """B at 10⁻⁶ of nn.Linear's scale: θ' of six decades never brought B x to the cap, and the count was the
    3 laws of A·relu(Bx) (hardtanh: more). Wider θ' meet it; check_laws sees the per-unit law break too."""
    count = count_laws(Activated(act, scale=1e-6), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 0
    per_unit = {"u": lambda p: (p["A.weight"] ** 2).sum(0) - (p["B.weight"] ** 2).sum(1)}
    assert check_laws(Activated(act, scale=1e-6), per_unit, (3,), count=count).max_residual > 0.1


def test_a_clamp_a_million_times_above_the_activations_is_met() -> None:
    count = count_laws(Activated(lambda z: torch.clamp(torch.relu(z), max=1e6)), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 0


CAPPED = {
    "hardtanh": lambda c: lambda z: F.hardtanh(z, 0.0, c),
    "relu then clamp": lambda c: lambda z: F.relu(z).clamp(max=c),
}


@pytest.mark.parametrize(
    "cap, act, widths",
    [(1e3, "hardtanh", (2, 2, 2, 2)), (1e6, "hardtanh", (2, 2, 2, 2)), (1e6, "hardtanh", (2, 3, 3, 3, 2)),
     (1e6, "hardtanh", (2, 2, 2, 2, 2, 2)), (1e3, "relu then clamp", (2, 2, 2, 2, 2))],
)  # fmt: skip
def test_a_cap_far_above_is_met_with_the_later_layers_in_their_middle_pieces(cap, act, widths) -> None:
    """A cap after every layer: no laws (c = 1 gives 0 at the model's scale). θ' of one scale met every unit's
    pieces but never a unit on its cap with the units after it between 0 and their caps: the 2-2-2-2 net counted
    2, conclusive, at c = 10⁶ (1 at c = 10³), the 2-3-3-3-2 one 6. Drawn until each pair of calls met each pair of
    pieces, the nets of 4 and 5 layers (a probe's) still counted 1 to 4 at some seeds."""
    for seed in range(4):
        torch.manual_seed(seed)
        count = count_laws(Layers(CAPPED[act](cap), *widths).double(), (widths[0],), seed=seed)
        assert count.conclusive and count.num_laws == 0, count


class LastLayerFirst(nn.Module):
    """``Layers`` with its layers registered last first, as a user may write them: the parameters' order is not
    the order the forward reads them in."""

    def __init__(self, act: Callable, *widths: int) -> None:
        super().__init__()
        self.act, self.layers = act, nn.ModuleList(nn.Linear(a, b) for a, b in reversed(list(zip(widths, widths[1:]))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in list(self.layers)[:0:-1]:
            x = self.act(layer(x))
        return self.layers[0](x)


def test_layers_scaled_apart_are_cut_in_the_order_the_forward_reads_them() -> None:
    """Cut in the parameters' order, a cap after every layer of this net counted 1 or 3 at some seeds (right: 0)."""
    for seed in range(4):
        torch.manual_seed(seed)
        net = LastLayerFirst(CAPPED["hardtanh"](1e6), 2, 2, 2, 2, 2).double()
        count = count_laws(net, (2,), seed=seed)
        assert count.conclusive and count.num_laws == 0, count


class PositiveInputs(nn.Module):
    """f(x) = U act(w softplus(a x + b)): unit j's input has w_j's sign for every x, so a θ puts each unit on one
    piece for all inputs. Where all are on, f = (U·w) s(x) keeps 5 laws; a unit switched off breaks 2 of them (the
    product laws (w_1 + U_1)(w_2 − U_2), ...): the whole space keeps the 3 ‖w_j‖² − ‖U_j‖²."""

    def __init__(self, act: Callable) -> None:
        super().__init__()
        self.act, self.a = act, nn.Linear(1, 1)
        self.w, self.U = nn.Linear(1, 3, bias=False), nn.Linear(3, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.U(self.act(self.w(F.softplus(self.a(x)))))


@pytest.mark.parametrize(
    "act",
    [lambda z: torch.where(z > 0, z, 0.0), lambda z: torch.maximum(z, torch.zeros_like(z)), lambda z: z * (z > 0),
     lambda z: F.threshold(z, 0.0, 0.0), lambda z: torch.where(0 >= z, 0.0, z)],
    ids=["where", "maximum", "mask", "threshold", "reflected comparison"],
)  # fmt: skip
def test_a_relu_written_with_a_comparison_or_a_select_takes_every_pattern(act) -> None:
    """Counted with the pieces the random θ realized only, these gave N = 5 (conclusive) where F.relu gives 3."""
    for seed in range(3):
        torch.manual_seed(seed)
        count = count_laws(PositiveInputs(act).double(), (1,), seed=seed)
        assert count.conclusive and count.patterns == "realizable", count.reason
        assert count.num_laws == 3


HELD_HARDSIGMOID, HELD_HARDSWISH = F.hardsigmoid, F.hardswish  # held from before exact_ops routes them by name
PIECEWISE_ANALYTIC = {
    "elu": nn.ELU(), "selu": nn.SELU(), "celu": nn.CELU(0.7), "elu_alpha": lambda z: F.elu(z, 0.5),
    "held_hardsigmoid": lambda z: HELD_HARDSIGMOID(z - 2.0), "held_hardswish": lambda z: HELD_HARDSWISH(z - 2.0),
}  # fmt: skip


@pytest.mark.parametrize("act", PIECEWISE_ANALYTIC.values(), ids=PIECEWISE_ANALYTIC.keys())
def test_an_activation_kept_on_one_piece_by_theta_takes_its_other_pieces(act) -> None:
    """Behind softplus a θ keeps each unit on one piece for every input. An ELU's pieces (z, α(eᶻ − 1)) were not
    recorded: where its units stayed positive, the laws of the linear piece were counted (1, conclusive, at two
    seeds of three; N = 0); a hardsigmoid held by reference reached torch's kernel (no count)."""
    for seed in range(3):
        torch.manual_seed(seed)
        count = count_laws(PositiveInputs(act).double(), (1,), seed=seed)
        assert count.conclusive and count.patterns == "realizable", count.reason
        assert count.num_laws == 0


@pytest.mark.parametrize("act", [nn.PReLU(), nn.RReLU().eval()], ids=["prelu", "rrelu"])
def test_a_prelu_unit_is_counted_on_both_slopes(act) -> None:
    """PReLU's pieces z and a·z both rescale: the 3 unit laws, whichever piece θ keeps each unit on (6 were
    counted where θ kept them all positive, the slope unread); so do RReLU's in eval mode."""
    for seed in range(2):
        torch.manual_seed(seed)
        count = count_laws(PositiveInputs(act).double(), (1,), seed=seed)
        assert count.conclusive and count.patterns == "realizable", count.reason
        assert count.num_laws == 3


class BehindTanh(nn.Module):
    """``c(act(b(tanh(a x))))``: b's outputs are bounded by ``Σ|b_ij| + |b_i|``, inside ±λ at a small scale."""

    def __init__(self, act: Callable, scale: float) -> None:
        super().__init__()
        self.a, self.b, self.c, self.act = nn.Linear(1, 3), nn.Linear(3, 2), nn.Linear(2, 1), act
        with torch.no_grad():
            self.b.weight.mul_(scale), self.b.bias.mul_(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.act(self.b(torch.tanh(self.a(x)))))


@pytest.mark.parametrize("act, laws", [(nn.Hardshrink(), 2), (nn.Softshrink(), 0)], ids=["hardshrink", "softshrink"])
def test_a_shrink_unit_kept_inside_its_dead_zone_by_theta_takes_its_other_pieces(act, laws: int) -> None:
    """Hardshrink's pieces z, 0, z rescale (one law per unit), softshrink's z ± λ do not. Its pieces were not recorded:
    where θ kept both units inside ±λ for every input the output was constant in all but c's bias, and 16 of D = 17
    were counted (conclusive, at five of six seeds and scales)."""
    for seed, scale in [(0, 1.0), (1, 1.0), (2, 0.2)]:
        torch.manual_seed(seed)
        count = count_laws(BehindTanh(act, scale).double(), (1,), seed=seed)
        assert count.conclusive and count.patterns == "realizable", count.reason
        assert count.num_laws == laws


PIECES = {**PIECEWISE_ANALYTIC, "prelu": nn.PReLU(3).double(), "rrelu": nn.RReLU().eval(),
          "hardshrink": nn.Hardshrink(200.0), "softshrink": nn.Softshrink(300.0)}  # fmt: skip


@pytest.mark.parametrize("act", PIECES.values(), ids=PIECES.keys())
def test_an_activation_on_the_pieces_it_takes_is_itself(act) -> None:
    z = torch.linspace(-1500.0, 1500.0, 33, dtype=torch.float64).reshape(11, 3)
    patterns = covering_patterns(lambda t, x: act(t * x), lambda r, j: torch.ones(1), z, draws=1, rounds=0)
    with forced_patterns(patterns):
        forced = act(z)
    assert len(patterns) == 1 and torch.allclose(forced, act(z), rtol=1e-14, atol=0.0)


def test_a_count_of_another_model_is_refused_by_check_laws() -> None:
    count = count_laws(relu_net(3, 2, 2), (3,))
    with pytest.raises(ValueError, match="count is that of a model of 10 parameters, and this one has"):
        check_laws(relu_net(3, 4, 2), {}, (3,), count=count)


def test_a_count_of_another_model_of_the_same_size_is_refused() -> None:
    """A ReLU MLP's count (N = 3 unit laws + ...) given for the same layers with GELU, or for other inputs: the same D,
    another count. find_laws stopped at the stale N and called its list complete."""
    from conslaw_lite import find_laws

    relu = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    gelu = nn.Sequential(nn.Linear(3, 3), nn.GELU(), nn.Linear(3, 2))
    count = count_laws(relu, (3,))
    with pytest.raises(ValueError, match="count is that of another model, or of inputs of another shape"):
        find_laws(gelu, (3,), count=count)
    with pytest.raises(ValueError, match="count is that of another model"):
        check_laws(gelu, {}, (3,), count=count)

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = nn.MultiheadAttention(4, 1, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mha(x, x, x)[0]

    attention = SelfAttention()
    with pytest.raises(ValueError, match="or of inputs of another shape"):  # one token against three: other laws
        check_laws(attention, {}, (3, 4), count=count_laws(attention, (1, 4)))
    assert check_laws(relu, {}, None, inputs=torch.randn(5, 3), count=count).independent == 0  # the same shape


def test_glu_and_a_weight_norm_parametrization_are_counted() -> None:
    """Their fused kernels have no forward-mode derivative: refused before (exact_ops routes them now)."""
    from torch.nn.utils import parametrizations

    torch.manual_seed(0)
    glu = nn.Sequential(nn.Linear(3, 8, bias=False), nn.GLU(), nn.Linear(4, 2, bias=False)).double()
    by_hand = lambda p, x: (lambda a, b: a * torch.sigmoid(b))(*(x @ p["0.weight"].T).chunk(2, -1)) @ p["2.weight"].T  # noqa: E731
    assert count_laws(glu, (3,)).num_laws == count_laws(by_hand, (3,), params=dict(glu.named_parameters())).num_laws
    # ‖v_i‖² per row (v_i's scale leaves W₁ = g v/‖v‖ as it is) and g_i² − ‖W₂[:, i]‖² per ReLU unit: 4 + 4
    normed = parametrizations.weight_norm(nn.Linear(3, 4, bias=False))
    count = count_laws(nn.Sequential(normed, nn.ReLU(), nn.Linear(4, 2, bias=False)).double(), (3,))
    assert_clear_gap(count)
    assert count.num_laws == 8


def test_a_law_that_reads_a_frozen_parameter_is_named_as_such() -> None:
    net = relu_net(3, 4, 2)
    first = next(net.parameters())
    first.requires_grad_(False)
    name = next(n for n, p in net.named_parameters() if p is first)
    with pytest.raises(ValueError, match=f"'{name}' is frozen \\(requires_grad=False\\)"):
        check_laws(net, {"a": lambda p: p[name].sum()}, (3,))


def test_a_model_of_two_inputs_is_told_how_to_be_counted() -> None:
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return self.lin(x) + self.lin(y)

    with pytest.raises(ValueError, match=r"argument: 'y'\); .* a module whose forward takes one tensor"):
        count_laws(TwoInputs(), (3,))


class NormedLinear(nn.Module):
    """x ↦ W₂ RMSNorm(W₁x): with ε = 0 the norm's input scale is a symmetry (h + 1 laws), with ε > 0 it is not (h)."""

    def __init__(self, eps: float | None, h: int = 5) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(4, h, bias=False), nn.RMSNorm(h, eps=eps), nn.Linear(h, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.fc1(x)))


@pytest.mark.parametrize("seed", [0, 1])
def test_an_rms_norm_of_default_eps_is_counted_with_the_eps_of_the_dtype_it_is_trained_in(seed: int) -> None:
    torch.manual_seed(seed)
    float32 = count_laws(NormedLinear(None), (4,), seed=seed)  # ε = 1.2·10⁻⁷, not float64's 2.2·10⁻¹⁶
    assert float32.conclusive and float32.num_laws == 5
    torch.manual_seed(seed)
    assert count_laws(NormedLinear(0.0), (4,), seed=seed).num_laws == 6


@pytest.mark.parametrize("eps", [None, 1e-12, 1e-16])
def test_a_norm_of_eps_below_round_off_is_counted_at_an_eps_float64_resolves(eps: float | None) -> None:
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="counted at ε = 1e-07"):
        count = count_laws(NormedLinear(eps).double(), (4,))  # as it is: the scale law of ε = 0 too (6)
    assert count.conclusive and count.num_laws == 5


class HandRms(nn.Module):
    """x ↦ W₂ (g ∘ rms(W₁x)) with ε = 10⁻¹⁶ written out, where no attribute, name or call says so: g_i² − ‖W₂[:, i]‖²
    per unit, and W₁'s scale only at ε = 0. ``functional``: ``F.rms_norm(..., eps=ε)``, the same function;
    ``in_tensor``: ε kept in a tensor (an attribute), or ``"forward"``: made in forward, which the count cannot
    raise."""

    def __init__(self, functional: bool = False, eps: float = 1e-16, in_tensor: bool | str = False) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 5, bias=False), nn.Linear(5, 2, bias=False)
        self.g = nn.Parameter(torch.ones(5))
        self.functional, self.in_forward = functional, in_tensor == "forward"
        self.tiny = torch.tensor(eps, dtype=torch.float64) if in_tensor is True else eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.functional:
            return self.fc2(F.rms_norm(h, (5,), weight=self.g, eps=self.tiny))
        tiny = h.new_tensor(self.tiny) if self.in_forward else self.tiny  # a tensor of forward's own: none holds it
        return self.fc2(self.g * h / torch.sqrt((h * h).mean(-1, keepdim=True) + tiny))


@pytest.mark.parametrize("eps", [None, 1e-12, 1e-16])
def test_a_functional_norm_of_eps_below_round_off_is_counted_as_its_module(eps: float | None) -> None:
    """F.rms_norm(..., eps=10⁻¹²) is nn.RMSNorm(eps=10⁻¹²): both are counted at ε = 10⁻⁷ (N = 5); the call was counted
    as it stood, where float64 takes ε for 0 (N = 6 conclusive at 10⁻¹², or the gap guard's refusal)."""
    torch.manual_seed(0)
    count = count_laws(HandRms(functional=True, eps=eps).double(), (4,))
    assert count.conclusive and count.num_laws == 5


def test_f_layer_norm_of_eps_below_round_off_is_counted_as_nn_layer_norm() -> None:
    """The count replaces F.layer_norm by its exact formula, which took ε = 10⁻¹² as given: N = 5, against 4 for
    nn.LayerNorm(eps=10⁻¹²), the same function."""

    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(3, 5), nn.Linear(5, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(torch.relu(F.layer_norm(self.fc1(x), (5,), eps=1e-12)))

    torch.manual_seed(0)
    functional = Functional().double()
    module = nn.Sequential(functional.fc1, nn.LayerNorm(5, eps=1e-12, elementwise_affine=False), nn.ReLU(),
                           functional.fc2)  # fmt: skip
    with pytest.warns(UserWarning, match="counted at ε = 1e-07"):
        expected = count_laws(module, (3,))
    assert count_laws(functional, (3,)).num_laws == expected.num_laws == 4


def test_a_direction_apart_from_round_off_but_under_the_gap_leaves_no_count() -> None:
    """Before: N = 6, conclusive, at seed 1 (W₁'s scale direction at 10⁻¹⁰, the 5 laws' at round-off, 10⁻¹⁵); at seed
    0 the two θ disagree. ε made in forward as a tensor is counted as it is, and the guard refuses; a number added in
    forward, or kept in a tensor of the module, is counted at 10⁻⁷, as a norm module's ε is (N = 5)."""
    for seed in (0, 1):
        torch.manual_seed(seed)
        count = count_laws(HandRms(in_tensor="forward").double(), (4,), seed=seed)
        assert not count.conclusive and ("two gaps: N = 6" in count.reason or "θ disagree" in count.reason)
        for in_tensor in (False, True):
            torch.manual_seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tensor's: `tiny` counted at 1e-07
                count = count_laws(HandRms(in_tensor=in_tensor).double(), (4,), seed=seed)
            assert count.conclusive and count.num_laws == 5, (seed, in_tensor)


class EpsBuffer(nn.Module):
    """An RMSNorm written with its ε in a buffer, as users register one: N = 5, as nn.RMSNorm(eps=1e-16) gives; counted
    as it is, the two random θ disagreed or the gap guard refused (seeds 0 to 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 5, bias=False), nn.Linear(5, 2, bias=False)
        self.g = nn.Parameter(torch.ones(5))
        self.register_buffer("eps", torch.tensor(1e-16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(self.g * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps))


def test_a_norms_eps_in_a_buffer_is_counted_as_nn_rms_norm_and_the_model_is_left_as_it_was() -> None:
    torch.manual_seed(0)
    model = EpsBuffer()
    with pytest.warns(UserWarning, match="`eps` holds 1e-16 > 0: counted at ε = 1e-07"):
        count = count_laws(model, (4,))
    reference = nn.Sequential(model.fc1, nn.RMSNorm(5, eps=1e-16), model.fc2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = count_laws(reference, (4,))
    assert count.conclusive and count.num_laws == expected.num_laws == 5 and torch.equal(model.eps, torch.tensor(1e-16))


class HandLayerNorm(nn.Module):
    """A LayerNorm written as BERT's was, ε = 10⁻¹² in ``variance_epsilon`` (or as a number in forward), between two
    layers: N = 5 as with ``nn.LayerNorm(eps=1e-12)``; counted as the float64 copy reads it, N = 6, conclusive."""

    def __init__(self, literal: bool) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 3)
        self.weight, self.bias = nn.Parameter(torch.ones(6)), nn.Parameter(torch.zeros(6))
        self.literal, self.variance_epsilon = literal, 1e-12

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        u = h - h.mean(-1, keepdim=True)
        v = u.pow(2).mean(-1, keepdim=True)
        return self.b(F.silu(self.weight * u / torch.sqrt((v + 1e-12) if self.literal else (v + self.variance_epsilon))
                             + self.bias))  # fmt: skip


@pytest.mark.parametrize("literal", [False, True])
def test_a_layer_norm_written_by_hand_with_a_tiny_eps_is_counted_as_nn_layer_norm(literal: bool) -> None:
    torch.manual_seed(0)
    count = count_laws(HandLayerNorm(literal).double(), (4,))
    assert count.conclusive and count.num_laws == 5


class ThreeLayers(nn.Module):
    """A 4-3-3-2 ReLU MLP: each hidden unit keeps ‖w_in‖² − ‖w_out‖² (6 laws), and nothing else on any inputs."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(4, 3, bias=bias), nn.Linear(3, 3, bias=bias), nn.Linear(3, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


@pytest.mark.parametrize("few, bias", [(8, False), (12, True)])
def test_a_few_given_inputs_each_take_the_patterns_of_many_theta(few: int, bias: bool) -> None:
    """With one pattern per given input (a probe's 8 and 12 Gaussian points), the count was 7 to 10, conclusive:
    the patterns other θ realize on the same inputs break the extra laws."""
    inputs = torch.randn(few, 4, generator=torch.Generator().manual_seed(100), dtype=torch.float64)
    for seed in range(3):
        torch.manual_seed(seed)
        count = count_laws(ThreeLayers(bias).double(), inputs=inputs, seed=seed)
        assert count.conclusive and count.num_laws == 6, count


def test_a_parametrized_weight_read_on_another_path_in_eval_mode_is_no_mode_difference() -> None:
    """weight_norm on nn.MultiheadAttention's out_proj: eval mode reads the weight elsewhere (its fast path), so the
    parametrization's call moved, and the count refused train mode as another function; the outputs are equal."""
    from torch.nn.utils.parametrizations import weight_norm

    class Attend(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
            weight_norm(self.attn.out_proj)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    torch.manual_seed(0)
    model = Attend().double()
    trained = count_laws(model.train(), (3, 8))
    assert trained.conclusive and trained.num_laws == count_laws(model.eval(), (3, 8)).num_laws == 37


def test_a_search_says_each_warning_once() -> None:
    """A search copies the model to float64 many times, and vmaps over weight_norm's kernel, which has no batching
    rule: the ε warning was said 8 times (a filter's "once per line" forgets at each catch_warnings), torch's note on
    vmap's speed dozens of times. The warning points at the caller's line, not at contextlib's."""
    import warnings

    from torch.nn.utils import parametrizations

    from conslaw_lite import find_laws

    torch.manual_seed(0)
    model = nn.Sequential(parametrizations.weight_norm(nn.Linear(3, 4)), nn.RMSNorm(4, eps=1e-10), nn.Linear(4, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = find_laws(model, (3,))
    messages = [str(w.message) for w in caught]
    assert found.conclusive and sum("counted at ε = 1e-07" in m for m in messages) == 1, messages
    assert [w.filename for w in caught if "counted at ε" in str(w.message)] == [__file__]  # the caller's line
    assert not any("batching rule" in m for m in messages), messages


def test_bad_input_messages_name_the_way_out() -> None:
    """An nn.Embedding given float inputs (input_shape=): torch's dtype error alone, or a hint about casts inside
    forward; a law reading a name the model has not: a KeyError of that name alone."""
    embedding = nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Linear(15, 2))
    with pytest.raises(ValueError, match=r"its nn.Embedding reads token ids: give them with inputs= \(a batch"):
        count_laws(embedding, (5,))
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"'W' is no parameter of the model \(0.weight, 0.bias, 2.weight, 2.bias\)"):
        check_laws(mlp, {"x": lambda p: p["W"]}, (3,))


def test_inputs_with_nan_are_named_not_blamed_on_theta() -> None:
    """NaN inputs made the count say "the model's output is NaN or infinite at a random θ"."""
    x = torch.randn(4, 3, dtype=torch.float64)
    x[1, 2] = float("nan")
    with pytest.raises(ValueError, match="inputs hold 1 NaN or infinite entries of 12: give finite inputs"):
        count_laws(nn.Linear(3, 2).double(), inputs=x)


def test_a_count_near_a_theta_whose_last_layer_is_zero_is_no_division_by_zero() -> None:
    """Weight and bias of the last layer zero: f = 0 near θ, both ways of D²f, D³f exactly 0 (ZeroDivisionError)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    with torch.no_grad():
        model[2].weight.zero_()
        model[2].bias.zero_()
    count = count_laws(model, (3,), at=dict(model.named_parameters()))
    assert count.conclusive and count.num_laws == 4, count


def _pruned() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    prune.random_unstructured(model[0], "weight", amount=0.25)
    return model


def _weight_normed() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    with pytest.warns(FutureWarning):  # torch's old weight_norm, deprecated, still in use
        torch.nn.utils.weight_norm(model[0])
    return model


@pytest.mark.parametrize("make", [_pruned, _weight_normed, lambda: nn.DataParallel(_pruned())])
def test_pruned_weight_normed_and_data_parallel_models_are_counted(make: Callable[[], nn.Module]) -> None:
    """A pre-hook's computed ``weight`` attribute made copy.deepcopy fail (a RuntimeError of torch's), and
    nn.DataParallel was blamed on the inputs' shape: each is 4 unit laws plus its own (a pruned entry, read by no
    output, or the rescaling of each row of weight_norm's v): 8."""
    torch.manual_seed(0)
    count = count_laws(make(), (4,))
    assert count.conclusive and count.num_laws == 8, count


class _InPlace(nn.Module):
    """3 → 4 → 2 with the activation ``act(h)`` written in place, its result discarded: the model reads ``h``."""

    def __init__(self, act: Callable[[torch.Tensor], object]) -> None:
        super().__init__()
        self.f1, self.f2, self.act = nn.Linear(3, 4), nn.Linear(4, 2), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.f1(x)
        self.act(h)
        return self.f2(h)


@pytest.mark.parametrize(
    ("act", "laws"),
    [
        (lambda h: h.relu_(), 4),
        (lambda h: F.relu(h, True), 4),  # inplace given by position
        (nn.ReLU(inplace=True), 4),
        (lambda h: F.leaky_relu(h, 0.1, inplace=True), 4),
        (lambda h: h.abs_(), 4),
        (lambda h: F.hardtanh(h, inplace=True), 0),
        (lambda h: F.hardswish(h, inplace=True), 0),  # an exact stand-in of the counter
    ],
)
def test_an_activation_written_in_place_is_counted_as_torch_computes_it(act: Callable, laws: int) -> None:
    """The counter's stand-ins returned a new tensor: ``h.relu_()``, its result discarded, was the identity (N = 10,
    conclusive, instead of the 4 unit laws; a hardtanh 10 instead of 0)."""
    torch.manual_seed(0)
    result = count_laws(_InPlace(act).double(), (3,), progress=False)
    assert result.conclusive and result.num_laws == laws


class _Aliased(nn.Module):
    """A ReLU in place whose input is read afterwards (``z``, rectified by then), or (``view``) on half the units."""

    def __init__(self, view: bool) -> None:
        super().__init__()
        self.f1, self.f2, self.f3, self.view = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(4, 2), view

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.f1(x)
        if self.view:
            z[:, :2].relu_()
            return self.f2(z)
        return self.f2(torch.relu_(z)) + self.f3(z)


def test_an_in_place_activation_changes_its_aliases() -> None:
    """Through ``z``, f2 and f3 read the same rectified units: their 4 unit laws, and f2 − f3 is not read (10 laws);
    it was 6, z read unrectified. On the view: 2 unit laws, GL(2) of the 2 linear units, 3 laws, and f3, unread, 10;
    it was 20, every unit linear."""
    for view, laws in ((False, 4 + 10), (True, 2 + 3 + 10)):
        torch.manual_seed(0)
        result = count_laws(_Aliased(view).double(), (3,), progress=False)
        assert result.conclusive and result.num_laws == laws, view


def test_a_sparse_embedding_is_counted_and_searched_as_its_dense_twin() -> None:
    """``nn.Embedding(sparse=True)``: the same function, a sparse gradient; the count raised torch's
    NotImplementedError (and the CLI exited 3 with a traceback), and so did the search (find_laws, the Monitor's)."""
    ids = torch.randint(0, 6, (32, 4), generator=torch.Generator().manual_seed(0))
    counts, found = [], []
    for sparse in (True, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Embedding(6, 3, sparse=sparse), nn.Flatten(), nn.Linear(12, 2, bias=False)).double()
        counts.append(count_laws(model, inputs=ids, progress=False))
        found.append(find_laws(model, inputs=ids))
    assert counts[0].conclusive and counts[0].num_laws == counts[1].num_laws
    assert found[0].complete and found[0].num_found == found[1].num_found == counts[0].num_laws


class _OldStyleSquare(torch.autograd.Function):  # ctx in forward: torch.func refuses a Function without setup_context
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_an_autograd_function_without_setup_context_is_refused_by_the_checks_too() -> None:
    """check_laws' gradient rows (and the monitor's search of a large part, which checks its rescaled units) raised
    torch's RuntimeError from inside the package; the count said what to do."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).double()
    model[0].register_forward_hook(lambda module, args, out: _OldStyleSquare.apply(out))
    law = {"unit": lambda p: (p["0.weight"] ** 2).sum()}
    problem = problem_of(model, None)
    for call in (lambda: count_laws(model, (3,), progress=False), lambda: law_residuals(problem, law, (3,), None)):
        with pytest.raises(ValueError, match="cannot differentiate through an autograd.Function without setup_context"):
            call()


class _AbsSquare(torch.autograd.Function):  # torch.func style: x·|x|, whose |x| the kink recording does not see
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * x.abs()

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x.abs() * grad


def test_a_kink_inside_an_autograd_function_is_named_as_such() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).double()
    model[0].register_forward_hook(lambda module, args, out: _AbsSquare.apply(out))
    with pytest.raises(ValueError, match="the recording did not see, as inside a custom autograd.Function's forward"):
        count_laws(model, (3,), progress=False)


def test_a_forward_set_on_the_instance_as_a_closure_is_refused() -> None:
    """The counter evaluates a float64 copy; the closure read the original's parameters: "the output does not depend
    on θ" alone, a crash inside the rank with a layer around it."""
    inner = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).double()
    inner.forward = lambda x: inner[1](torch.tanh(inner[0](x)))
    for model in (inner, nn.Sequential(nn.Linear(3, 3), inner).double()):
        with pytest.raises(ValueError, match="a forward set on the instance as a function .* reads the modules it"):
            count_laws(model, (3,), progress=False)
