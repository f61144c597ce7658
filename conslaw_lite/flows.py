"""Training as the theory sees it: exact gradient flow, and its discretisations.

* :func:`gradient_flow` integrates ``θ' = −∇L(θ)`` with an adaptive
  Dormand–Prince 8(5,3) scheme (``scipy.integrate.solve_ivp``, float64, error
  control), so a conservation law stays constant to the integrator's tolerance.
* :func:`train` takes discrete steps ``θ_{k+1} = θ_k − δ_k`` with step sizes
  τ_k (constant, or ``τ₀/(k+1)``) and one of four update rules, and records
  every law ``h`` at each θ_k together with ``h(δ_k)``: for a quadratic law
  ``h(θ) = θᵀMθ`` and a plain gradient step ``δ = τg``, chapter 07's exact
  identity reads ``h(θ_{k+1}) − h(θ_k) = h(δ_k) = τ_k² gᵀMg``.

A loss is a function ``loss_fn(model, k)`` of the model and the step index, so
that SGD can draw its mini-batch from ``k`` reproducibly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn

from conslaw_lite.config import device as default_device
from conslaw_lite.config import model_device
from conslaw_lite.laws import Law
from conslaw_lite.monitor import Diverged, relative_drift
from conslaw_lite.seeding import Stream, generator

LossFn = Callable[[nn.Module, int], torch.Tensor]
SCHEDULES = ("constant", "decay")
OPTIMIZERS = ("gd", "sgd", "momentum", "adam")


def batch_indices(n: int, batch_size: int | None, seed: int, k: int) -> torch.Tensor | None:
    """The examples of step k: ``None`` for the full batch, else ``batch_size`` of the n drawn from ``(seed, k)``.

    Drawing from a generator seeded by (seed, k), not a running one, makes the batch of any
    step known without replaying the earlier ones (reproducible runs, resumable training).

    Examples
    ========
    >>> batch_indices(5, None, 0, 3) is None
    True
    >>> idx = batch_indices(100, 4, 1, 7)
    >>> idx.shape, bool((idx == batch_indices(100, 4, 1, 7)).all()), bool((idx != batch_indices(100, 4, 1, 8)).any())
    (torch.Size([4]), True, True)
    """
    if n < 1:
        raise ValueError(f"the data set is empty (n = {n}); give at least one sample")
    if batch_size is not None and not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be in [1, {n}] (the number of samples), got {batch_size}")
    if batch_size is None or batch_size == n:
        return None
    g = generator(seed, Stream.BATCHES, k)
    # Drawn on the CPU, whatever the training device: the same (seed, k) gives the same batch everywhere.
    return torch.randperm(n, generator=g, device="cpu")[:batch_size]


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no single truth value
class MSELoss:
    """``L(θ) = ½ Σ ‖f(x; θ) − y‖² / n`` over the full batch, or over the mini-batch :func:`batch_indices` of step k.

    It carries its data, so :func:`train` can move it with the model (:meth:`to`); called on a
    model whose device or dtype differs from the data's, it raises naming both.
    """

    x: torch.Tensor
    y: torch.Tensor
    batch_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"x has {self.x.shape[0]} samples but y has {self.y.shape[0]}")
        if self.x.device != self.y.device:
            raise ValueError(f"x is on {self.x.device} but y is on {self.y.device}; put both on one device")
        batch_indices(self.x.shape[0], self.batch_size, self.seed, 0)  # validates n ≥ 1 and the batch size now

    def __call__(self, model: nn.Module, k: int) -> torch.Tensor:
        check_data(model, self.x)
        idx = batch_indices(self.x.shape[0], self.batch_size, self.seed, k)
        if idx is not None:
            idx = idx.to(self.x.device)
        xb, yb = (self.x, self.y) if idx is None else (self.x[idx], self.y[idx])
        r = model(xb) - yb
        return 0.5 * (r * r).sum() / xb.shape[0]

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> MSELoss:
        """The same loss with x and y on ``device`` and, if floating point, in ``dtype`` (``None``: unchanged).

        Examples
        ========
        >>> loss = mse_loss(torch.ones(4, 2, dtype=torch.float64), torch.ones(4, 1, dtype=torch.float64))
        >>> loss.to("cpu", torch.float32).x.dtype
        torch.float32
        """
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, dtype if t.is_floating_point() else None)

        return replace(self, x=move(self.x), y=move(self.y))


def check_data(model: nn.Module, data: torch.Tensor) -> None:
    """Raise ``ValueError`` naming both when ``data`` is not on the device (or in the dtype) of ``model``.

    Examples
    ========
    >>> check_data(torch.nn.Linear(2, 1), torch.ones(3, 2))  # both float32 on the CPU: fine
    >>> check_data(torch.nn.Linear(2, 1, device="meta"), torch.ones(3, 2))
    Traceback (most recent call last):
    ...
    ValueError: the model is on meta but the data is on cpu; move both to one device (train(..., device=...) does)
    """
    where = model_device(model)
    if where is not None and data.device != where:
        raise ValueError(
            f"the model is on {where} but the data is on {data.device}; "
            "move both to one device (train(..., device=...) does)"
        )
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is not None and data.is_floating_point() and data.dtype != dtype:
        raise ValueError(f"the model is in {dtype} but the data in {data.dtype}; train(..., dtype=...) casts both")


def mse_loss(x: torch.Tensor, y: torch.Tensor, *, batch_size: int | None = None, seed: int = 0) -> MSELoss:
    """``L(θ) = ½ Σ ‖f(x; θ) − y‖² / n`` over the full batch, or over the mini-batch :func:`batch_indices` of step k.

    Examples
    ========
    >>> import torch
    >>> model = torch.nn.Linear(2, 1, bias=False).double()
    >>> with torch.no_grad(): _ = model.weight.zero_()
    >>> loss = mse_loss(torch.ones(4, 2, dtype=torch.float64), torch.ones(4, 1, dtype=torch.float64))
    >>> float(loss(model, 0).detach())
    0.5
    """
    return MSELoss(x, y, batch_size, seed)


def step_sizes(lr: float, steps: int, schedule: str = "constant") -> np.ndarray:
    """τ_k for k = 0..steps−1: ``τ`` (constant) or ``τ₀/(k+1)`` (decay).

    Examples
    ========
    >>> step_sizes(0.1, 3, "decay").round(4).tolist()
    [0.1, 0.05, 0.0333]
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive finite number, got {lr}")
    k = np.arange(steps, dtype=np.float64)
    return np.full(steps, lr) if schedule == "constant" else lr / (k + 1)


@dataclass
class Run:
    """What :func:`train` saw. Arrays over k; law values flattened to ``(k, entries)``.

    ``h[name][k]`` is the law at θ_k (k = 0..K), ``h_step[name][k]`` the law evaluated
    at the step δ_k (k = 0..K−1), ``grad_sq[k] = ‖g_k‖²``, ``tau[k] = τ_k``.
    """

    tau: np.ndarray
    loss: np.ndarray
    grad_sq: np.ndarray
    h: dict[str, np.ndarray]
    h_step: dict[str, np.ndarray]
    param_change: float = 0.0  # ‖θ_K − θ_0‖ / ‖θ_0‖
    extra: dict = field(default_factory=dict)

    def drift(self, name: str) -> np.ndarray:
        """``‖h_k − h_0‖`` (Frobenius over the law's entries) for k = 0..K."""
        return np.linalg.norm(self.h[name] - self.h[name][0], axis=1)

    def relative_drift(self, name: str) -> np.ndarray:
        """``‖h_k − h_0‖ / ‖h_0‖`` (chapter 07; NaN if h_0 = 0): :func:`conslaw_lite.monitor.relative_drift`."""
        return relative_drift(self.h[name])

    def step_budget(self) -> np.ndarray:
        """``Σ_{i<k} τ_i² ‖g_i‖²`` for k = 0..K, the quantity the drift is proportional to."""
        return np.concatenate([[0.0], np.cumsum(self.tau**2 * self.grad_sq)])


def _param_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """θ by parameter name, in float64 (no copy when the model already is): laws are evaluated in double."""
    return {n: p.detach().double() for n, p in model.named_parameters()}


def _step_dict(model: nn.Module, deltas: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """δ_k by parameter name: ``deltas`` are the steps of the trained (``requires_grad``) parameters, in order;
    a frozen parameter does not move, so its step is zero."""
    trained = iter(deltas)
    return {
        n: (next(trained) if p.requires_grad else torch.zeros_like(p)).double() for n, p in model.named_parameters()
    }


def _law_values(laws: Mapping[str, Law], params: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    # copy: a law may return a view of a parameter (h = W), which the next step changes in place
    return {n: fn(params).detach().double().reshape(-1).cpu().numpy().copy() for n, fn in laws.items()}


def check_loss(k: int, loss: float, loss0: float, max_loss_ratio: float = 1e6, tau: float | None = None) -> None:
    """Raise :class:`Diverged` at step k if ``L_k`` is not finite or exceeds ``max_loss_ratio · L_0``.

    ``tau`` is the step size that led to step k, named in the message.

    Examples
    ========
    >>> check_loss(3, 2.0, 1.0)  # grew, but not a millionfold: fine
    >>> check_loss(3, float("nan"), 1.0, tau=0.5)
    Traceback (most recent call last):
    ...
    conslaw_lite.monitor.Diverged: training diverged at step 3: the loss is nan; the step size τ = 0.5 is too large
    """
    step = "the step size" if tau is None else f"the step size τ = {tau:g}"
    if not math.isfinite(loss):
        raise Diverged(k, f"the loss is {loss}; {step} is too large")
    if loss > max_loss_ratio * max(loss0, 1e-300):
        grew = f"the loss grew from {loss0:.3g} to {loss:.3g}, past {max_loss_ratio:g} times"
        raise Diverged(k, f"{grew}; {step} is too large")


def train(
    model: nn.Module,
    loss_fn: LossFn,
    *,
    lr: float,
    steps: int,
    schedule: str = "constant",
    optimizer: str = "gd",
    laws: Mapping[str, Law] | None = None,
    momentum: float = 0.9,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    max_loss_ratio: float = 1e6,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Run:
    """Take ``steps`` steps ``θ_{k+1} = θ_k − δ_k`` on ``model`` in place and record the laws.

    Update rules (g_k = ∇L_k(θ_k), L_k the loss of step k, mini-batch or full):
    ``gd``/``sgd``: δ = τg (the batch is the loss function's business);
    ``momentum``: v ← βv + g, δ = τv; ``adam``: the usual bias-corrected
    δ = τ m̂ / (√v̂ + ε). Raises :class:`Diverged` at the first non-finite loss
    or one ``max_loss_ratio`` times the initial loss.

    The model is moved, in place, to ``device`` and cast to ``dtype`` (float32 is a GPU's fast
    path); ``None`` keeps each as it is, so ``train`` never moves a model nobody asked it to move
    (``device=conslaw_lite.device()`` picks ``cuda`` when present). An :class:`MSELoss` goes
    wherever the model trains; a loss function that holds its data elsewhere fails at its first
    call with an error naming both devices. Laws, ‖g‖² and ‖θ_K − θ_0‖ are evaluated in float64
    whatever the training dtype.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> from conslaw_lite.families.toy.laws import toy_laws
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> loss = mse_loss(torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64))
    >>> run = train(model, loss, lr=0.01, steps=3, laws=toy_laws(model))
    >>> bool(abs(run.h["a²−b²"][1, 0] - run.h["a²−b²"][0, 0] - run.h_step["a²−b²"][0, 0]) < 1e-14)
    True
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    laws = dict(laws or {})
    taus = step_sizes(lr, steps, schedule)
    model_device(model)  # one device, or an error naming them: train() does not split a model
    model.to(None if device is None else default_device(device), dtype)
    if isinstance(loss_fn, MSELoss):
        loss_fn = loss_fn.to(model_device(model), dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    theta0 = torch.cat([p.detach().reshape(-1) for p in params]).double()
    state = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]

    h = {n: [v] for n, v in _law_values(laws, _param_dict(model)).items()}
    h_step: dict[str, list[np.ndarray]] = {n: [] for n in laws}
    losses, grad_sq = [], []
    loss0 = None
    for k, tau in enumerate(taus):
        loss = loss_fn(model, k)
        value = float(loss.detach())
        loss0 = value if loss0 is None else loss0
        check_loss(k, value, loss0, max_loss_ratio, taus[k - 1] if k else None)
        grads = torch.autograd.grad(loss, params)
        deltas = _update(optimizer, k, float(tau), grads, state, momentum, betas, eps)
        with torch.no_grad():
            for p, d in zip(params, deltas):
                p.sub_(d)
        if not all(torch.isfinite(p).all() for p in params):
            raise Diverged(k, "a parameter became non-finite")
        losses.append(value)
        grad_sq.append(float(sum((g.double() ** 2).sum() for g in grads)))
        for n, v in _law_values(laws, _step_dict(model, deltas)).items():
            h_step[n].append(v)
        for n, v in _law_values(laws, _param_dict(model)).items():
            h[n].append(v)
    final = float(loss_fn(model, steps).detach())
    check_loss(steps, final, loss0, max_loss_ratio, taus[-1])
    losses.append(final)
    theta = torch.cat([p.detach().reshape(-1) for p in params]).double()
    return Run(
        tau=taus,
        loss=np.array(losses),
        grad_sq=np.array(grad_sq),
        h={n: np.stack(v) for n, v in h.items()},
        h_step={n: np.stack(v) for n, v in h_step.items()},
        param_change=float((theta - theta0).norm() / theta0.norm().clamp_min(1e-300)),
    )


def _update(optimizer, k, tau, grads, state, momentum, betas, eps) -> list[torch.Tensor]:
    if optimizer in ("gd", "sgd"):
        return [tau * g for g in grads]
    m, v = state
    if optimizer == "momentum":
        for mi, g in zip(m, grads):
            mi.mul_(momentum).add_(g)
        return [tau * mi for mi in m]
    b1, b2 = betas
    deltas = []
    for mi, vi, g in zip(m, v, grads):
        mi.mul_(b1).add_(g, alpha=1 - b1)
        vi.mul_(b2).addcmul_(g, g, value=1 - b2)
        m_hat, v_hat = mi / (1 - b1 ** (k + 1)), vi / (1 - b2 ** (k + 1))
        deltas.append(tau * m_hat / (v_hat.sqrt() + eps))
    return deltas


@dataclass
class Flow:
    """Gradient flow sampled at times ``t``: ``loss[i]`` and ``h[name][i]`` at θ(t_i)."""

    t: np.ndarray
    loss: np.ndarray
    h: dict[str, np.ndarray]
    theta: np.ndarray  # (len(t), D)
    nfev: int

    def relative_drift(self, name: str) -> np.ndarray:
        """``‖h(t) − h(0)‖ / ‖h(0)‖`` (NaN if h(0) = 0): :func:`conslaw_lite.monitor.relative_drift`."""
        return relative_drift(self.h[name])


def gradient_flow(
    model: nn.Module,
    loss_fn: LossFn,
    t_end: float,
    *,
    n_points: int = 101,
    laws: Mapping[str, Law] | None = None,
    rtol: float = 1e-12,
    atol: float = 1e-12,
) -> Flow:
    """Integrate ``θ'(t) = −∇L(θ(t))`` from the model's θ to ``t_end`` (DOP853, float64).

    The full-batch loss ``loss_fn(model, 0)`` is used. The model is left at θ(t_end).

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy import ToyProduct, toy_laws
    >>> model, x = ToyProduct(a=2.0, b=1.0), torch.ones(1, 1, dtype=torch.float64)
    >>> flow = gradient_flow(model, mse_loss(x, torch.zeros_like(x)), 1.0, laws=toy_laws(model))
    >>> bool(flow.relative_drift("a²−b²").max() < 1e-9)
    True
    """
    from scipy.integrate import solve_ivp

    laws = dict(laws or {})
    params = [p for p in model.parameters() if p.requires_grad]
    dtype = params[0].dtype
    theta0 = torch.nn.utils.parameters_to_vector(params).detach().double().cpu().numpy()

    def set_theta(theta: np.ndarray) -> None:
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.as_tensor(theta, dtype=dtype, device=params[0].device), params)

    def rhs(t: float, theta: np.ndarray) -> np.ndarray:
        set_theta(theta)
        loss = loss_fn(model, 0)
        if not torch.isfinite(loss):
            raise Diverged(0, f"the loss is {float(loss)} during the flow at t={t:.4g}")
        grads = torch.autograd.grad(loss, params)
        return -torch.cat([g.reshape(-1) for g in grads]).double().cpu().numpy()

    t_eval = np.linspace(0.0, t_end, n_points)
    sol = solve_ivp(rhs, (0.0, t_end), theta0, method="DOP853", t_eval=t_eval, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"gradient flow integration failed: {sol.message}")
    losses, h = [], {n: [] for n in laws}
    for theta in sol.y.T:
        set_theta(theta)
        with torch.no_grad():
            losses.append(float(loss_fn(model, 0)))
        for n, v in _law_values(laws, _param_dict(model)).items():
            h[n].append(v)
    return Flow(sol.t, np.array(losses), {n: np.stack(v) for n, v in h.items()}, sol.y.T.copy(), sol.nfev)
