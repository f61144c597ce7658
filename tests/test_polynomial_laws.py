"""How quadratic laws print: the fewest slices that cover their monomials, whatever the tensors' dimensions."""

import itertools
import math

import torch

from conslaw_lite.polynomial_laws import Layout, PolynomialLaw, group_laws


def _conv_unit_law(layout: Layout, i: int) -> PolynomialLaw:
    """‖c1.weight[i]‖² + c1.bias[i]² − ‖c2.weight[:, i]‖², monomial by monomial (c1: 3×2×3×3, c2: 2×3×3×3)."""
    flat = lambda t, index: layout.offset(t) + sum(  # noqa: E731
        k * math.prod(layout.shapes[t][a + 1 :]) for a, k in enumerate(index)
    )
    squares = {(flat(0, (i, *rest)),) * 2: 1.0 for rest in itertools.product(range(2), range(3), range(3))}
    squares[(flat(1, (i,)),) * 2] = 1.0
    squares |= {(flat(2, (o, i, r, s)),) * 2: -1.0 for o, r, s in itertools.product(range(2), range(3), range(3))}
    return PolynomialLaw(squares, layout)


def test_a_conv_unit_law_prints_as_whole_kernels():
    layout = Layout(("c1.weight", "c1.bias", "c2.weight"), ((3, 2, 3, 3), (3,), (2, 3, 3, 3)))
    laws = [_conv_unit_law(layout, i) for i in range(3)]
    assert laws[1].text() == "‖c1.weight[1, :, :, :]‖² + c1.bias[1]² − ‖c2.weight[:, 1, :, :]‖²"
    grouped = group_laws(laws)
    assert list(grouped) == ["for i in 0..2: ‖c1.weight[i, :, :, :]‖² + c1.bias[i]² − ‖c2.weight[:, i, :, :]‖²"]
    params = {name: torch.randn(shape, dtype=torch.float64) for name, shape in zip(layout.names, layout.shapes)}
    expected = [
        params["c1.weight"][i].square().sum() + params["c1.bias"][i] ** 2 - params["c2.weight"][:, i].square().sum()
        for i in range(3)
    ]
    assert torch.allclose(next(iter(grouped.values()))(params), torch.stack(expected))


def test_rows_merge_into_a_block_of_a_gram_law():
    layout = Layout(("Q", "K"), ((4, 2), (4, 2)))
    law = PolynomialLaw({(0, 2): 1.0, (1, 3): 1.0, (8, 10): -1.0, (9, 11): -1.0}, layout)  # (QQᵀ − KKᵀ)[0, 1]
    assert law.text() == "⟨Q[0, :], Q[1, :]⟩ − ⟨K[0, :], K[1, :]⟩"
    square = PolynomialLaw({(j, j): 1.0 for j in range(4)} | {(j, j): -1.0 for j in range(8, 12)}, layout)
    assert square.text() == "‖Q[0:2, :]‖² − ‖K[0:2, :]‖²"


def test_products_of_many_linear_laws_stack_only_those_a_law_shares_monomials_with() -> None:
    """The 384 unread entries of a position embedding are as many linear laws: the Gram matrix of their 74,112
    products was allocated whole (41 GiB, a MemoryError in find_laws and in the monitor of a GPT-2 on short inputs).
    Products of 500 coordinates (125,250) against two quadratic laws: only the products they touch are stacked."""
    from conslaw_lite.law_basis import _adds_after

    products = [{(i, j): 1.0} for i in range(500) for j in range(i, 500)]
    in_span, outside = {(0, 0): 1.0, (1, 1): -1.0}, {(500, 500): 1.0}
    assert _adds_after(products, [in_span, outside, {(0, 0): 3.0}]) == [False, True, False]


def test_shortening_laws_stops_at_a_time_limit_and_keeps_the_echelon_form() -> None:
    """find_laws(seconds=60) on a ReZero MLP at α = 10⁻⁶ spent 20 minutes and more past its limit making 505 dense
    laws shorter, one against the others. The shortening stops at the limit; the laws are the echelon form's."""
    import numpy as np
    import pytest

    from conslaw_lite.law_basis import _sparsest, reduced_basis
    from conslaw_lite.time_limit import OutOfTime, time_limit

    columns = [(0, 0), (1, 1), (2, 2)]
    vectors = np.array([[1.0, 1.0, -2.0], [0.0, 1.0, -1.0]])  # x² + y² − 2z², y² − z²
    with time_limit(0.0), pytest.raises(OutOfTime):
        _sparsest({(0, 0): 1.0, (1, 1): 1.0}, [{(1, 1): 1.0}])
    with time_limit(0.0):
        laws = reduced_basis(vectors, columns, 2)
    expected = [{(0, 0): 1.0, (2, 2): -1.0}, {(1, 1): 1.0, (2, 2): -1.0}]  # x² − z², y² − z²
    assert [law.keys() for law in laws] == [law.keys() for law in expected]
    assert all(math.isclose(law[m], want[m]) for law, want in zip(laws, expected) for m in want)
