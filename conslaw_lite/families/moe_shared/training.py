"""Gradient descent with DeepSeek-V3's load balancing in between: the laws hold while the bias moves.

Each step is a plain GD step on the parameters, then :func:`~.block.balance_step` on the routing bias. The
bias is no parameter, so the step's change of a quadratic law is still ``τ² h(g)`` (chapter 7); the
balancing changes which experts the next step trains, never θ. :func:`train_balanced` records the drift of
the laws and of their controls, the bias and the load imbalance, for chapter 16's figure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from conslaw_lite.families.moe_shared.block import SharedMoE, balance_step
from conslaw_lite.laws import evaluate, law_functions, parameters_of


@dataclass(frozen=True)
class BalancedRun:
    """What :func:`train_balanced` records, step k = 0..K."""

    law_drift: np.ndarray  # (K+1,): Σ over the laws of ‖h_k − h_0‖
    control_drift: np.ndarray  # (K+1,): the same for the controls
    bias: np.ndarray  # (K+1, n_r): the routing bias b_k
    imbalance: np.ndarray  # (K,): max_e load_e − min_e load_e before balancing step k


def _drift(fns: dict, theta: dict, start: dict) -> float:
    now = evaluate(fns, theta)
    return float(sum(torch.linalg.vector_norm(now[k] - start[k]) for k in fns))


def train_balanced(
    model: SharedMoE, x: torch.Tensor, y: torch.Tensor, *, lr: float, steps: int, rate: float
) -> BalancedRun:
    """``steps`` of ``θ ← θ − τ∇L`` (L the mean squared error on (x, y)), each followed by ``balance_step(rate)``.

    Examples
    ========
    >>> _ = torch.manual_seed(0)
    >>> moe = SharedMoE(2, 1, 3, 1, 1, top_k=1, routing_bias=True).double()
    >>> x, y = torch.randn(32, 2, dtype=torch.float64), torch.randn(32, 1, dtype=torch.float64)
    >>> run = train_balanced(moe, x, y, lr=1e-3, steps=5, rate=0.1)
    >>> run.bias.shape, bool(run.law_drift[-1] < 1e-3 * run.control_drift[-1])
    ((6, 3), True)
    """
    if model.route_bias is None:
        raise ValueError("train_balanced needs a SharedMoE built with routing_bias=True")
    laws, controls = law_functions(model), law_functions(model, controls=True)
    theta0 = parameters_of(model)
    h0, c0 = evaluate(laws, theta0), evaluate(controls, theta0)
    law_drift, control_drift, bias, imbalance = [0.0], [0.0], [model.route_bias.tolist()], []
    for _ in range(steps):
        model.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        if not torch.isfinite(loss):
            raise ValueError(f"the loss is not finite ({float(loss.detach())}): the step size τ = {lr} diverges")
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
        load = balance_step(model, x, rate)
        imbalance.append(float(load.max() - load.min()))
        theta = parameters_of(model)
        law_drift.append(_drift(laws, theta, h0))
        control_drift.append(_drift(controls, theta, c0))
        bias.append(model.route_bias.tolist())
    return BalancedRun(np.array(law_drift), np.array(control_drift), np.array(bias), np.array(imbalance))
