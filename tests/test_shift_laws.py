"""The linear laws of a shift that a softmax or a LayerNorm over a layer's outputs ignores, proposed and checked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.counting import check_laws
from conslaw_lite.monitor import Monitor
from conslaw_lite.rescaling_laws import rescaling_laws


class DenseMixture(nn.Module):
    """Experts of ReLU units weighted by a softmax router, as one writes a mixture by hand."""

    def __init__(self, d: int = 4, hidden: int = 3, experts: int = 3) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d)) for _ in range(experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = F.softmax(self.router(x), dim=-1)
        return sum(weights[..., e, None] * expert(x) for e, expert in enumerate(self.experts))


class MatrixRouter(nn.Module):
    """The same with matrices of its own: ``x @ Wr`` routes, ReLU experts held in 3-D parameters."""

    def __init__(self, d: int = 4, hidden: int = 3, experts: int = 3) -> None:
        super().__init__()
        self.Wr = nn.Parameter(torch.randn(d, experts))
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / d**0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / hidden**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.einsum("beh,ehd->bed", F.relu(torch.einsum("bd,edh->beh", x, self.w1)), self.w2)
        return ((x @ self.Wr).softmax(-1)[..., None] * out).sum(1)


class StreamMLP(nn.Module):
    """An MLP block as TransformerLens writes it, ``x + relu(x @ W_in + b_in) @ W_out + b_out``."""

    def __init__(self, d: int = 4, hidden: int = 6) -> None:
        super().__init__()
        self.W_in, self.b_in = nn.Parameter(torch.randn(d, hidden) / 2), nn.Parameter(torch.randn(hidden) / 4)
        self.W_out, self.b_out = nn.Parameter(torch.randn(hidden, d) / 2), nn.Parameter(torch.randn(d) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(x @ self.W_in + self.b_in) @ self.W_out + self.b_out


def stream() -> nn.Module:
    return nn.Sequential(StreamMLP(), nn.LayerNorm(4), nn.Linear(4, 3))


def classifier() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4), nn.LogSoftmax(dim=-1))


def post_norm() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))


@pytest.mark.parametrize(
    ("make", "shifts", "units"),
    [
        (classifier, ["Σ_e 2.weight[e, :] and Σ_e 2.bias[e]"], 8),  # 8 inputs and the bias
        (post_norm, ["Σ_e 0.weight[e, :] and Σ_e 0.bias[e]"], 8),  # the LayerNorm's gain and shift against layer 2
        (DenseMixture, ["Σ_e router.weight[e, :] and Σ_e router.bias[e]"], 9),  # 3 experts of 3 units
        (MatrixRouter, ["Σ_e Wr[:, e]"], 9),
        (stream, ["Σ_e 0.W_out[:, e]", "Σ_e 0.b_out[e]"], 10),  # 6 ReLU units, the LayerNorm's 4 against layer 2
    ],
)
def test_shift_laws_complete_the_rescaled_units_to_the_count(make, shifts: list[str], units: int) -> None:
    torch.manual_seed(0)
    model = make().double()
    shape = (4,) if make in (DenseMixture, MatrixRouter, stream) else (6,)
    laws, outcome = rescaling_laws(model, shape)
    assert [key for key in laws if key.startswith("Σ_e")] == shifts
    shift_laws = sum(laws[key](dict(model.named_parameters())).numel() for key in shifts)
    assert f"{units} laws of rescaled units and {shift_laws} linear laws of shifts" in outcome
    check = check_laws(model, laws, shape)
    assert check.complete and check.independent == check.num_laws == units + shift_laws


def test_no_shift_is_proposed_where_the_outputs_see_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4), nn.Softmax(dim=0)).double()  # over the batch
    laws, outcome = rescaling_laws(model, (6,))
    assert not any(key.startswith("Σ_e") for key in laws) and "shifts" not in outcome


def test_monitor_watches_the_shift_laws_of_a_classifier_too_large_to_search_whole() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(100, 64), nn.ReLU(), nn.Linear(64, 10), nn.LogSoftmax(dim=-1))  # D = 7,114
    monitor = Monitor(model, input_shape=(100,))
    (part,) = monitor.own.parts
    assert part.outcome.startswith("64 laws of rescaled units and 65 linear laws of shifts")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 100), torch.randint(0, 10, (32,))
    for _ in range(5):
        opt.zero_grad()
        F.nll_loss(model(x), y).backward()
        opt.step()
        monitor.step()
    drift = monitor.absolute_drift("found")[-1]  # per law: the units' pattern, the shift's
    shift = [i for i, key in enumerate(monitor.own.laws) if "Σ_e" in key]
    assert len(drift) == 2 and len(shift) == 1
    # Σ_e W[e, j] moves by −τ Σ_e ∂L/∂W[e, j] = 0 each step: float32 round-off only; a unit's law at O(τ²)
    assert drift[shift[0]] < 1e-5 < drift[1 - shift[0]]
