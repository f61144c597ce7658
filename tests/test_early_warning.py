"""Drift as an early warning: the criterion, the alarm on a monitor, the sweep."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite import Monitor, mse_loss
from conslaw_lite.early_warning import DriftAlarm, DriftWarning, sweep, warning_step
from conslaw_lite.families.toy.block import ToyProduct

ONE = torch.ones(1, 1, dtype=torch.float64)


def test_a_drift_growing_like_k_never_warns_and_a_geometric_one_does() -> None:
    k = np.arange(40)
    assert warning_step(k, 1e-6 * k) is None
    geometric = 1e-6 * k * 1.5 ** np.maximum(k - 10, 0)
    assert warning_step(k, geometric) == int(np.flatnonzero((k > 2) & (geometric > 30 * k * 1e-6))[0])


@pytest.mark.parametrize(("kwargs", "message"), [({"factor": 1.0}, "factor"), ({"window": 0}, "window")])
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        warning_step(np.arange(5), np.arange(5.0), **kwargs)


def test_the_alarm_warns_once_with_a_drift_warning_before_the_toy_diverges() -> None:
    toy = ToyProduct(a=1.0, b=0.5)
    alarm = DriftAlarm(Monitor(toy))
    optimizer = torch.optim.SGD(toy.parameters(), lr=1.85)
    alarm.attach(optimizer)
    loss = mse_loss(ONE, ONE)
    with pytest.warns(DriftWarning, match="drift .* times faster"):
        for k in range(6):
            optimizer.zero_grad()
            loss(toy, k).backward()
            optimizer.step()
    assert alarm.warned_at == 5


def test_a_sweep_warns_for_the_diverging_step_size_only() -> None:
    points = sweep(lambda seed: (ToyProduct(a=1.0, b=0.5), mse_loss(ONE, ONE)), [0.5, 1.0, 1.85], steps=80)
    outcome = [(p.diverged_at is None, p.warned_at is None) for p in points]
    assert outcome == [(True, True), (True, True), (False, False)]
    assert points[-1].lead == 1
