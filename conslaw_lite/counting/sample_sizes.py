"""How many inputs a count draws at each θ: enough output entries for W's span, within a memory budget."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from conslaw_lite.counting.problem import Problem, sample_inputs

MIN_OUTPUTS = 4096  # output entries per θ: every ReLU unit is on for many inputs and off for many
# And at least 1.25 D of them: W's span needs no more than D gradient rows, a quarter more covers inputs whose
# rows are dependent. Each vector costs a pass over all of them (2D took 1.6 times as long for MHA at D = 8192).
OUTPUTS_PER_PARAM = 1.25
MAX_SAMPLES = 512
SAVED_BYTES = 2**26  # past MAX_SAMPLES, inputs whose forward saves at most this much for the backward (64 MiB)


def output_entries(D: int) -> float:
    """The output entries a count wants at each θ for D parameters: ``max(1.25 D, 4096)``.

    Examples
    ========
    >>> output_entries(100), output_entries(20_000)
    (4096, 25000.0)
    """
    return max(OUTPUTS_PER_PARAM * D, MIN_OUTPUTS)


def num_inputs(problem: Problem, theta: torch.Tensor, input_shape, inputs, n_out_one: int) -> int:
    """Inputs for :func:`output_entries` at ``n_out_one`` each: at most ``MAX_SAMPLES``, unless those would give
    fewer gradient rows than D (a regression's one output: 512 rows for thousands of parameters, which leaves the
    brackets thousands of directions to fill, and the complement's factorization growing to D); then as many as the
    outputs need, while what their forward saves for its backward stays under ``SAVED_BYTES``.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> def drawn(model, shape):
    ...     problem = problem_of(model, None)
    ...     theta = problem.flatten(dict(model.named_parameters()))
    ...     out = model(torch.zeros(1, *shape, dtype=torch.float64)).numel()
    ...     return num_inputs(problem, theta, shape, None, out)
    >>> drawn(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).double(), (4,))  # 512 · 2 ≥ D = 58
    512
    >>> drawn(nn.Sequential(nn.Linear(100, 90), nn.ReLU(), nn.Linear(90, 2)).double(), (100,))  # ⌈1.25 · 9,272 / 2⌉
    5795
    """
    wanted = math.ceil(output_entries(theta.numel()) / max(n_out_one, 1))
    if inputs is not None or MAX_SAMPLES * n_out_one >= theta.numel() or wanted <= MAX_SAMPLES:
        return min(MAX_SAMPLES, wanted)  # given inputs are taken as they are, whatever their number
    two = sample_inputs(input_shape, None, 2, torch.Generator().manual_seed(0), spread=False)  # not the count's draws
    per_input = saved_bytes(problem, theta, two)
    return min(wanted, max(MAX_SAMPLES, SAVED_BYTES // max(per_input, 1)))


def saved_bytes(problem: Problem, theta: torch.Tensor, two: torch.Tensor) -> int:
    """The bytes one more input adds to what the forward saves for its backward: two inputs' against one's."""
    theta = theta.detach().requires_grad_()
    forward = lambda x: problem.apply(problem.unflatten(theta), problem.to_device(x))  # noqa: E731
    return saved_by(lambda: forward(two)) - saved_by(lambda: forward(two[:1]))


def saved_by(forward: Callable[[], object]) -> int:
    """The bytes ``forward()`` saves for its backward.

    Examples
    ========
    >>> w = torch.ones(3, requires_grad=True)
    >>> saved_by(lambda: (w * torch.ones(3)).sum())  # w * x saves x, the factor of w's gradient: 3 float32
    12
    """
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return total[0]
