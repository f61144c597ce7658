"""Weight decay: the conserved quantities become exponentially decaying ones.

Training on ``L(θ) + λ/2 ‖θ‖²`` adds ``−λθ`` to the velocity. For a quadratic
law ``h(θ) = θᵀMθ`` with ``⟨∇h, ∇L⟩ = 0`` the flow gives
``dh/dt = ⟨2Mθ, −∇L − λθ⟩ = −2λ h``, so ``h(t) = e^{−2λt} h(0)``.

A discrete step ``θ⁺ = θ − δ`` with ``δ = τ(g + λθ)``, g a gradient of any data
loss (so ``θᵀMg = 0``), satisfies two exact identities::

    h(θ⁺) = (1 − τλ)² h(θ) + τ² h(g)          # θ⁺ = (1 − τλ)θ − τg
    h(θ⁺) = (1 − 2τλ) h(θ) + h(δ)             # expand h(θ − δ); θᵀMδ = τλ h(θ)

The second uses only what :func:`conslaw_lite.flows.train` records (h at θ_k and
at δ_k), so :func:`discrete_residual` checks it on any recorded run.
Weight decay is a change of loss, not of optimizer: :func:`with_weight_decay`
wraps a loss for ``train`` and ``gradient_flow`` alike.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from conslaw_lite.flows import LossFn, Run


def with_weight_decay(loss_fn: LossFn, lam: float) -> LossFn:
    """The loss ``L_k(θ) + λ/2 ‖θ‖²`` (every trainable parameter decays).

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> from conslaw_lite.flows import mse_loss
    >>> data = mse_loss(torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64))
    >>> model = ToyProduct(a=2.0, b=1.0)   # L = ½(ab)² = 2, ‖θ‖² = 5
    >>> with_weight_decay(data, 0.1)(model, 0).item()  # 2 + 0.1/2 · 5
    2.25
    """
    if not (lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"weight decay λ must be a finite number ≥ 0, got {lam}")

    def loss(model: nn.Module, k: int) -> torch.Tensor:
        squared = sum((p * p).sum() for p in model.parameters() if p.requires_grad)
        return loss_fn(model, k) + 0.5 * lam * squared

    return loss


def decayed_law(h0: np.ndarray, lam: float, t: np.ndarray) -> np.ndarray:
    """The flow's prediction ``h(t) = e^{−2λt} h(0)``, shape ``(len(t), *h0.shape)``.

    Examples
    ========
    >>> import numpy as np
    >>> decayed_law(np.array([3.0]), 0.5, np.array([0.0, 1.0])).round(4).tolist()
    [[3.0], [1.1036]]
    """
    t = np.asarray(t, dtype=np.float64)
    return np.exp(-2.0 * lam * t)[:, None] * np.asarray(h0, dtype=np.float64).reshape(1, -1)


def discrete_residual(run: Run, name: str, lam: float) -> float:
    """Largest ``‖h_{k+1} − (1 − 2τ_kλ) h_k − h(δ_k)‖ / ‖h_k‖`` over a recorded run (norms over the law's entries).

    ``run`` must come from ``train(model, with_weight_decay(loss, lam), ...)`` with a
    plain gradient step (``gd`` or ``sgd``): then the identity is exact and the
    residual is round-off.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> from conslaw_lite.flows import mse_loss, train
    >>> from conslaw_lite.families.toy.laws import toy_laws
    >>> data = mse_loss(torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64))
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> run = train(model, with_weight_decay(data, 0.1), lr=0.05, steps=20, laws=toy_laws(model))
    >>> discrete_residual(run, "a²−b²", 0.1) < 1e-13
    True
    """
    if name not in run.h:
        raise ValueError(f"law {name!r} was not recorded; recorded: {', '.join(run.h) or 'none'}")
    h, h_step = run.h[name], run.h_step[name]  # (K+1, entries), (K, entries)
    factor = (1.0 - 2.0 * run.tau * lam)[:, None]
    residual = np.linalg.norm(h[1:] - factor * h[:-1] - h_step, axis=1)
    return float((residual / np.maximum(np.linalg.norm(h[:-1], axis=1), np.finfo(float).tiny)).max())
