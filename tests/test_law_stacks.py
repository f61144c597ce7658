"""Repeated layers evaluated as one call (conslaw_lite.law_stacks) and weights squared once (shared_squares):
the monitor's values are those of the law functions called one by one, whatever is stacked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite.law_stacks import stack_sources
from conslaw_lite.laws import groups, parameters_of
from conslaw_lite.monitor import Monitor, relative_drift
from conslaw_lite.shared_squares import shared_squares, squared

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _law_by_law(model: nn.Module, step, steps: int) -> tuple[Monitor, dict]:
    """The monitor after ``steps`` calls of ``step``, and each group's relative drifts from the law functions."""
    monitor = Monitor(model)
    grouped = groups(model)
    history = [{q.key: q.fn(parameters_of(model)) for qs in grouped.values() for q in qs}]
    for _ in range(steps):
        step()
        monitor.step()
        history.append({q.key: q.fn(parameters_of(model)) for qs in grouped.values() for q in qs})
    expected = {
        group.key: np.stack([relative_drift(np.stack([h[q.key].numpy() for h in history])) for q in qs], axis=1)
        for group, qs in grouped.items()
    }
    return monitor, expected


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen3_moe"])
def test_stacked_layers_of_transformers_models_give_the_drift_of_each_law(arch: str) -> None:
    pytest.importorskip("transformers")
    from conslaw_lite.archs import ArchOptions
    from conslaw_lite.families.hf.archs import tiny_model

    options = ArchOptions(dim=16, heads=4, head_dim=4, hidden=24, out=32, experts=3, top_k=2)
    model = tiny_model(arch, options, num_hidden_layers=3).double()
    ids = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step() -> None:
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    monitor, expected = _law_by_law(model, step, 3)
    # attention, MLP or MoE, both norm couplings and the gains' controls: all stacked over the 3 layers
    assert monitor.stacked_layers >= 4 * 3
    for key, drift in expected.items():
        np.testing.assert_allclose(monitor.relative_drift(key), drift, rtol=1e-9, atol=1e-14, err_msg=key)
    assert np.nanmax(monitor.relative_drift("network:control")) > 1e-4  # the drift compared is not all zeros


def test_a_law_that_does_not_broadcast_stays_alone_and_keeps_its_value() -> None:
    """``reshape(-1, d).sum(0)`` mixes stacked layers: the stacked call disagrees, so each layer is called alone."""
    p = {f"{layer}.W": torch.randn(3, 2, dtype=torch.float64) for layer in range(3)}
    mixing = [(lambda q, n=f"{layer}.W": q[n].square().reshape(-1, 2).sum(0), [layer]) for layer in range(3)]
    plan = stack_sources(mixing, p)
    assert plan.layers == 0 and len(plan.sources) == 3
    for (fn, _), layer in zip(plan.sources, range(3)):
        torch.testing.assert_close(fn(plan.params), p[f"{layer}.W"].square().sum(0))


def test_the_same_code_with_another_layout_is_not_stacked_with_it() -> None:
    """Two RoPE pairings agree at θ₀ when every gain is 1 (as RMSNorm gains start); the random point tells them
    apart, so only the layers of one pairing share a stack."""

    def blocks(name: str, half: bool):
        def law(q):
            g = q[name].square()
            k = g.shape[-1]
            return g[..., : k // 2] + g[..., k // 2 :] if half else g.unflatten(-1, (k // 2, 2)).sum(-1)

        return law

    p = {f"{layer}.g": torch.ones(4, dtype=torch.float64) for layer in range(4)}
    sources = [(blocks(f"{layer}.g", half=layer < 2), [layer]) for layer in range(4)]
    plan = stack_sources(sources, p)
    assert plan.layers == 4 and len(plan.sources) == 2  # {0, 1} and {2, 3}
    g = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    for name in p:
        plan.params[name].copy_(g)
    values = torch.cat([fn(plan.params).reshape(-1) for fn, _ in plan.sources])
    assert values.tolist() == [10.0, 20.0, 10.0, 20.0, 5.0, 25.0, 5.0, 25.0]  # 1+9, 4+16 (half); 1+4, 9+16


def test_a_parameter_read_in_two_columns_is_stacked_at_each_call() -> None:
    """Gain 0.g sits in column (0.g, 1.g) of one law and (0.g, 2.g) of another: the second is gathered per call."""
    p = {f"{layer}.g": torch.randn(3, dtype=torch.float64) for layer in range(3)}
    square = [(lambda q, n=n: q[n].square(), [i]) for i, n in enumerate(["0.g", "1.g"])]
    twice = [(lambda q, n=n: 2 * q[n], [2 + i]) for i, n in enumerate(["0.g", "2.g"])]
    plan = stack_sources(square + twice, p)
    assert plan.layers == 4 and plan.stacked == {"0.g", "1.g"}
    with torch.no_grad():
        for name in p:
            plan.params[name].add_(1.0)  # the monitor's copy writes the buffers in place
    a, b = (fn(plan.params) for fn, _ in plan.sources)
    torch.testing.assert_close(a, torch.stack([(p["0.g"] + 1).square(), (p["1.g"] + 1).square()]))
    torch.testing.assert_close(b, torch.stack([2 * (p["0.g"] + 1), 2 * p["2.g"]]))


def test_squares_are_shared_inside_the_block_only() -> None:
    W = torch.randn(4, 3)
    with shared_squares():
        first = squared(W)
        assert squared(W) is first and squared(W.clone()) is not first
    assert squared(W) is not first
    torch.testing.assert_close(squared(W), W.square())
