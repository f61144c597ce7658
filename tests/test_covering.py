"""The activation patterns of :func:`~conslaw_lite.counting.covering.covering_patterns`: the forwards of all the
chunks of inputs, each at its own θ', run as one under ``torch.func.vmap`` give what one forward per chunk gives, and a
model that vmap cannot run is run chunk by chunk."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from conslaw_lite.counting.covering import covering_patterns
from conslaw_lite.counting.problem import problem_of

covering = importlib.import_module("conslaw_lite.counting.covering")


class _Branchy(nn.Module):
    """A ReLU net with Python control flow on a value: vmap cannot batch ``if``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return self.b(h if h.sum() > 0 else -h)


def _patterns(model: nn.Module, x: torch.Tensor, draws: int) -> list[torch.Tensor]:
    problem = problem_of(model.double(), None)

    def theta_at(r: int, j: int) -> torch.Tensor:  # a θ' per (width, index), the same on every call
        return problem.random_theta(torch.Generator().manual_seed(100 * r + j), 10.0 ** (2 * r - 1))

    forward = lambda t, inputs: problem.apply(problem.unflatten(t), inputs)  # noqa: E731
    return covering_patterns(forward, theta_at, x, draws, rounds=3)


def _relu_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 4), nn.Hardtanh(0.0, 1.0), nn.Linear(4, 2))


def test_the_chunks_forwards_under_vmap_give_the_patterns_of_one_forward_each(monkeypatch):
    x = torch.randn(40, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ran = []
    batched = covering._batched_signs
    monkeypatch.setattr(covering, "_batched_signs", lambda *a: ran.append(batched(*a)) or ran[-1])
    together = _patterns(_relu_mlp(), x, draws=16)  # chunks of 3 and of 2 inputs: one vmap call for each size
    assert [len(r) for r in ran] == [8, 8]  # not None: vmap ran them
    monkeypatch.setattr(covering, "_batched_signs", lambda *a: None)
    alone = _patterns(_relu_mlp(), x, draws=16)
    assert [p.shape for p in together] == [(40, 5), (40, 4)]
    assert all(torch.equal(a, b) for a, b in zip(together, alone, strict=True))
    assert len({tuple(row.tolist()) for row in together[1]}) > 2  # the hardtanh's three pieces do occur


def test_a_model_vmap_cannot_run_is_run_chunk_by_chunk():
    torch.manual_seed(0)
    model = _Branchy().double()
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    problem = problem_of(model, None)
    thetas = [problem.random_theta(torch.Generator().manual_seed(k)) for k in range(12)]
    forward = lambda t, inputs: problem.apply(problem.unflatten(t), inputs)  # noqa: E731
    assert covering._batched_signs(forward, thetas, list(x.split(1))) is None
    assert _patterns(model, x, draws=12)[0].shape == (12, 4)
