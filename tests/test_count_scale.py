"""count_laws at size: the estimate and the refusal before allocating, device=, the progress bar, no stack."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import time

import pytest
import torch
from torch import nn

from conslaw_lite.counting import TooLarge, count_laws, sample_sizes
from conslaw_lite.counting import progress as progress_module
from conslaw_lite.counting.budget import available_memory, check_fits, estimate, resolve_device
from conslaw_lite.counting.lie_rank import lie_rank
from conslaw_lite.counting.problem import problem_of
from conslaw_lite.counting.progress import Progress
from conslaw_lite.families.toy.block import ToyProduct


def relu_net(d: int, r: int, m: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, r, bias=False), nn.ReLU(), nn.Linear(r, m, bias=False))


def test_a_count_that_does_not_fit_is_refused_at_once_with_the_estimate() -> None:
    start = time.perf_counter()
    with pytest.raises(TooLarge) as refused:
        count_laws(relu_net(100, 250, 100), (100,), max_memory=8e9)  # D = 50,000: the LU alone is 20 GB
    assert time.perf_counter() - start < 10
    message = str(refused.value)
    assert "D = 50,000" in message and "their LU 20.0 GB" in message and "8.0 GB allowed (max_memory)" in message
    assert "narrower model" in message and "device='cuda'" in message
    assert isinstance(refused.value, MemoryError) and isinstance(refused.value, ValueError)


def test_max_memory_is_the_limit_when_given() -> None:
    small = ToyProduct(a=1.0, b=2.0)
    assert count_laws(small, (1,), max_memory=1e9).num_laws == 1
    with pytest.raises(TooLarge, match="more than the 1 MB allowed"):
        count_laws(relu_net(4, 6, 3), (4,), max_memory=1e6)


def test_the_estimate_grows_as_d_squared_and_d_cubed() -> None:
    cpu = torch.device("cpu")
    small, large = estimate(1000, 1250, False, cpu), estimate(2000, 2500, False, cpu)
    assert large.parts["basis"] == 4 * small.parts["basis"] == 4 * 8 * 1000**2
    assert large.seconds == pytest.approx(8 * small.seconds, rel=1e-9)  # the same measured rate
    assert estimate(1000, 1250, True, cpu).bytes == small.bytes + 2 * 8e6  # the stack and its SVD
    assert available_memory(cpu) > 0
    check_fits(small, 1000, cpu, max_memory=1e9)  # fits: no error


def test_device_cpu_explicit_gives_the_same_count() -> None:
    default, explicit = count_laws(relu_net(4, 6, 3), (4,)), count_laws(relu_net(4, 6, 3), (4,), device="cpu")
    assert explicit.conclusive and explicit.num_laws == default.num_laws == 6
    assert explicit.sigma_kept == default.sigma_kept and explicit.sigma_dropped == default.sigma_dropped


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for a machine without CUDA")
def test_cuda_asked_but_absent_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no CUDA device here"):
        count_laws(ToyProduct(a=1.0, b=2.0), (1,), device="cuda")


@pytest.mark.parametrize("device", ["tpu", "cuda:x", 3.5])
def test_an_unknown_device_is_a_clear_error(device) -> None:
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        resolve_device(device)


def test_no_progress_bar_when_not_asked(capfd) -> None:
    count_laws(ToyProduct(a=1.0, b=2.0), (1,), progress=False)
    assert capfd.readouterr().err == ""


def test_the_progress_bar_follows_the_rank() -> None:
    bar = Progress(42, estimate(42, 100, True, torch.device("cpu")), enabled=True, delay=0)
    report = bar.point(1, n_out=500)
    report(1, 0, "LU of the 42 gradients")
    assert bar.bar.n == 0 and bar.bar.postfix == "outputs=500, stage=LU of the 42 gradients"
    report(1, 30)
    report(2, 36)
    assert bar.bar.n == 36 and bar.bar.total == 42
    assert bar.bar.postfix == "depth=2, outputs=500, rank=36" and bar.bar.desc.startswith("count_laws θ2 (est. ")
    bar.close()


def _slow_first_theta(monkeypatch: pytest.MonkeyPatch, then: BaseException | None = None) -> None:
    """The rank at the first θ takes 0.3 s, past a bar delay of 0.2 s (``then``: raised after it); the rest is quick."""
    count_module = importlib.import_module("conslaw_lite.counting.count")
    calls = []

    def slow_first(*args, **kwargs):
        if not calls:
            time.sleep(0.3)
        calls.append(1)
        rank = lie_rank(*args, **kwargs)
        if then is not None:
            raise then
        return rank

    monkeypatch.setattr(count_module, "lie_rank", slow_first)
    monkeypatch.setattr(progress_module, "DELAY", 0.2)


def test_a_count_shorter_than_the_delay_prints_no_bar() -> None:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        count_laws(ToyProduct(a=1.0, b=2.0), (1,), progress=True)
    assert err.getvalue() == ""


def test_the_bar_ends_its_line_in_a_log_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr a file, not a terminal: what is printed after the count starts a line of its own (the bar was shown
    in the first θ, and the count ended within the delay of the second θ's reset)."""
    _slow_first_theta(monkeypatch)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        count_laws(ToyProduct(a=1.0, b=2.0), (1,), progress=True)
    assert not err.isatty() and "count_laws θ2" in err.getvalue()
    assert err.getvalue().endswith("\n")
    # the estimate is of the linear algebra alone: the time of the θ before says more of the next
    assert re.search(r"count_laws θ2 \(est\. [^)]*; θ1 took 0 s\)", err.getvalue())


def test_an_interrupted_count_ends_the_bar_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_first_theta(monkeypatch, then=KeyboardInterrupt())
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(KeyboardInterrupt):
        count_laws(ToyProduct(a=1.0, b=2.0), (1,), progress=True)
    assert "count_laws θ1" in err.getvalue() and err.getvalue().endswith("\n")


def test_without_the_stack_the_rank_and_the_evidence_are_the_residuals() -> None:
    """A linear net 3 → 2 → 3 (D = 12, N = 3): the same rank with or without a copy of the vectors."""
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    f = lambda t: (x @ t[:6].reshape(2, 3).T @ t[6:].reshape(3, 2).T).reshape(-1)  # noqa: E731
    theta = torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    kept = lie_rank(f, theta, 48, torch.Generator().manual_seed(2), [6, 6])
    bare = lie_rank(f, theta, 48, torch.Generator().manual_seed(2), [6, 6], keep_stack=False)
    assert kept.rank == bare.rank == 9 and (kept.evidence, bare.evidence) == ("spectrum", "residuals")
    assert bare.sigma_kept > 1e4 * bare.sigma_dropped


def test_counting_on_another_device_copies_the_module_there() -> None:
    """``cpu:0`` is not ``cpu`` to the counter: the module is copied there and run as on a GPU, to the same count."""
    model = relu_net(4, 6, 3)
    moved = count_laws(model, (4,), device=torch.device("cpu", 0))
    here = count_laws(model, (4,))
    assert moved.conclusive and moved.num_laws == here.num_laws == 6 and moved.sigma_kept == here.sigma_kept
    assert next(model.parameters()).dtype == torch.float32  # the user's module is left as it was


def test_a_model_of_few_outputs_draws_as_many_inputs_as_its_gradient_rows_need_within_a_memory_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linear(100, 90)-ReLU-Linear(90, 2), D = 9,272: 512 inputs would give 1,024 gradient rows, so ⌈1.25 D / 2⌉ =
    5,795 are drawn; one input's forward saves 2,240 bytes for the backward (100 + 90 + 90 floats, and the ReLU's
    mask), so a budget of 1,000 inputs' worth caps them there, and a model with 512 · out ≥ D keeps 512."""
    model = nn.Sequential(nn.Linear(100, 90), nn.ReLU(), nn.Linear(90, 2)).double()
    problem = problem_of(model, None)
    theta = problem.flatten(dict(model.named_parameters()))
    assert sample_sizes.saved_bytes(problem, theta, torch.randn(2, 100, dtype=torch.float64)) == 2240
    assert sample_sizes.num_inputs(problem, theta, (100,), None, 2) == 5795
    monkeypatch.setattr(sample_sizes, "SAVED_BYTES", 2240 * 1000)
    assert sample_sizes.num_inputs(problem, theta, (100,), None, 2) == 1000
    assert sample_sizes.num_inputs(problem, theta, (100,), None, 20) == 512  # 512 · 20 ≥ D
