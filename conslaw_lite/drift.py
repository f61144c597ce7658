"""How far the laws drift under discrete training, and how that scales with τ and k.

For a quadratic law ``h(θ) = θᵀMθ`` and a step ``θ⁺ = θ − τg`` along the
gradient of *any* data loss (full batch or mini-batch), ``⟨∇h, g⟩ = 0`` and

    h(θ⁺) − h(θ) = τ² gᵀMg        (exact; chapter 07 of the book)

so ``|h_k − h_0| ≤ ‖M‖ Σ_i τ_i² ‖g_i‖²``. This module measures, on
:func:`conslaw_lite.flows.train` runs, the drift ``‖h(θ_k) − h(θ_0)‖`` (all
laws of the model together), ``normalized_drift = drift / Σ_i τ_i² ‖g_i‖²``
and the exponents ``slope_lr`` (log drift against log τ at fixed k) and
``slope_steps`` (log drift against log k). A τ at which training diverges is reported
(:class:`DivergedPoint`: the step, the seed, the loss's growth) and left out of the fits;
only a sweep in which every τ diverges is an error (:class:`conslaw_lite.flows.Diverged`). The command line:

    python -m conslaw_lite drift ARCH --lr τ1 τ2 ... --steps K --schedule constant|decay
        --optimizer gd|sgd|momentum|adam [--batch SIZE] [--seeds N] [--device cuda] [--dtype float32] [--json]
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.flows import Diverged, LossFn, Run, mse_loss, train
from conslaw_lite.laws import (
    Group,
    Kind,
    Law,
    Quantity,
    find_blocks,
    groups,
    law_functions,
    registered_form,
    user_stacklevel,
)
from conslaw_lite.monitor import FOUND, epsilon_block, relative_drift
from conslaw_lite.seeding import seeded
from conslaw_lite.watch_conditions import checked_laws

Setup = Callable[[int], tuple[nn.Module, LossFn]]  # seed -> (fresh model, loss); drift and the widget take these


@dataclass
class Trajectory:
    """One training run with every law and control recorded, grouped by block family and kind.

    ``groups`` maps each :class:`~conslaw_lite.laws.Group` to its quantities; ``run.h`` is keyed by their keys.
    """

    run: Run
    groups: dict[Group, list[Quantity]]

    def keys(self, kind: Kind) -> list[str]:
        """Keys of ``run.h`` that are laws (``kind="law"``) or controls (``kind="control"``), group by group."""
        return [q.key for group, qs in self.groups.items() if group.kind == kind for q in qs]

    @property
    def conserved(self) -> list[str]:
        """Keys of ``run.h`` that are conservation laws (not controls)."""
        return self.keys("law")

    @property
    def controls(self) -> list[str]:
        """Keys of ``run.h`` that are controls."""
        return self.keys("control")

    def _require_laws(self) -> list[str]:
        if not self.conserved:
            raise ValueError("this model has no conservation laws; drift needs a block with laws")
        return self.conserved

    def epsilon(self, group: str) -> np.ndarray:
        """ε_block(k) = mean over the laws of the group keyed ``group`` of ``‖h_i(θ_k) − h_i(θ_0)‖ / ‖h_i(θ_0)‖``."""
        found = [qs for g, qs in self.groups.items() if g.key == group]
        if not found:
            raise ValueError(f"no group {group!r}; this run has {[g.key for g in self.groups]}")
        return epsilon_block(np.stack([relative_drift(self.run.h[q.key]) for q in found[0]], axis=-1))

    def drift(self) -> np.ndarray:
        """``‖h(θ_k) − h(θ_0)‖`` over every entry of every conservation law, k = 0..K."""
        return np.sqrt(np.sum([self.run.drift(n) ** 2 for n in self._require_laws()], axis=0))

    def normalized_drift(self) -> np.ndarray:
        """``‖h_k − h_0‖ / Σ_{i<k} τ_i² ‖g_i‖²`` for k = 1..K: constant if the bound is sharp."""
        return self.drift()[1:] / self.run.step_budget()[1:]

    def identity_error(self) -> float:
        """``max_k ‖(h_{k+1} − h_k) − h(δ_k)‖ / ‖h_k‖`` over the laws: round-off when δ = τg (GD, SGD). A law that
        starts at 0 (QK-norm gains of ones: 1 + 1 − 1 − 1) has no relative error, and is left out, as the monitor
        leaves it out of ε; NaN where every law does.

        Examples
        ========
        >>> from conslaw_lite.families.toy.block import ToyProduct
        >>> setup = model_setup(lambda: ToyProduct(a=1.0, b=1.0), (1,), samples=4)
        >>> t = trajectory(setup, 0, lr=0.1, steps=2, laws={"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2})
        >>> t.identity_error()  # a² − b² = 0 at the start
        nan
        """
        errors = []
        for n in self._require_laws():
            h, h_step = self.run.h[n], self.run.h_step[n]
            if not np.linalg.norm(h[0]):
                continue
            scale = np.maximum(np.linalg.norm(h[:-1], axis=1), np.finfo(float).tiny)
            errors.append(np.linalg.norm(np.diff(h, axis=0) - h_step, axis=1) / scale)
        return float(np.max(errors)) if errors else math.nan


def trajectory(
    setup: Setup,
    seed: int,
    *,
    lr: float,
    steps: int,
    schedule: str = "constant",
    optimizer: str = "gd",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    laws: Mapping[str, Law] | None = None,
) -> Trajectory:
    """Train ``setup(seed)`` with :func:`conslaw_lite.flows.train`, recording all laws and controls (``laws``, e.g.
    ``find_laws(model, input_shape).laws``: those instead, as group ``"found"``, without controls).

    The setup builds on the CPU (the seed alone decides θ₀ and the data on every device);
    ``train`` moves model and data to ``device`` in ``dtype`` (``None``: as the setup built them;
    ``device=conslaw_lite.device()`` picks ``cuda`` when present, which pays off for wide blocks,
    not for the few-parameter ones a GPU only slows down), and evaluates the laws in float64.
    A diverging step size raises :class:`conslaw_lite.flows.Diverged` naming the step and τ.

    Examples
    ========
    >>> t = trajectory(arch_setup("toy", samples=1), 0, lr=0.01, steps=4)  # f = a·b·x, one data point
    >>> t.identity_error() < 1e-14, [g.key for g in t.groups], t.controls
    (True, ['toy', 'toy:control'], ['a^2', 'b^2'])
    """
    model, loss = setup(seed)
    grouped = groups(model) if laws is None else {FOUND: _found(laws)}
    laws = {q.key: q.fn for qs in grouped.values() for q in qs}
    try:
        run = train(
            model, loss, lr=lr, steps=steps, schedule=schedule, optimizer=optimizer, laws=laws,
            device=device, dtype=dtype,
        )
    except Diverged as err:
        raise Diverged(err.step, f"{err.reason} (run with τ = {lr:g}, {optimizer}, seed {seed})") from err
    return Trajectory(run, grouped)


def _found(laws: Mapping[str, Law]) -> list[Quantity]:
    return [Quantity(key, key, "law", FOUND.key, key, fn) for key, fn in laws.items()]


def slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The exponent p of a least-squares fit ``y ≈ c·x^p`` (log-log); nan with fewer than two usable points.

    Examples
    ========
    >>> round(slope([1, 2, 4], [3, 12, 48]), 6)
    2.0
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = (x > 0) & (y > 0) & np.isfinite(y)
    if len(np.unique(x[ok])) < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def log_spaced_steps(steps: int, points: int = 16) -> np.ndarray:
    """About ``points`` integers from 1 to ``steps``, evenly spaced in log k (where slopes in k are fitted).

    Examples
    ========
    >>> log_spaced_steps(100, 5).tolist()
    [1, 3, 10, 32, 100]
    """
    return np.unique(np.round(np.geomspace(1, steps, points)).astype(int))


@dataclass
class DriftPoint:
    """The drift at one step size τ, mean (and spread) over seeds, at the last step K."""

    lr: float
    drift: float  # ‖h_K − h_0‖, mean over seeds
    drift_std: float
    epsilon: float  # ε over all conserved laws of the model, mean over seeds
    control_epsilon: float  # the same for the controls (nan if there are none)
    normalized_drift: float  # drift / Σ τ_i² ‖g_i‖², mean over seeds
    step_budget: float  # Σ_{i<K} τ_i² ‖g_i‖², mean over seeds
    slope_steps: float  # exponent of drift ∝ k^p over log-spaced k ≤ K (seed-mean drift)
    identity_error: float  # max over seeds of Trajectory.identity_error
    param_change: float  # ‖θ_K − θ_0‖ / ‖θ_0‖, max over seeds
    loss_start: float
    loss_end: float


@dataclass
class DivergedPoint:
    """A step size τ at which training diverged: the first seed that did, the step, and why (e.g. the loss's growth)."""

    lr: float
    seed: int
    step: int
    reason: str  # the message of :class:`conslaw_lite.flows.Diverged`, e.g. "the loss grew from 0.96 to 8.8e+14; ..."


@dataclass
class DriftReport:
    """What ``drift`` prints: one :class:`DriftPoint` per stable τ, the exponent in τ at the last step fitted over
    them (nan with fewer than two), and one :class:`DivergedPoint` per τ at which some seed diverged."""

    arch: str
    optimizer: str
    schedule: str
    steps: int
    batch: int | None
    seeds: int
    points: list[DriftPoint]
    slope_lr: float
    diverged: list[DivergedPoint] = field(default_factory=list)

    def to_dict(self) -> dict:
        """Plain types, for ``--json``."""
        return asdict(self)


def _epsilon_all(t: Trajectory, kind: Kind) -> float:
    """ε at the last step over every law (or every control) of the model, all block families pooled."""
    names = t.keys(kind)
    return float(epsilon_block(np.array([relative_drift(t.run.h[n])[-1] for n in names]))) if names else np.nan


def measure(
    setup: Setup,
    lrs: Sequence[float],
    *,
    steps: int,
    schedule: str = "constant",
    optimizer: str = "gd",
    seeds: int = 1,
    name: str = "",
    batch: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    laws: Mapping[str, Law] | None = None,
) -> DriftReport:
    """Train ``setup`` for each τ in ``lrs`` and each seed 0..seeds−1; fit the exponents of the drift.

    ``slope_lr`` fits the seed-mean drift at step K against τ; ``slope_steps`` fits
    it against k for each τ. Both are measured, never assumed: they are 2 and 1
    while θ barely moves (the identity), and change once the loss converges.
    ``device``, ``dtype`` and ``laws`` (the laws of a model of one's own, :func:`model_setup`) go to
    :func:`trajectory`.

    A τ diverges when any of its seeds does: it goes to ``diverged`` (the first such seed, the step,
    the loss's growth), not to ``points``, and ``slope_lr`` fits the stable τ alone. When every τ
    diverges there is nothing to report: :class:`conslaw_lite.flows.Diverged` names the step (of the
    smallest τ), as :func:`trajectory` does.

    Examples
    ========
    >>> report = measure(arch_setup("toy", samples=1), [0.001, 0.002, 0.004], steps=4)  # θ moves < 1 %
    >>> round(report.slope_lr, 1), round(report.points[0].slope_steps, 1)
    (2.0, 1.0)
    >>> report = measure(arch_setup("toy", samples=1), [0.001, 0.002, 1e6], steps=4)
    >>> [p.lr for p in report.points], [(d.lr, d.seed, d.step) for d in report.diverged], round(report.slope_lr, 1)
    ([0.001, 0.002], [(1000000.0, 0, 1)], 2.0)
    >>> measure(arch_setup("toy", samples=1), [1e6], steps=4)
    Traceback (most recent call last):
    ...
    conslaw_lite.monitor.Diverged: training diverged at step 1: the loss grew from ...; the step size τ = 1e+06 ...
    """
    if not lrs:
        raise ValueError("give at least one step size (--lr)")
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    model = setup(0)[0]
    if laws is not None:  # a law that reads a parameter the model lacks: said before training
        laws = checked_laws(laws, model)
    elif not find_blocks(model):
        raise ValueError(
            f"{name or 'this model'} holds no registered block, so its laws are not known here: give laws= (e.g. "
            "find_laws(model, input_shape).laws)"
        )
    elif not law_functions(model):  # fail before training, naming the block
        raise ValueError(f"{name or 'this model'} has no conservation laws; drift needs a block with laws")
    points, diverged = [], []
    for lr in lrs:
        runs = []
        for s in range(seeds):
            try:
                runs.append(trajectory(
                    setup, s, lr=lr, steps=steps, schedule=schedule, optimizer=optimizer, device=device, dtype=dtype,
                    laws=laws,
                ))
            except Diverged as err:
                diverged.append(DivergedPoint(float(lr), s, err.step, err.reason))
                break
        else:  # every seed trained to step K
            points.append(_point(float(lr), runs, log_spaced_steps(steps)))
    if not points:
        first = min(diverged, key=lambda d: d.lr)
        others = "" if len(diverged) == 1 else "; every τ diverged: " + ", ".join(
            f"τ = {d.lr:g} at step {d.step} (seed {d.seed})" for d in diverged
        )
        raise Diverged(first.step, first.reason + others)
    if diverged:
        which = ", ".join(f"τ = {d.lr:g} at step {d.step} (seed {d.seed})" for d in diverged)
        fit = f"slope_lr fits the {len(points)} stable ones" if len(points) > 1 else "slope_lr needs 2 stable ones"
        message = f"{len(diverged)} of {len(lrs)} step sizes diverged: {which}; {fit}"
        warnings.warn(message, stacklevel=user_stacklevel())
    slope_lr = slope([p.lr for p in points], [p.drift for p in points])
    return DriftReport(name, optimizer, schedule, steps, batch, seeds, points, slope_lr, diverged)


def _point(lr: float, runs: list[Trajectory], ks: np.ndarray) -> DriftPoint:
    """The :class:`DriftPoint` of the runs of one τ (one per seed); ``slope_steps`` is fitted at the steps ``ks``."""
    drifts = np.stack([t.drift() for t in runs])  # (seeds, K+1)
    mean_drift = drifts.mean(axis=0)
    return DriftPoint(
        lr=lr,
        drift=float(mean_drift[-1]),
        drift_std=float(drifts[:, -1].std()),
        epsilon=float(np.mean([_epsilon_all(t, "law") for t in runs])),
        control_epsilon=float(np.mean([_epsilon_all(t, "control") for t in runs])),
        normalized_drift=float(np.mean([t.normalized_drift()[-1] for t in runs])),
        step_budget=float(np.mean([t.run.step_budget()[-1] for t in runs])),
        slope_steps=slope(ks, mean_drift[ks]),
        identity_error=max((e for t in runs if not math.isnan(e := t.identity_error())), default=math.nan),
        param_change=max(t.run.param_change for t in runs),
        loss_start=float(np.mean([t.run.loss[0] for t in runs])),
        loss_end=float(np.mean([t.run.loss[-1] for t in runs])),
    )


def batch_size(optimizer: str, batch: int | None, samples: int) -> int | None:
    """The mini-batch size an optimizer trains with: ``batch``, or samples/8 for ``sgd`` (None: full batch).

    ``ValueError`` naming ``--samples`` or ``--batch`` when they do not fit together or with ``gd``.

    Examples
    ========
    >>> batch_size("sgd", None, 64), batch_size("gd", None, 64)
    (8, None)
    >>> batch_size("gd", 4, 64)
    Traceback (most recent call last):
    ...
    ValueError: gd is full batch; use --optimizer sgd for mini-batches of 4
    """
    if samples < 1:
        raise ValueError(f"--samples must be at least 1 (the number of data points), got {samples}")
    if batch is not None and not 1 <= batch <= samples:
        raise ValueError(f"--batch must be in [1, --samples = {samples}], got {batch}")
    if optimizer == "gd" and batch is not None and batch != samples:
        raise ValueError(f"gd is full batch; use --optimizer sgd for mini-batches of {batch}")
    if optimizer == "sgd" and batch is None:
        return max(1, samples // 8)
    return batch


def arch_setup(arch: str, options: ArchOptions | None = None, *, samples: int = 64, batch: int | None = None) -> Setup:
    """Random regression on a CLI architecture: x ~ N(0, 1) of ``Built.input_shape``, y ~ N(0, 1), MSE loss.

    The model, data and (for ``batch``) the mini-batch order all come from the seed; float64 throughout.

    Examples
    ========
    >>> model, loss = arch_setup("swiglu")(0)
    >>> float(loss(model, 0).detach()) > 0
    True
    """
    spec = get_arch(arch)
    options = options or ArchOptions()

    def setup(seed: int) -> tuple[nn.Module, LossFn]:
        built = spec.build(ArchOptions(**{**asdict(options), "seed": seed}))
        return _regression(built.model.double(), built.input_shape, None, samples, batch, seed)

    return setup


def model_setup(
    build: Callable[[], nn.Module],
    input_shape: tuple[int, ...] | None = None,
    *,
    inputs: torch.Tensor | None = None,
    samples: int = 64,
    batch: int | None = None,
) -> Setup:
    """Random regression on a model of one's own: ``build()`` with torch's generator seeded by the seed (θ₀ from the
    seed, unless ``build`` seeds itself), in float64 (a module a family gives a form of one input, as the counter
    evaluates it: :func:`~conslaw_lite.laws.registered_form`); x ~ N(0, 1) of ``input_shape``, or the first
    ``samples`` of ``inputs`` (token ids, say) for every seed; y ~ N(0, 1) of the output's shape; MSE loss.

    Its laws are not registered: give them to :func:`measure` (``laws=``), e.g. ``find_laws(build(), shape).laws``.

    Examples
    ========
    >>> build = lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> model, loss = model_setup(build, (3,), samples=8)(0)
    >>> next(model.parameters()).dtype, float(loss(model, 0).detach()) > 0
    (torch.float64, True)
    """
    if (input_shape is None) == (inputs is None):
        raise ValueError("model_setup needs input_shape (one input, without the batch dimension) or inputs, not both")
    if inputs is not None and len(inputs) < samples:
        raise ValueError(f"inputs has {len(inputs)} samples, fewer than samples = {samples}")

    def setup(seed: int) -> tuple[nn.Module, LossFn]:
        with seeded(seed):
            model = build()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model_setup: build() returned {type(model).__name__}, not an nn.Module")
        form = registered_form(model)  # transformers' attention takes positions too: trained as the counter calls it
        return _regression(model.double() if form is None else form, input_shape, inputs, samples, batch, seed)

    return setup


def _regression(model: nn.Module, input_shape, inputs, samples: int, batch: int | None, seed: int):
    """``(model, MSE loss)`` on x ~ N(0, 1) of ``input_shape`` (or the first ``samples`` of ``inputs``) and targets
    y ~ N(0, 1) of the output's shape, both drawn from the seed's generator."""
    g = torch.Generator().manual_seed(seed)
    if inputs is None:
        x = torch.randn(samples, *input_shape, generator=g, dtype=torch.float64)
    else:
        x = inputs[:samples].double() if inputs.is_floating_point() else inputs[:samples]
    with torch.no_grad():
        out = model(x)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the model returns {type(out).__name__}; the MSE loss needs one tensor")
    y = torch.randn(out.shape, generator=g, dtype=torch.float64)
    return model, mse_loss(x, y, batch_size=batch, seed=seed)


def arch_runs(arch: str, options: ArchOptions | None = None, *, samples: int = 64) -> Callable[[str], Setup]:
    """``optimizer -> Setup`` for an architecture, batching as the CLI does: sgd on mini-batches of samples/8, the rest
    on the full batch (the block of a :func:`conslaw_lite.grids.drift_grid`).

    Examples
    ========
    >>> runs = arch_runs("toy", samples=16)
    >>> model, loss = runs("sgd")(0)  # one mini-batch of 2 per step
    >>> float(loss(model, 0).detach()) > 0
    True
    """

    def setups(optimizer: str) -> Setup:
        return arch_setup(arch, options, samples=samples, batch=batch_size(optimizer, None, samples))

    return setups











