"""Drift as an early warning: the laws outrun their τ² budget before the loss blows up.

A gradient step moves each quadratic law by exactly ``τ² h(g)`` (chapter 07), so while training is
stable the drift ε_block(k) grows at most like k times its first steps' rate, and slower as the
gradient shrinks. When τ is too large for the curvature the iterates oscillate with growing
amplitude, ‖g_k‖ grows geometrically and so does the drift, by ``‖g_k‖²``. :func:`warning_step` flags
the first record where

    ε(k) > factor · k · r,      r = max_{1 ≤ j ≤ window} ε(j)/j,

i.e. where the drift is ``factor`` times what the first steps' τ²-rate allows in k steps. It reads
only θ (no loss), so it runs inside an optimizer hook: ``Monitor(model, alarm=DriftAlarm())`` calls
back (by default: a :class:`DriftWarning`) once. :func:`sweep` trains over a range of τ up to
divergence (:func:`diverged`: the loss non-finite or above 10 L_0, for every alarm compared) and
reports, per τ, the step of the warning, the step of the divergence, and the lead between them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from conslaw_lite import Monitor
from conslaw_lite.laws import Law

LossFn = Callable[[nn.Module, int], torch.Tensor]
Setup = Callable[[int], tuple[nn.Module, LossFn]]  # seed -> (fresh model, its loss)
DIVERGENCE = 10.0  # a run has diverged once L_k > DIVERGENCE · L_0 (or is not finite), for every alarm compared


class DriftWarning(UserWarning):
    """The laws drift far faster than the τ² budget of the first steps: the step size is likely too large."""


def _check(factor: float, window: int) -> None:
    if not (factor > 1 and math.isfinite(factor)):
        raise ValueError(f"factor must be a finite number > 1, got {factor}")
    if not (isinstance(window, int) and window >= 1):
        raise ValueError(f"window must be a positive integer, got {window!r}")


def warning_step(steps: np.ndarray, epsilon: np.ndarray, *, factor: float = 30.0, window: int = 2) -> int | None:
    """The first step k (after the first ``window`` records) with ``ε(k) > factor · k · max_{j ≤ window} ε(j)/j``.

    ``steps`` and ``epsilon`` are a monitor's records (``Monitor.steps``, ``Monitor.epsilon(key)``; the record
    at k = 0 is the start). ``None``: no warning, or too few records, or no drift in the first steps to scale by.

    Examples
    ========
    Drift growing like k, then doubling each step from k = 6:

    >>> eps = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 40.0, 160.0, 640.0, 2560.0])
    >>> warning_step(np.arange(11), eps, factor=20.0)  # 640 > 20 · 9 · 1
    9
    >>> warning_step(np.arange(11), np.arange(11.0)) is None  # ε ∝ k: the budget, no warning
    True
    """
    _check(factor, window)
    steps, epsilon = np.asarray(steps), np.asarray(epsilon, dtype=np.float64)
    early = (steps >= 1) & (np.arange(len(steps)) <= window)
    if not early.any():
        return None
    rate = np.nanmax(epsilon[early] / steps[early])
    if not (rate > 0 and math.isfinite(rate)):
        return None
    late = np.flatnonzero((np.arange(len(steps)) > window) & (epsilon > factor * steps * rate))
    return int(steps[late[0]]) if late.size else None


class DriftAlarm:
    """Warns once when any law group's ε outruns its first records' rate: ``ε(k) > factor · k · r``.

    Give it to a monitor, ``Monitor(model, alarm=DriftAlarm())``: the monitor calls it after each record.
    ``callback(step, group_key, ratio)`` is called at the first warning, ``ratio = ε(k) / (k · r)``; the default
    issues a :class:`DriftWarning`. ``warned_at`` keeps the step (``None`` until then).

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> toy = ToyProduct(a=1.0, b=0.5)
    >>> alarm = DriftAlarm(factor=10.0, callback=lambda k, key, ratio: None)
    >>> opt = torch.optim.SGD(toy.parameters(), lr=1.2)  # past 2/(a² + b²): each step overshoots more
    >>> handle = Monitor(toy, alarm=alarm).attach(opt)
    >>> for _ in range(6):  # the laws overflow at step 7: the monitor would stop the run there (Diverged)
    ...     opt.zero_grad(); ((toy(torch.ones(1, 1, dtype=torch.float64)) - 1) ** 2).sum().backward(); opt.step()
    >>> alarm.warned_at is not None and alarm.warned_at < 6
    True
    """

    def __init__(
        self, *, factor: float = 30.0, window: int = 2, callback: Callable[[int, str, float], None] | None = None
    ) -> None:
        _check(factor, window)
        self.factor, self.window = factor, window
        self.callback = callback or self._warn
        self.rates: dict[str, float] = {}  # per law group: max ε(j)/j over the first `window` records
        self.records = 0
        self.warned_at: int | None = None

    @staticmethod
    def _warn(step: int, key: str, ratio: float) -> None:
        warnings.warn(
            f"step {step}: the laws of {key} drift {ratio:.0f} times faster than the τ² rate of the first steps; "
            "the step size is likely too large (the loss tends to blow up soon after)",
            DriftWarning,
            stacklevel=4,
        )

    def __call__(self, monitor: Monitor) -> bool:
        """Read the monitor's latest record; True if it raised the (first) warning."""
        self.records += 1
        k = int(monitor.steps[-1])
        for key in (g.key for g in monitor.groups if g.kind == "law"):
            relative = monitor.last_relative_drift(key)
            finite = relative[np.isfinite(relative)]
            eps = float(finite.mean()) if finite.size else math.nan
            rate = self.rates.setdefault(key, 0.0)
            if self.records <= self.window:
                self.rates[key] = max(rate, eps / k) if math.isfinite(eps) else rate
            elif self.warned_at is None and rate > 0 and eps > self.factor * k * rate:
                self.warned_at = k
                self.callback(k, key, eps / (k * rate))
                return True
        return False

    def statistic(self, monitor: Monitor) -> tuple[np.ndarray, np.ndarray]:
        """``(k, max over law groups of ε(k) / (k·r))`` at the monitor's records from k = 1: above ``factor`` it warns
        (once the first ``window`` records have set r; NaN where a group's r is not positive)."""
        steps = monitor.steps[1:]
        ratios = [monitor.epsilon(key)[1:] / (steps * rate) if rate > 0 else np.full(len(steps), np.nan)
                  for key, rate in self.rates.items()]
        return steps, np.fmax.reduce(ratios) if ratios else np.full(len(steps), np.nan)


@dataclass(frozen=True, eq=False)  # eq=False: arrays have no single truth value
class SweepPoint:
    """One τ of :func:`sweep`: the step the loss diverged at (``None``: it did not), the step of the drift warning,
    and, for comparison, the first step whose loss exceeded ``loss_factor · L_0`` (an alarm that reads the loss).

    The histories, for figures: ``loss[k] = L_k/L_0`` up to the divergence, and at each record ``steps[j]`` the
    alarm's statistic ``ratio[j] = max over law groups of ε(k) / (k·r)``, which warns where it exceeds the factor."""

    lr: float
    diverged_at: int | None
    warned_at: int | None
    loss_warned_at: int | None
    loss: np.ndarray
    steps: np.ndarray
    ratio: np.ndarray

    @property
    def lead(self) -> int | None:
        """Steps of warning before the divergence (``None`` unless both happened)."""
        return _lead(self.diverged_at, self.warned_at)

    @property
    def loss_lead(self) -> int | None:
        """Steps of the loss alarm's warning before the divergence (``None`` unless both happened)."""
        return _lead(self.diverged_at, self.loss_warned_at)


def _lead(diverged_at: int | None, warned_at: int | None) -> int | None:
    return None if diverged_at is None or warned_at is None else diverged_at - warned_at


def _first_above(steps: np.ndarray, values: np.ndarray, level: float) -> int | None:
    above = np.flatnonzero(np.asarray(values, dtype=np.float64) > level)
    return int(steps[above[0]]) if above.size else None


def tuned_leads(points: Sequence[SweepPoint]) -> dict[str, list[int | None]]:
    """The leads each statistic would give with its level tuned on this very sweep: just above its largest value
    at any τ that did not diverge (no false alarm, the most favourable level there is).

    For ``"drift"`` (the alarm's ``ε(k)/(k·r)``) and ``"loss"`` (``L_k/L_0``): per diverging τ, in order, the
    steps from the first record above that level to the divergence (``None``: none before it). A statistic
    that gives fewer than 5 steps here gives fewer than 5 at any level that never cries wolf in the sweep.

    Examples
    ========
    >>> calm = SweepPoint(0.1, None, None, None, np.array([1.0, 2.0, 0.5]), np.array([1, 2]), np.array([1.0, 3.0]))
    >>> wild = SweepPoint(0.9, 6, None, 2, np.array([1, 0.9, 4, 5, 6, 8]), np.arange(1, 7), np.ones(5).tolist() + [9])
    >>> tuned_leads([calm, wild])  # levels 3 and 2: the drift crosses at step 6, the loss at step 2
    {'drift': [0], 'loss': [4]}
    """
    stable = [p for p in points if p.diverged_at is None]
    if not stable or len(stable) == len(points):
        raise ValueError("tuned_leads needs a sweep with both diverging and non-diverging step sizes")
    drift_level = max(float(np.nanmax(p.ratio, initial=0.0)) for p in stable)
    loss_level = max(float(np.nanmax(p.loss, initial=0.0)) for p in stable)
    diverging = [p for p in points if p.diverged_at is not None]
    drift = [_first_above(p.steps, p.ratio, drift_level) for p in diverging]
    loss = [_first_above(np.arange(len(p.loss) + 1), np.append(p.loss, np.inf), loss_level) for p in diverging]
    return {"drift": [_lead(p.diverged_at, k) for p, k in zip(diverging, drift)],
            "loss": [_lead(p.diverged_at, k) for p, k in zip(diverging, loss)]}


def diverged(loss: float, loss0: float, *, factor: float = DIVERGENCE) -> bool:
    """Divergence, the same for every alarm compared: the loss is not finite or exceeds ``factor · L_0``.

    Examples
    ========
    >>> diverged(5.0, 1.0), diverged(11.0, 1.0), diverged(math.nan, 1.0)
    (False, True, True)
    """
    return not (math.isfinite(loss) and loss <= factor * loss0)


def sweep(
    setup: Setup,
    lrs: Sequence[float],
    *,
    steps: int,
    seed: int = 0,
    factor: float = 30.0,
    window: int = 2,
    loss_factor: float = 3.0,
    laws: Mapping[str, Law] | None = None,
) -> list[SweepPoint]:
    """Train ``setup(seed)`` with SGD at each τ in ``lrs`` for ``steps`` steps, a :class:`DriftAlarm` on its monitor
    (watching ``laws`` where given, as :class:`~conslaw_lite.monitor.Monitor` does).

    A run stops at divergence (:func:`diverged`: L_k non-finite or above ``DIVERGENCE · L_0``); a warning
    counts only if it comes at or before that step. ``loss_factor`` sets the loss alarm compared with
    (``L_k > loss_factor · L_0``).

    Examples
    ========
    >>> from conslaw_lite import mse_loss
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> one = torch.ones(1, 1, dtype=torch.float64)
    >>> toy = lambda seed: (ToyProduct(a=1.0, b=0.5), mse_loss(one, one))
    >>> [(p.lr, p.diverged_at, p.warned_at, p.loss_warned_at) for p in sweep(toy, [0.5, 1.85], steps=60)]
    [(0.5, None, None, None), (1.85, 4, None, 1)]
    """
    if not (loss_factor > 1 and math.isfinite(loss_factor)):
        raise ValueError(f"loss_factor must be a finite number > 1, got {loss_factor}")
    points = []
    for lr in lrs:
        model, loss_fn = setup(seed)
        alarm = DriftAlarm(factor=factor, window=window, callback=lambda *_: None)
        monitor = Monitor(model, alarm=alarm, laws=laws)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        monitor.attach(optimizer)
        diverged_at, loss_warned_at, loss0, losses = None, None, None, []
        for k in range(steps + 1):
            loss = loss_fn(model, k)
            value = float(loss.detach())
            if loss0 is None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"sweep: the loss at the start is {value} at τ = {lr}; divergence is measured "
                                 "against a finite, positive L_0")
            loss0 = value if loss0 is None else loss0
            if loss_warned_at is None and not value <= loss_factor * loss0:
                loss_warned_at = k
            if diverged(value, loss0):
                diverged_at = k
                break
            losses.append(value)
            if k < steps:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        points.append(SweepPoint(lr, diverged_at, alarm.warned_at, loss_warned_at, np.array(losses) / loss0,
                                 *alarm.statistic(monitor)))
    return points
