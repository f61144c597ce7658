"""The law-preserving step: the laws stay at h(θ₀) to round-off where plain SGD drifts them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite import Monitor
from conslaw_lite.drift import arch_setup
from conslaw_lite.law_preserving import LawKeeper


def _max_drift(arch: str, keep: bool, steps: int = 200, lr: float = 0.2) -> float:
    model, loss = arch_setup(arch, batch=8)(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    if keep:
        LawKeeper(model).attach(optimizer)  # before the monitor: it records θ projected
    monitor = Monitor(model)
    monitor.attach(optimizer)
    for k in range(steps):
        optimizer.zero_grad()
        loss(model, k).backward()
        optimizer.step()
    return max(float(np.nanmax(monitor.relative_drift(g.key))) for g in monitor.groups if g.kind == "law")


@pytest.mark.parametrize("arch", ["toy", "ffn-relu", "ffn-linear", "swiglu", "mha", "mha-rope", "moe-softmax"])
def test_the_laws_stay_at_their_start_to_round_off(arch: str) -> None:
    kept, plain = _max_drift(arch, keep=True), _max_drift(arch, keep=False)
    assert kept < 1e-12 and plain > 1e6 * kept, (kept, plain)


def test_a_model_whose_laws_are_unknown_is_refused() -> None:
    with pytest.raises(ValueError, match="no block with known conservation laws"):
        LawKeeper(torch.nn.Linear(2, 2))
