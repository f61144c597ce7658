"""Clamps whose window [lo, hi] excludes 0: θ' aimed into the windows (conslaw_lite.counting.windows).

The right counts come from the pieces: every unit's pre-activation is a free linear function of its row, so every
pattern is realized and a net of such layers keeps no law (a probe's exact rank over all 3^units patterns agreed).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite import count_laws
from conslaw_lite.counting.problem import problem_of
from conslaw_lite.counting.windows import aimed_theta, windows


class Clamped(nn.Module):
    """Linear layers of ``widths``, each hidden one followed by ``torch.clamp(z, lo, hi)`` or ``F.hardtanh``."""

    def __init__(self, lo: float, hi: float, *widths: int, bias: bool = False, hardtanh: bool = False) -> None:
        super().__init__()
        self.lo, self.hi, self.hardtanh = lo, hi, hardtanh
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths, widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            z = layer(x)
            x = F.hardtanh(z, self.lo, self.hi) if self.hardtanh else torch.clamp(z, min=self.lo, max=self.hi)
        return self.layers[-1](x)


@pytest.mark.parametrize(
    "lo, hi, widths, bias, hardtanh",
    [(0.9, 1.1, (3, 3, 2), False, False), (0.9, 1.1, (3, 3, 2), False, True), (1.0, 1.001, (3, 3, 2), False, False),
     (1.0, 1.001, (3, 3, 2), True, False), (0.5, 2.0, (2, 2, 2, 2, 1), False, False),
     (-2.0, -0.5, (2, 2, 2, 2, 1), False, False), (0.5, 2.0, (2, 2, 2, 2, 1), True, False)],
)  # fmt: skip
def test_a_window_that_excludes_zero_is_met_in_every_layer(lo, hi, widths, bias, hardtanh) -> None:
    """Drawn at log-uniform scales only, these counted 1 to 12 laws, conclusive, at 3 to 11 seeds in 20: the middle
    pieces were met a few times per unit or never (W₁'s gradient then zero at every θ: its entries taken for laws)."""
    for seed in range(4):
        torch.manual_seed(seed)
        model = Clamped(lo, hi, *widths, bias=bias, hardtanh=hardtanh).double()
        count = count_laws(model, (widths[0],), seed=seed)
        assert count.conclusive and count.num_laws == 0, count


class GatedWindow(nn.Module):
    """``W₂ (hardtanh(W₁x, 0.9, 1.1) ⊙ W₃x)``: on its middle piece a unit is a product of two rows, so rescaling
    them apart keeps one law per unit (3), which the outer pieces, constant times W₃x, also keep."""

    def __init__(self) -> None:
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False), nn.Linear(3, 2, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.hardtanh(self.w1(x), 0.9, 1.1) * self.w3(x))


def test_a_gated_unit_behind_a_window_keeps_the_laws_of_its_product() -> None:
    """4 laws, conclusive, at one seed in five before the aim (right: 3)."""
    for seed in range(4):
        torch.manual_seed(seed)
        count = count_laws(GatedWindow().double(), (3,), seed=seed)
        assert count.conclusive and count.num_laws == 3, count


def test_an_infinite_bound_is_no_bound() -> None:
    """``clamp(z, 1, inf)`` put ``inf · 0`` in the outputs on pieces: every input was left out, and the count
    failed inside (a reshape of 0 elements). It is ``clamp(z, min=1)``: no laws."""
    model = Clamped(1.0, float("inf"), 2, 2, 1).double()
    count = count_laws(model, (2,), seed=0)
    assert count.conclusive and count.num_laws == 0, count
    torch.manual_seed(0)  # F.hardtanh(z, 0, inf), nn.Hardtanh(0, inf): a ReLU (the same failure, its bounds read apart)
    relu = nn.Sequential(nn.Linear(3, 4, bias=False), nn.Hardtanh(0.0, float("inf")), nn.Linear(4, 2, bias=False))
    count = count_laws(relu.double(), (3,), seed=0)
    assert count.conclusive and count.num_laws == 4, count


def test_the_aimed_theta_puts_a_unit_of_each_layer_inside_its_window() -> None:
    """Over 20 draws, one input: every layer has a unit inside [0.5, 2] on most of them (a quarter of the clamps are
    left where they land), and the model's scale alone (θ drawn as the count draws it) almost never does."""
    model = Clamped(0.5, 2.0, 2, 2, 2, 2, 1).double()
    problem, x, gen = problem_of(model, None), torch.ones(1, 2, dtype=torch.float64), torch.Generator().manual_seed(0)
    inside = lambda theta: [bool(((u >= 0.5) & (u <= 2.0)).any()) for u, *_ in windows(problem, theta, x).calls]  # noqa: E731
    aimed = [all(inside(aimed_theta(problem, problem.random_theta(gen), x, gen))) for _ in range(20)]
    plain = [all(inside(problem.random_theta(gen))) for _ in range(20)]
    assert len(windows(problem, problem.random_theta(gen), x).calls) == 3
    assert sum(aimed) >= 5 and sum(aimed) > 2 * sum(plain), (aimed, plain)
