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


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_records_evaluated_together_give_the_drift_of_each_record(arch: str) -> None:
    """Six records a batch (snapshots of θ along a leading axis), read once mid-batch: the values of the monitor
    that evaluates every record as it comes."""
    pytest.importorskip("transformers")
    from conslaw_lite.archs import ArchOptions
    from conslaw_lite.families.hf.archs import tiny_model

    options = ArchOptions(dim=16, heads=4, head_dim=4, hidden=24, out=32, experts=3, top_k=2)
    model = tiny_model(arch, options, num_hidden_layers=3)
    ids = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    together, alone = Monitor(model, evaluate_every=6), Monitor(model, evaluate_every=1)
    assert together.evaluate_every == 6 and Monitor(model).evaluate_every > 1  # a small model: several by default
    for k in range(9):
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        together.step(), alone.step()
        if k == 2:  # three records pending: reading evaluates them
            assert len(together.relative_drift("swiglu" if arch == "qwen3" else "network")) == 4
    assert together.steps.tolist() == alone.steps.tolist() == list(range(10))
    for group in alone.groups:
        drift = alone.relative_drift(group.key)
        np.testing.assert_allclose(together.relative_drift(group.key), drift, rtol=1e-12, atol=1e-15, err_msg=group.key)
    assert np.nanmax(alone.relative_drift("network")) > 1e-6  # the drift compared is not all zeros


def test_a_law_that_does_not_broadcast_over_the_records_is_called_record_by_record() -> None:
    """``reshape(-1)`` mixes the records: the check at θ₀ and a random point sees it, and the law is called slot by
    slot, with its own values."""
    from conslaw_lite.snapshots import Snapshots

    W = torch.randn(3, 2, dtype=torch.float64)
    flat = [(lambda q: q["W"].reshape(-1).square(), [0])]
    rows = [(lambda q: q["W"].square().sum(-1), [0])]
    for sources, batched in ((flat, False), (rows, True)):
        ring = Snapshots(stack_sources(sources, {"W": W}), ["W"], slots=3)
        assert ring.batched == [batched]
        for scale in (1.0, 2.0):
            ring.take([scale * W])
        torch.testing.assert_close(ring.evaluate(), torch.stack([sources[0][0]({"W": s * W}) for s in (1.0, 2.0)]))


def test_an_alarm_reads_every_record_as_it_comes() -> None:
    from conslaw_lite.families.toy import ToyProduct

    seen = []
    model = ToyProduct(a=2.0, b=1.0)
    monitor = Monitor(model, alarm=lambda m: seen.append(m.last_relative_drift("toy").copy()))
    assert monitor.evaluate_every == 1
    with torch.no_grad():
        for _ in range(3):
            model.a.add_(0.1)
            monitor.step()
    np.testing.assert_array_equal(np.stack(seen), monitor.relative_drift("toy")[1:])
    assert len(set(np.stack(seen)[:, 0])) == 3  # three different records, each seen when it came
