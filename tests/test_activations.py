"""Every row of the activation table: the FFN it makes is counted to its formula, its laws check complete,
its sympy form is its torch function, and the finders know its module classes."""

from __future__ import annotations

import pytest
import sympy as sp
import torch
from torch import nn

from conslaw_lite.activations import ACTIVATIONS, Activation, activation_of, kinked_at_zero
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.families.ffn.block import FFN
from conslaw_lite.families.ffn.laws import formula
from conslaw_lite.laws import law_functions

ROWS = list(ACTIVATIONS.values())


@pytest.mark.parametrize("row", ROWS, ids=lambda a: a.name)
def test_the_ffn_of_each_row_is_counted_to_its_formula_and_its_laws_are_complete(row: Activation) -> None:
    d, r, m = (3, 2, 3) if row.rescaling == "all" else (2, 3, 2)  # the linear formula needs r ≤ min(m, d)
    torch.manual_seed(0)
    model = FFN(d, r, m, activation=row.name).double()
    count = count_laws(model, (d,))
    assert count.conclusive, count.reason
    assert count.num_laws == formula(row.name, r)[0]
    laws = law_functions(model)
    if laws:
        assert check_laws(model, laws, (d,), count=count).complete


@pytest.mark.parametrize("row", ROWS, ids=lambda a: a.name)
def test_the_sympy_form_of_each_row_is_its_torch_function(row: Activation) -> None:
    z = sp.Symbol("z", real=True)
    f = sp.lambdify(z, row.sympy(z), modules=["scipy", "numpy"])
    for v in (-1.7, -0.3, 0.4, 2.2):
        assert abs(float(f(v)) - float(row.torch(torch.tensor(v, dtype=torch.float64)))) < 1e-12


@pytest.mark.parametrize("row", ROWS, ids=lambda a: a.name)
def test_each_rows_torch_classes_are_recognized(row: Activation) -> None:
    classes = [getattr(nn, name) for name in row.modules if hasattr(nn, name)]  # timm's own classes share the names
    assert classes, f"{row.name}: no torch class among {row.modules}"
    assert all(activation_of(cls()) is row for cls in classes)


def test_only_the_homogeneous_rows_have_kinks_the_counter_records() -> None:
    for row in ROWS:
        assert bool(row.kinks) == (row.rescaling == "unit"), row.name
    assert kinked_at_zero() == frozenset().union(*(row.kinks for row in ROWS))
