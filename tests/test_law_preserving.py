"""The law-preserving step: the laws stay at h(θ₀) to round-off where plain SGD drifts them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite import Monitor, mse_loss
from conslaw_lite.drift import arch_setup
from conslaw_lite.law_preserving import LawKeeper
from conslaw_lite.models.qwen import QwenConfig, QwenDecoder


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


def test_a_float32_model_keeps_its_laws_to_float32_round_off() -> None:
    model, loss = arch_setup("swiglu", batch=8)(0)
    model, loss = model.float(), mse_loss(loss.x.float(), loss.y.float(), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    LawKeeper(model).attach(optimizer)
    monitor = Monitor(model)
    monitor.attach(optimizer)
    for k in range(100):
        optimizer.zero_grad()
        loss(model, k).backward()
        optimizer.step()
    assert float(np.nanmax(monitor.relative_drift("swiglu"))) < 1e-5


def test_a_decoder_keeps_every_law_of_its_attention_and_feed_forward_blocks() -> None:
    torch.manual_seed(0)
    config = QwenConfig(vocab_size=16, dim=8, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4, hidden=8)
    model = QwenDecoder(config).double()
    tokens = torch.randint(0, 16, (4, 6))
    with torch.no_grad():
        before = model(tokens)
    keeper = LawKeeper(model)
    keeper.project()  # already on its level: the output must not move
    with torch.no_grad():
        assert torch.allclose(model(tokens), before, rtol=1e-12, atol=1e-12)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    keeper.attach(optimizer)
    monitor = Monitor(model)
    monitor.attach(optimizer)
    for _ in range(10):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(tokens[:, :-1]).reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
        optimizer.step()
    assert {g.block for g in monitor.groups} >= {"gqa-rope", "swiglu"}
    assert max(float(np.nanmax(monitor.relative_drift(g.key))) for g in monitor.groups if g.kind == "law") < 1e-12
