"""The law counter against the known counts, the law checker against laws and non-laws, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite.blocks.toy import ToyProduct
from conslaw_lite.counting import GAP, check_laws, count_laws


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
    """``f = a x₁ + (a + 10⁻⁶ b) x₂ + (a + 10⁻⁹ c) x₃``: c's direction is barely above round-off."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c = self.theta
        coefficients = torch.stack([a, a + 1e-6 * b, a + 1e-9 * c])
        return (x * coefficients).sum(-1, keepdim=True)


def test_no_clear_gap_gives_no_count() -> None:
    count = count_laws(WeakDirection(), (3,))
    assert not count.conclusive and "gap" in count.reason
    assert count.num_laws is None and count.rank_lie is None
    assert count.sigma_kept < GAP * count.sigma_dropped


def test_check_accepts_toy_law_and_rejects_a_non_law() -> None:
    toy = ToyProduct(a=1.0, b=2.0)
    good = check_laws(toy, {"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2}, (1,))
    assert good.complete and good.independent == good.num_laws == 1
    assert good.max_residual < 1e-12
    bad = check_laws(toy, {"a²+b²": lambda p: p["a"] ** 2 + p["b"] ** 2}, (1,))
    assert not bad.complete
    assert bad.residuals["a²+b²"] > 0.1


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
        (nn.Linear(3, 2), (4,), ValueError, "rejects inputs of shape (4,)"),
        (nn.Linear(3, 2), None, ValueError, "give input_shape"),
        (lambda p, x: x * p["a"], (1,), TypeError, "needs params"),
        ("not a model", (1,), TypeError, "nn.Module or a function"),
    ],
)
def test_bad_input_names_the_problem(model, shape, error, words: str) -> None:
    with pytest.raises(error) as caught:
        count_laws(model, shape)
    assert words in str(caught.value) and "\n" not in str(caught.value)


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
