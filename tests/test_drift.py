"""The discrete-training drift: the exact identity Δh = τ² gᵀMg, its scaling in τ and k, and the `drift` CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite import find_laws, mse_loss
from conslaw_lite.cli import main
from conslaw_lite.drift import arch_setup, measure, model_setup, slope, trajectory
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.flows import Diverged

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
    """One τ, diverging: nothing to report, an error naming the step (exit 2)."""
    assert main(["drift", "swiglu", "--lr", "1e6", "--steps", "20"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: training diverged at step ") and "τ = 1e+06" in err


def test_a_diverging_tau_is_reported_and_left_out_of_the_fit() -> None:
    setup = block_setup("swiglu", "gd")
    with pytest.warns(UserWarning, match=r"^1 of 3 step sizes diverged: τ = 50 at step 2 \(seed 0\)") as warned:
        report = measure(setup, [0.01, 0.02, 50], steps=20)
    assert warned[0].filename == __file__  # the caller's line, not one inside the package
    stable = measure(setup, [0.01, 0.02], steps=20)
    assert [p.lr for p in report.points] == [0.01, 0.02]
    assert [(d.lr, d.seed, d.step) for d in report.diverged] == [(50.0, 0, 2)]
    assert report.diverged[0].reason.startswith("the loss grew from ")
    assert report.slope_lr == stable.slope_lr == slope([0.01, 0.02], [p.drift for p in stable.points])
    assert stable.diverged == []


def test_a_tau_diverges_when_any_seed_does_and_names_that_seed() -> None:
    """Seed 1 sees 10× larger inputs (100× the curvature): τ = 0.5 diverges there, not on seed 0."""
    one = torch.ones(1, 1, dtype=torch.float64)

    def setup(seed: int):
        return ToyProduct(a=1.0, b=0.5), mse_loss(one * (1 + 9 * seed), one)

    assert measure(setup, [0.5], steps=20).diverged == []  # seed 0 alone is stable at τ = 0.5
    with pytest.warns(UserWarning, match="seed 1"):
        report = measure(setup, [0.01, 0.02, 0.5], steps=20, seeds=2)
    assert [p.lr for p in report.points] == [0.01, 0.02]
    assert [(d.lr, d.seed) for d in report.diverged] == [(0.5, 1)] and "seed 1" in report.diverged[0].reason


def test_every_tau_diverging_is_an_error_naming_each() -> None:
    """The message of the smallest τ first (the one closest to stable), then every τ with its step."""
    every = r"every τ diverged: τ = 100 at step 2 \(seed 0\), τ = 50 at step 2 \(seed 0\)$"
    with pytest.raises(Diverged, match=r"^training diverged at step 2: .* τ = 50 is too large .*" + every):
        measure(block_setup("swiglu", "gd"), [100, 50], steps=20)


def test_cli_keeps_the_table_of_the_stable_taus(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 1 (the sweep is partial): every stable row, a row naming the step of the diverged τ, the fit over
    the stable ones, and one warning line on stderr."""
    assert main(["drift", "swiglu", "--lr", "0.01", "0.02", "50", "--steps", "20"]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["0.01", "0.02", "50"]
    assert lines[4].split()[1:5] == ["diverged", "at", "step", "2:"] and "the loss grew from 0.96 to" in lines[4]
    assert re.fullmatch(r"slope_lr = 1\.\d{3} \(log drift at k = K against log tau, over the 2 stable tau\)", lines[5])
    assert err == "warning: 1 of 3 step sizes diverged: τ = 50 at step 2 (seed 0); slope_lr fits the 2 stable ones\n"
    assert main(["drift", "swiglu", "--lr", "0.01", "50", "--steps", "20"]) == 1
    assert "slope_lr: cannot be fitted with fewer than 2 stable tau (1 stable, 1 diverged)" in capsys.readouterr().out


def test_cli_json_lists_the_diverged_taus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "swiglu", "--lr", "0.01", "0.02", "50", "--steps", "20", "--seeds", "2", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [p["lr"] for p in report["points"]] == [0.01, 0.02] and abs(report["slope_lr"] - 2) < 0.15
    assert [(d["lr"], d["seed"], d["step"]) for d in report["diverged"]] == [(50.0, 0, 2)]
    assert main(["drift", "swiglu", "--lr", "0.01", "50", "--steps", "20", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["slope_lr"] is None  # strict JSON: nan is null


def test_cli_refuses_a_size_the_architecture_does_not_take(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "swiglu", "--lr", "0.01", "--heads", "7", "--seq", "9"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: swiglu takes no --heads, --seq (its size options: --dim, --hidden, --out)\n"


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


def test_a_model_of_ones_own_drifts_as_tau_squared_on_the_laws_found_for_it() -> None:
    """A ReLU MLP no block covers: its 4 laws, found, drift by τ² g_kᵀMg_k (the identity to round-off), and measure
    says how to give them when they are not given."""
    build = lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))  # noqa: E731
    found = find_laws(build(), (3,))
    setup = model_setup(build, (3,), samples=16)
    report = measure(setup, [1e-4, 2e-4, 4e-4], steps=4, laws=found.laws, seeds=2)
    assert found.num_found == 4 and found.complete and abs(report.slope_lr - 2) < 0.01
    assert all(p.identity_error < 1e-12 and p.epsilon > 0 for p in report.points)
    assert not torch.equal(setup(0)[0][0].weight, setup(1)[0][0].weight)  # θ₀ from the seed
    with pytest.raises(ValueError, match="holds no registered block, so its laws are not known here: give laws="):
        measure(setup, [1e-3], steps=2)
    with pytest.raises(ValueError, match="law 'x' reads a parameter the model does not have"):
        measure(setup, [1e-3], steps=2, laws={"x": lambda p: p["nope"]})


def test_cli_drifts_a_module_file_on_the_laws_it_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.py"
    path.write_text(
        "from torch import nn\n\n"
        "def build():\n    return nn.Sequential(nn.Embedding(7, 3), nn.Flatten(), nn.Linear(6, 4), nn.ReLU(), "
        "nn.Linear(4, 2))\n"
    )
    flags = ["--input-shape", "2", "--input-dtype", "long", "--vocab", "7", "--steps", "4", "--json"]
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "2e-4", *flags]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert f"laws of {path}:build: 10 quadratic laws found; N = 10: the list is complete" in err
    assert abs(report["slope_lr"] - 2) < 0.01 and all(p["identity_error"] < 1e-12 for p in report["points"])
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "--input-shape", "2", "--hidden", "3"]) == 2
    assert "builds its model at its sizes: leave out --hidden" in capsys.readouterr().err
    path.write_text("def build(:\n    pass\n")
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "--input-shape", "2"]) == 4
    assert capsys.readouterr().err == f"error: {path}:1: SyntaxError: invalid syntax\n"


def test_cli_drift_of_a_module_file_keeps_its_prints_off_the_json_and_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that prints (on import, in its factory, in forward) leaves ``--json``'s stdout valid JSON; a typo in
    its forward is bad input named at its line (it was a traceback, exit 3); a step size ≤ 0 is said before any
    search."""
    path = tmp_path / "loud.py"
    path.write_text(
        "from torch import nn\n\nprint('imported')\n\n"
        "class Loud(nn.Sequential):\n    def forward(self, x):\n        print('forward')\n"
        "        return super().forward(x)\n\n"
        "def build():\n    print('built')\n    return Loud(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))\n"
    )
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "2e-4", "--input-shape", "2", "--steps", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == 2 and "built" in err and "forward" in err
    path.write_text(
        "from torch import nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(2, 2)\n\n    def forward(self, x):\n        return self.fc3(x)\n\n"
        "def build():\n    return Net()\n"
    )
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "--input-shape", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:9: the model fails on the training batch of 64 inputs of shape (2,) (Attrib")
    assert len(err.splitlines()) == 1
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "-0.01", "--input-shape", "2"]) == 2
    assert "--lr takes step sizes τ > 0, got 0.0001 -0.01" in capsys.readouterr().err
    path.write_text(  # a forward that fails on the training batch only (64 inputs): it was exit 3 and a traceback
        "import torch\nfrom torch import nn\n\nclass Net(nn.Sequential):\n    def forward(self, x):\n"
        "        if len(x) == 64:\n            raise RuntimeError('no batch of 64')\n"
        "        return super().forward(x)\n"
        "\ndef build():\n    return Net(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))\n"
    )
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "2e-4", "--input-shape", "2", "--steps", "2"]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    batch = "the training batch of 64 inputs of shape (2,)"
    assert err == f"error: {path}:7: the model fails on {batch} (RuntimeError: no batch of 64)"
    path.write_text(  # two outputs: the MSE loss needs one, said once the law search (seconds) had ended
        "import torch\nfrom torch import nn\n\nclass Net(nn.Sequential):\n    def forward(self, x):\n"
        "        y = super().forward(x)\n        return y, y.sum(-1)\n"
        "\ndef build():\n    return Net(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))\n"
    )
    assert main(["drift", f"{path}:build", "--lr", "1e-4", "--input-shape", "2", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "error: the model returns tuple; the MSE loss needs one tensor\n"  # no "laws of ...: found" before


def test_cli_drifts_a_module_past_find_laws_on_its_rescaled_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """D = 9,272, over the 8,192 find_laws counts: the 90 laws of its rescaled units, checked, said not counted."""
    path = tmp_path / "wide.py"
    path.write_text("from torch import nn\n\nmodel = nn.Sequential(nn.Linear(100, 90), nn.ReLU(), nn.Linear(90, 2))\n")
    assert main(["drift", str(path), "--input-shape", "100", "--lr", "1e-4", "2e-4", "--steps", "3", "--json"]) == 0
    out, err = capsys.readouterr()
    assert f"laws of {path}: 90 laws of rescaled units checked; not counted: other laws may exist (D = 9,272" in err
    assert abs(json.loads(out)["slope_lr"] - 2) < 0.01


def test_drift_cli_refuses_a_repeated_tau_and_says_when_one_tau_fits_no_slope(capsys) -> None:
    """``--lr 0.01 0.01`` printed ``slope_lr = nan`` with nothing said; one τ alone did too."""
    assert main(["drift", "toy", "--lr", "0.01", "0.01", "--steps", "2"]) == 2
    assert "--lr takes distinct step sizes (slope_lr is fitted over them), got 0.01 0.01" in capsys.readouterr().err
    assert main(["drift", "toy", "--lr", "0.01", "--steps", "2"]) == 0
    assert "slope_lr: cannot be fitted with fewer than 2 stable tau (1 stable, 0 diverged)" in capsys.readouterr().out


def test_drift_cli_says_in_words_that_adam_does_not_keep_the_laws(capsys) -> None:
    assert main(["drift", "toy", "--lr", "0.01", "0.02", "--steps", "3", "--optimizer", "adam"]) == 0
    assert "note: Adam rescales each coordinate of the gradient" in capsys.readouterr().out
    assert main(["drift", "toy", "--lr", "0.01", "0.02", "--steps", "3"]) == 0
    assert "note:" not in capsys.readouterr().out
