"""Heavy-ball momentum: how much faster a quadratic law drifts than under plain gradient steps.

Momentum steps along ``v_k = β v_{k−1} + g_k``, ``θ_{k+1} = θ_k − δ_k`` with ``δ_k = τ v_k``. For
``h(θ) = θᵀMθ``,

    h(θ_k − δ_k) − h(θ_k) = −2 θ_kᵀ M δ_k + δ_kᵀ M δ_k          (exact)

and, unlike a gradient step, the cross term does not vanish: ``δ_k`` holds gradients
``g_j`` taken at earlier points θ_j, and ``θ_kᵀ M g_j = (θ_k − θ_j)ᵀ M g_j ≠ 0``. With a
slowly varying gradient g the velocity settles at ``g/(1−β)``, ``θ_kᵀMg_{k−m} ≈ −mτ gᵀMg/(1−β)``,
the cross term sums to ``2τ² gᵀMg · β/(1−β)³`` and the change per step is

    Δh ≈ τ² gᵀMg · (1+β)/(1−β)³                                  (GD: τ² gᵀMg)

so :func:`momentum_factor` ``(1+β)/(1−β)³`` is 1,900 at β = 0.9 (not ``1/(1−β)² = 100``).
:func:`drift_ratio` measures it on any model with laws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conslaw_lite.drift import Setup
from conslaw_lite.flows import train
from conslaw_lite.laws import law_functions


def momentum_factor(beta: float) -> float:
    """``(1+β)/(1−β)³``: momentum's drift per step over GD's, once the velocity has settled.

    Examples
    ========
    >>> round(momentum_factor(0.9))
    1900
    >>> momentum_factor(0.0)  # no momentum: a gradient step
    1.0
    """
    if not 0 <= beta < 1:
        raise ValueError(f"the momentum β must be in [0, 1), got {beta}")
    return (1 + beta) / (1 - beta) ** 3


@dataclass
class DriftRatio:
    """Momentum against GD from the same start, same τ and number of steps K.

    ``total`` = ‖h_K − h_0‖ (momentum) / ‖h_K − h_0‖ (GD), which the start-up of the
    velocity keeps below :func:`momentum_factor`; ``last_step`` = ‖h_K − h_{K−1}‖ over the
    same for GD, the settled per-step ratio.
    """

    lr: float
    steps: int
    beta: float
    total: float
    last_step: float


def drift_ratio(setup: Setup, *, lr: float, steps: int, beta: float = 0.9, seed: int = 0) -> DriftRatio:
    """Train ``setup(seed)`` with heavy-ball momentum and with GD; compare how far all its laws drifted.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> from conslaw_lite.flows import mse_loss
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> r = drift_ratio(lambda seed: (ToyProduct(a=1.3, b=0.4), mse_loss(one, 3 * one)), lr=1e-6, steps=300)
    >>> 1700 < r.total < r.last_step < momentum_factor(0.9)  # a·b·x, x = 1, y = 3
    True
    """
    momentum_factor(beta)  # validates β
    changes = {}
    for optimizer in ("momentum", "gd"):
        model, loss = setup(seed)
        laws = law_functions(model)
        run = train(model, loss, lr=lr, steps=steps, optimizer=optimizer, momentum=beta, laws=laws)
        h = np.concatenate([run.h[n] for n in laws], axis=1)
        changes[optimizer] = np.linalg.norm(h[-1] - h[0]), np.linalg.norm(h[-1] - h[-2])
    (total, last), (total_gd, last_gd) = changes["momentum"], changes["gd"]
    return DriftRatio(lr, steps, beta, float(total / total_gd), float(last / last_gd))
