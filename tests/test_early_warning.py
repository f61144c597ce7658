"""Drift as an early warning: the criterion, the alarm on a monitor, the sweep, the CLI flag."""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest
import torch

from conslaw_lite import Monitor, mse_loss
from conslaw_lite.cli.drift import add_arguments, run
from conslaw_lite.early_warning import DriftAlarm, DriftWarning, diverged, sweep, tuned_leads, warning_step
from conslaw_lite.families.toy.block import ToyProduct

ONE = torch.ones(1, 1, dtype=torch.float64)


def toy(seed: int) -> tuple[ToyProduct, object]:
    return ToyProduct(a=1.0, b=0.5), mse_loss(ONE, ONE)


def _train(model: torch.nn.Module, lr: float, steps: int, monitor: Monitor) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    monitor.attach(optimizer)
    loss = mse_loss(ONE, ONE)
    for k in range(steps):
        optimizer.zero_grad()
        loss(model, k).backward()
        optimizer.step()


def test_a_drift_growing_like_k_never_warns_and_a_geometric_one_does() -> None:
    k = np.arange(40)
    assert warning_step(k, 1e-6 * k) is None
    geometric = 1e-6 * k * 1.5 ** np.maximum(k - 10, 0)
    assert warning_step(k, geometric) == int(np.flatnonzero((k > 2) & (geometric > 30 * k * 1e-6))[0])


@pytest.mark.parametrize(("kwargs", "message"), [({"factor": 1.0}, "factor"), ({"window": 0}, "window")])
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        warning_step(np.arange(5), np.arange(5.0), **kwargs)
    with pytest.raises(ValueError, match=message):
        DriftAlarm(**kwargs)


def test_the_monitor_option_warns_once_with_a_drift_warning() -> None:
    model = ToyProduct(a=1.0, b=0.5)
    alarm = DriftAlarm()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(model, 1.85, 6, Monitor(model, alarm=alarm))
    drift_warnings = [w for w in caught if issubclass(w.category, DriftWarning)]
    assert len(drift_warnings) == 1 and "times faster" in str(drift_warnings[0].message)
    assert alarm.warned_at == 5


def test_the_monitor_calls_any_alarm_at_each_record_only() -> None:
    model = ToyProduct(a=1.0, b=0.5)
    seen: list[int] = []
    _train(model, 0.1, 6, Monitor(model, every=2, alarm=lambda monitor: seen.append(int(monitor.steps[-1]))))
    assert seen == [2, 4, 6]


@pytest.mark.parametrize("lr", [0.5, 1.0, 1.5, 1.8])
def test_no_warning_on_a_stable_toy_run(lr: float) -> None:
    model = ToyProduct(a=1.0, b=0.5)
    alarm = DriftAlarm(callback=lambda *_: pytest.fail("warned on a run that does not diverge"))
    _train(model, lr, 100, Monitor(model, alarm=alarm))
    assert alarm.warned_at is None and alarm.records == 100


def test_the_toy_diverges_too_fast_for_a_five_step_warning() -> None:
    """Why no test asks the toy for 5 steps of warning: every τ that diverges does so by step 4 (L_k > 10 L_0)."""
    points = sweep(toy, np.linspace(1.80, 3.0, 25).tolist(), steps=100)
    fast = [p.diverged_at for p in points if p.diverged_at is not None]
    assert len(fast) >= 20 and max(fast) <= 4
    assert all(p.lead is None or p.lead < 5 for p in points)


def test_a_sweep_separates_stable_and_diverging_step_sizes() -> None:
    points = sweep(toy, [0.5, 1.0, 1.85], steps=80)
    assert [p.diverged_at is None for p in points] == [True, True, False]
    assert all(p.warned_at is None for p in points[:2])  # no warning where training does not diverge
    leads = tuned_leads(points)
    assert leads["loss"][0] >= 1 and (leads["drift"][0] is None or leads["drift"][0] <= leads["loss"][0])


def test_divergence_and_its_refusals() -> None:
    assert not diverged(10.0, 1.0) and diverged(10.5, 1.0) and diverged(float("inf"), 1.0)
    with pytest.raises(ValueError, match="loss at the start is 0"):
        sweep(lambda seed: (ToyProduct(a=1.0, b=1.0), mse_loss(ONE, ONE)), [0.1], steps=3)
    with pytest.raises(ValueError, match="both diverging and non-diverging"):
        tuned_leads(sweep(toy, [0.5], steps=5))


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_cli_alarm_flag_prints_each_step_size_as_json(capsys: pytest.CaptureFixture) -> None:
    assert run(_cli("ffn-relu", "--lr", "1", "6", "--steps", "12", "--seeds", "2", "--alarm", "--json")) == 1
    said = capsys.readouterr()
    report = json.loads(said.out)
    assert said.err == "warning: 2 of 4 runs diverged (loss > 10 L_0); their rows name the step\n"
    assert run(_cli("ffn-relu", "--lr", "6", "--steps", "12", "--alarm")) == 2  # every run diverged
    rows = {(row["lr"], row["seed"]): row for row in report["alarm"]}
    assert report["divergence"] == 10.0 and sorted(rows) == [(1.0, 0), (1.0, 1), (6.0, 0), (6.0, 1)]
    assert all(row["diverged_at"] is None and row["warned_at"] is None for (lr, _), row in rows.items() if lr == 1.0)
    assert rows[6.0, 0]["diverged_at"] == 10 and rows[6.0, 0]["lead"] == 10 - rows[6.0, 0]["warned_at"]


@pytest.mark.parametrize(("extra", "message"), [(["--optimizer", "momentum"], "plain"),
                                                (["--dtype", "float32"], "float64")])
def test_the_cli_alarm_flag_refuses_what_it_does_not_run(extra: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run(_cli("toy", "--lr", "0.1", "--steps", "3", "--alarm", *extra))
