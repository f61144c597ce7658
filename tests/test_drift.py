"""The discrete-training drift: the exact identity Δh = τ² gᵀMg, its scaling in τ and k, and the `drift` CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conslaw_lite.cli import main
from conslaw_lite.drift import arch_setup, measure, trajectory

BLOCKS = ["swiglu", "mha", "mha-rope", "moe-softmax"]  # every block family with laws
pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def block_setup(arch: str, optimizer: str):
    return arch_setup(arch, samples=32, batch=4 if optimizer == "sgd" else None)


@pytest.mark.parametrize("optimizer", ["gd", "sgd"])
@pytest.mark.parametrize("arch", BLOCKS)
def test_one_step_identity_holds_to_round_off(arch: str, optimizer: str) -> None:
    """h(θ_{k+1}) − h(θ_k) = h(τ g_k) = τ² g_kᵀ M g_k at every step, full batch or mini-batch."""
    t = trajectory(block_setup(arch, optimizer), 0, lr=0.05, steps=20, optimizer=optimizer)
    assert t.identity_error() <= 1e-10
    # The identity is not a tautology: the laws did move, by far more than round-off.
    assert t.drift()[-1] > 1e3 * 1e-16 * np.linalg.norm(np.concatenate([t.run.h[n][0] for n in t.conserved]))


@pytest.mark.parametrize("optimizer", ["gd", "sgd"])
@pytest.mark.parametrize("arch", BLOCKS)
def test_normalized_drift_is_flat_over_an_8x_range_of_tau(arch: str, optimizer: str) -> None:
    report = measure(block_setup(arch, optimizer), [0.0025, 0.005, 0.01, 0.02], steps=10, optimizer=optimizer)
    normalized = [p.normalized_drift for p in report.points]
    assert max(normalized) / min(normalized) <= 1.5, normalized


@pytest.mark.parametrize("arch", BLOCKS)
def test_drift_scales_as_tau_squared_and_k_while_theta_barely_moves(arch: str) -> None:
    report = measure(block_setup(arch, "gd"), [0.00025, 0.0005, 0.001, 0.002], steps=8)
    assert max(p.param_change for p in report.points) < 0.01
    assert abs(report.slope_lr - 2) <= 0.15
    assert all(abs(p.slope_steps - 1) <= 0.15 for p in report.points)


def test_adam_breaks_the_first_order_cancellation() -> None:
    """Adam rescales coordinates, so ⟨∇h, δ⟩ ≠ 0: the drift grows like τ, not τ², and the identity fails."""
    setup = block_setup("swiglu", "gd")
    adam = measure(setup, [0.0005, 0.001, 0.002, 0.004], steps=8, optimizer="adam")
    assert abs(adam.slope_lr - 1) <= 0.2
    assert min(p.identity_error for p in adam.points) > 1e-6


def test_cli_json_has_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    block_setup("swiglu", "gd")
    code = main(["drift", "swiglu", "--lr", "0.01", "0.02", "--steps", "5", "--seeds", "2", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert {"arch", "optimizer", "schedule", "steps", "seeds", "slope_lr", "points"} <= set(report)
    assert {"lr", "drift", "normalized_drift", "slope_steps", "identity_error", "param_change"} <= set(
        report["points"][0]
    )
    assert [p["lr"] for p in report["points"]] == [0.01, 0.02]
    assert abs(report["slope_lr"] - 2) < 0.15


def test_cli_table_names_the_exponents(capsys: pytest.CaptureFixture[str]) -> None:
    block_setup("swiglu", "gd")
    assert main(["drift", "swiglu", "--lr", "0.01", "0.02", "--steps", "3", "--optimizer", "sgd"]) == 0
    out = capsys.readouterr().out
    assert "slope_lr" in out and "slope_steps" in out and "normalized" in out


def test_cli_unknown_architecture_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "no-such-block", "--lr", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "no-such-block" in err and "swiglu" in err


def test_cli_unknown_optimizer_lists_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["drift", "swiglu", "--lr", "0.1", "--optimizer", "lbfgs"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "lbfgs" in err and all(name in err for name in ("gd", "sgd", "momentum", "adam"))


def test_cli_diverging_step_names_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "swiglu", "--lr", "0.01", "1e6", "--steps", "20"]) == 2
    err = capsys.readouterr().err
    assert "diverged at step" in err and "τ = 1e+06" in err


def test_cli_block_without_laws_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """ffn-gelu has controls but no conservation law: a clear error, not an IndexError from an empty drift."""
    block_setup("ffn-gelu", "gd")
    assert main(["drift", "ffn-gelu", "--lr", "0.01", "0.02", "--steps", "3"]) == 2
    assert "ffn-gelu has no conservation laws; drift needs a block with laws" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--samples", "0"], "--samples must be at least 1"),
        (["--optimizer", "sgd", "--batch", "0"], "--batch must be in [1, --samples = 64], got 0"),
        (["--optimizer", "sgd", "--samples", "8", "--batch", "9"], "--batch must be in [1, --samples = 8], got 9"),
        (["--seeds", "0"], "--seeds must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
    ],
)
def test_cli_bad_sizes_are_named(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "swiglu", "--lr", "0.01", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "diverged" not in err
