"""One training path for every device: float32 training with float64 laws, run here on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conslaw_lite.config import Scale, device, model_device
from conslaw_lite.drift import arch_setup, trajectory
from conslaw_lite.flows import mse_loss, train
from conslaw_lite.monitor import Monitor
from conslaw_lite.sizes import train_block, workload

EPS32 = torch.finfo(torch.float32).eps


@pytest.mark.parametrize("arch", ["swiglu", "mha-rope"])
def test_float32_training_keeps_the_identity_to_float32_round_off(arch: str, one_thread) -> None:
    """Δh = h(δ) per step: θ_{k+1} rounded to float32 moves h by about eps32·‖h‖, h itself is read in float64."""
    setup = arch_setup(arch, samples=16, batch=4)
    t32 = trajectory(setup, 0, lr=0.05, steps=10, optimizer="sgd", device="cpu", dtype=torch.float32)
    t64 = trajectory(setup, 0, lr=0.05, steps=10, optimizer="sgd", device="cpu")
    assert all(h.dtype == np.float64 for h in t32.run.h.values())
    assert t64.identity_error() < 100 * torch.finfo(torch.float64).eps
    assert t64.identity_error() < t32.identity_error() < 8 * EPS32
    # the drift itself is far above the round-off, so float32 measures it to a few ulps of the laws
    assert t32.drift()[-1] == pytest.approx(t64.drift()[-1], rel=1e-3)


def test_train_moves_model_and_mse_data_to_the_device_and_dtype() -> None:
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)
    model = torch.nn.Linear(3, 2).double()
    run = train(model, mse_loss(x, y), lr=0.01, steps=2, device="cpu", dtype=torch.float32)
    assert model.weight.dtype == torch.float32 and model_device(model) == torch.device("cpu")
    assert np.isfinite(run.loss).all()


def test_train_leaves_the_model_where_it_is_unless_asked() -> None:
    """device=None: no move, on any machine; the MSELoss follows the model, not the other way round."""
    model = torch.nn.Linear(3, 2).double()
    train(model, mse_loss(torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)), lr=0.01,
          steps=1)
    assert model_device(model) == torch.device("cpu") and model.weight.dtype == torch.float64


def test_no_factory_on_the_training_path_uses_the_default_device(one_thread) -> None:
    """With the default device set to `meta`, a tensor made without device= would be empty: the numbers would change."""
    setup = arch_setup("mha-rope", samples=8, batch=2)
    expected = trajectory(setup, 0, lr=0.01, steps=3, optimizer="sgd", device="cpu", dtype=torch.float32)
    built = setup(0)  # built before: under `meta`, construction itself would land there
    model, loss = setup(0)
    monitor = Monitor(model.float())
    with torch.device("meta"):
        got = trajectory(lambda seed: built, 0, lr=0.01, steps=3, optimizer="sgd", device="cpu", dtype=torch.float32)
        train(model, loss, lr=0.01, steps=3, optimizer="sgd", device="cpu", dtype=torch.float32)
        assert monitor.step()
    for name, h in expected.run.h.items():
        np.testing.assert_array_equal(got.run.h[name], h)
    assert np.isfinite(monitor.relative_drift(monitor.groups[0].key)).all()


def test_model_and_data_on_different_devices_are_named() -> None:
    loss = mse_loss(torch.ones(4, 3), torch.ones(4, 1))
    with pytest.raises(ValueError, match="the model is on meta but the data is on cpu"):
        loss(torch.nn.Linear(3, 1, device="meta"), 0)
    with pytest.raises(ValueError, match="the model is in torch.float64 but the data in torch.float32"):
        loss(torch.nn.Linear(3, 1).double(), 0)
    split = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1, device="meta"))
    with pytest.raises(ValueError, match=r"several devices \(cpu, meta\)"):
        train(split, loss, lr=0.1, steps=1)
    with pytest.raises(ValueError, match="x is on cpu but y is on meta"):
        mse_loss(torch.ones(4, 3), torch.ones(4, 1, device="meta"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_asking_for_cuda_without_a_gpu_is_named() -> None:
    assert device() == torch.device("cpu")
    with pytest.raises(ValueError, match="no CUDA GPU is visible"):
        train(torch.nn.Linear(1, 1), mse_loss(torch.ones(2, 1), torch.ones(2, 1)), lr=0.1, steps=1, device="cuda")


def test_the_gpu_workload_runs_on_the_cpu_in_float32(one_thread) -> None:
    """The `gpu` scale's SwiGLU (d = 256, r = 1,024) through the same code path, for two steps."""
    run = train_block("swiglu", Scale("gpu"), device="cpu", steps=2)
    assert (run.workload.options.dim, run.workload.options.hidden) == (256, 1024)
    assert run.dtype == torch.float32 and run.device == torch.device("cpu")
    assert 0 < run.point.epsilon < run.point.control_epsilon / 10
    assert "on cpu in float32" in run.summary()


def test_ci_and_cpu_workloads_keep_the_chapters_sizes() -> None:
    for arch in ("swiglu", "mha", "mha-rope", "moe-softmax"):
        for name in ("ci", "cpu"):
            assert workload(arch, Scale(name)).options.dim is None  # the architecture's own default
    with pytest.raises(ValueError, match="no workload for 'resnet'"):
        workload("resnet", Scale("ci"))


def test_cli_trains_in_float32_on_the_device_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    from conslaw_lite.cli import main

    args = ["drift", "swiglu", "--lr", "0.01", "--steps", "3", "--json", "--dtype", "float32", "--device", "cpu"]
    assert main(args) == 0
    point = json.loads(capsys.readouterr().out)["points"][0]
    assert 0 < point["identity_error"] < 8 * EPS32  # float32 round-off, not float64's
    if not torch.cuda.is_available():
        assert main([*args[:-1], "cuda"]) == 2
        assert "no CUDA GPU is visible" in capsys.readouterr().err
