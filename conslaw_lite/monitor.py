"""Watch the conservation laws while any model trains: ε_block after every step.

A :class:`Monitor` finds every block of a model whose laws are known
(:func:`conslaw_lite.laws.find_blocks`), records h(θ₀), and after each step
(or every ``every`` steps) records, per block kind and for the controls,
The paper's metric (chapter 08)

    ε_block(k) = (1/N) Σ_i ‖h_i(θ_k) − h_i(θ_0)‖ / ‖h_i(θ_0)‖

over the N laws of that kind (all blocks of one kind pooled). Each law function of
the registry is one h_i, measured in the Frobenius norm: a head's k×k matrix
QᵀQ − KᵀK, or the vector of a SwiGLU's r unit laws. A law with h_i(θ₀) = 0 has
no relative drift; it is left out of the mean (NaN in :meth:`Monitor.relative_drift`), named when the monitor
starts, and followed by :meth:`Monitor.absolute_drift` (Qwen3's ``|γ_q|² − |γ_k|²``: both gains start at 1). It is
cheap: only the parameters some law reads are copied, in float64, no autograd graph is built, the per-head laws of an
attention block, and each law with its control, are evaluated in one batched call (the block's
:class:`~conslaw_lite.laws.Batch`), the repeated layers of a deep model in one call on their stacked parameters
(:mod:`conslaw_lite.law_stacks`), the records of a small model up to 6 at a time (:mod:`conslaw_lite.snapshots`: θ
is copied at each record, the laws evaluated once for all of them), and all laws are compared with h(θ₀) as one array.

**Any module.** The parts of a model outside the registered blocks (a plain MLP, a CNN, a block of one's
own) get their laws found by :func:`conslaw_lite.own_laws.own_laws` when ``input_shape`` or ``inputs`` says
what the model takes: they are searched once, at the start, printed part by part with the time it took, and
watched as the group ``"found"``.

**Train mode.** A block's laws come from a symmetry of its own parameters that leaves its
output unchanged for every input, so a BatchNorm or a Dropout *outside* the block, in train
mode, keeps them (measured: a SwiGLU after or before a train-mode BatchNorm1d drifts by
τ²-terms only, 3.7 times less at a quarter of the step for the same τk). Two cases do not,
and the monitor refuses them (``ValueError`` naming the layer) when the model is in train mode
at the start, and warns once if it is switched to train mode later:

* a mode-dependent layer inside a block whose symmetry it breaks: a BatchNorm inside any block, a
  Dropout on the hidden units of a linear block (``AᵀA − BBᵀ`` needs every rotation of the hidden
  units, a dropout mask only commutes with their rescalings; measured ε = 0.57 after 200 steps, the
  same at a quarter of the step);
* ``laws`` given with any BatchNorm or Dropout (p > 0) in the model: such laws are those
  :func:`~conslaw_lite.find_laws.find_laws` found for the eval-mode function (it refuses train mode),
  and train-mode training keeps others (a BatchNorm makes the rows before it scale-invariant). Given
  ``input_shape`` or ``inputs``, those that hold under a Dropout's masks are kept and the others named.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from conslaw_lite.attached_optimizers import AttachedOptimizers
from conslaw_lite.config import device as default_device
from conslaw_lite.config import model_device
from conslaw_lite.counting.training_field import gradient_hooks
from conslaw_lite.gradient_check import GradientCheck
from conslaw_lite.law_stacks import Source, stack_sources
from conslaw_lite.law_values import LawValues
from conslaw_lite.laws import Group, Law, find_blocks, groups
from conslaw_lite.outside_reads import read_outside
from conslaw_lite.own_laws import SEARCH_SECONDS, OwnLaws, missing_input_message, own_laws, uncovered
from conslaw_lite.snapshots import Snapshots, slots_for
from conslaw_lite.theta_edits import EditCheck
from conslaw_lite.user_inputs import example_inputs
from conslaw_lite.watch_conditions import (
    check_every,
    check_watchable,
    conflict_message,
    laws_under_masks,
    listed,
    mode_conflicts,
    refuse_calls,
    without_frozen,
)
from conslaw_lite.wrapped_modules import unwrapped

FOUND = Group("found", "law")  # the group of laws given to the Monitor


def _sources(model: nn.Module, laws: dict[str, Law]) -> list[Source]:
    """Every law of ``laws`` (full names, in their flat order) once: in a batch where a block has one, else alone."""
    position = {name: i for i, name in enumerate(laws)}
    sources: list[Source] = []
    for block in find_blocks(model):  # none for laws given to the Monitor (find_laws' on a module of one's own)
        for batch in block.batches:
            names = [block.key(name) for name in batch.names]
            if all(name in position for name in names):
                sources.append((batch.fn, [position[name] for name in names]))
    batched = {i for _, index in sources for i in index}
    return sources + [(fn, [i]) for i, fn in enumerate(laws.values()) if i not in batched]


def relative_drift(h: np.ndarray) -> np.ndarray:
    """``‖h_k − h_0‖ / ‖h_0‖`` for one law recorded as ``h[k] = h(θ_k)`` (entries flattened); NaN if h_0 = 0.

    Examples
    ========
    >>> relative_drift(np.array([[3.0, 4.0], [3.0, 4.5], [0.0, 4.0]])).tolist()
    [0.0, 0.1, 0.6]
    """
    h = np.asarray(h, dtype=np.float64).reshape(len(h), -1)
    norm0 = np.linalg.norm(h[0])
    return np.linalg.norm(h - h[0], axis=1) / (norm0 if norm0 > 0 else np.nan)


def epsilon_block(relative: np.ndarray) -> np.ndarray:
    """ε_block: the mean over the last axis (the laws) of relative drifts, leaving out NaN (laws starting at 0).

    Examples
    ========
    >>> epsilon_block(np.array([[0.1, 0.3, np.nan], [np.nan, np.nan, np.nan]])).tolist()
    [0.2, nan]
    """
    finite = np.isfinite(relative)
    total, count = np.where(finite, relative, 0.0).sum(-1), finite.sum(-1)
    return np.divide(total, count, out=np.full(np.shape(total), np.nan), where=count > 0)


class Diverged(RuntimeError):
    """Training left the finite numbers (or blew up) at ``step``: the trainers of :mod:`conslaw_lite.flows` and
    :meth:`Monitor.flush` stop with it.

    Examples
    ========
    >>> print(Diverged(7, "loss is NaN"))
    training diverged at step 7: loss is NaN
    """

    def __init__(self, step: int, reason: str) -> None:
        super().__init__(f"training diverged at step {step}: {reason}")
        self.step = step
        self.reason = reason


class Monitor:
    """ε_block per block kind (and per kind of control) along any training loop.

    Call :meth:`step` after each ``optimizer.step()``, or :meth:`attach` the monitor to a ``torch.optim`` optimizer
    once. Each :class:`~conslaw_lite.laws.Group` (the laws, or the controls, of one block family) is asked for by its
    key: ``"swiglu"``, ``"mha"``, ... for the laws and ``"swiglu:control"``, ... for the controls. Given ``laws``
    (``{key: h}``, e.g. :func:`conslaw_lite.find_laws.find_laws`' ``.laws`` for a module of one's own) it watches
    those instead, as one group keyed ``"found"``. Given ``input_shape`` (or ``inputs``), the laws of the parts outside
    the registered blocks are found and watched as group ``"found"`` (:attr:`own` holds what was searched).
    The laws of repeated layers are evaluated in one call on their stacked parameters; :attr:`stacked_layers`
    counts the per-layer calls that this replaced (0: no two layers alike). The records of a small model are
    evaluated :attr:`evaluate_every` at a time, when that many are pending or a result is read. What breaks the laws
    is named once: an optimizer's settings (:mod:`conslaw_lite.attached_optimizers`), a gradient in ``.grad`` that is
    not the loss's (:mod:`conslaw_lite.gradient_check`), θ written between two steps (:mod:`conslaw_lite.theta_edits`).

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> monitor = Monitor(model)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.001)
    >>> handle = monitor.attach(opt)
    >>> for _ in range(3):
    ...     opt.zero_grad(); (model(torch.ones(1, 1, dtype=torch.float64)) ** 2).sum().backward(); opt.step()
    >>> monitor.steps.tolist(), [group.key for group in monitor.groups]
    ([0, 1, 2, 3], ['toy', 'toy:control'])
    >>> monitor.epsilon("toy").round(7).tolist()  # τ² g_k^T M g_k per step, relative to a² − b² = 3
    [0.0, 1.6e-05, 3.17e-05, 4.71e-05]
    >>> bool(monitor.epsilon("toy:control")[-1] > 100 * monitor.epsilon("toy")[-1])  # a², b² move at first order
    True
    """

    def __init__(
        self,
        model: nn.Module,
        every: int = 1,
        device: torch.device | str | None = None,
        laws: Mapping[str, Law] | None = None,
        input_shape: tuple[int, ...] | None = None,
        inputs: torch.Tensor | None = None,
        alarm: Callable[[Monitor], object] | None = None,
        evaluate_every: int | None = None,
        search_seconds: float = SEARCH_SECONDS,
    ) -> None:
        """Record h(θ₀) of every law of ``model``, in float64 on ``device`` (default: the model's own device).

        A GPU's float64 is slow on consumer cards; ``device="cpu"`` evaluates the laws there instead.
        ``laws`` (e.g. ``find_laws(model, ...).laws``) are watched instead of the registry's, as group ``"found"``;
        with dropouts in train mode, those that hold under their masks on ``input_shape``/``inputs`` (else refused).
        Parts of ``model`` outside every registered block get their laws found (:mod:`conslaw_lite.own_laws`,
        printed once, in :attr:`own`; watched as group ``"found"``) when ``input_shape`` (one input, no batch
        dimension) or ``inputs`` (a batch) says what the model takes; their search stops after ``search_seconds``.
        Searched on fresh inputs like these (all token ids, for ids), they hold on every batch; ``count_laws(model,
        inputs=x)`` counts those of the function on ``x`` alone (more, where x is a few samples).
        ``alarm`` (e.g. :class:`conslaw_lite.early_warning.DriftAlarm`) is called with the monitor after each record.
        ``evaluate_every`` records are evaluated at once (:mod:`conslaw_lite.snapshots`; default: as many as fit in
        16 MiB of snapshots, at most 6; one with an ``alarm``, which reads every record as it comes). Any result
        read in between evaluates the records pending first: the values do not depend on it, only the cost.
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"Monitor watches an nn.Module, got {type(model).__name__}")
        model = unwrapped(model)  # torch.compile's: the same parameters, named as the user wrote them
        check_every(every)
        if evaluate_every is not None:
            check_every(evaluate_every)
        check_watchable(model)
        hook = gradient_hooks(model)
        if hook:  # the laws are those of the loss's gradient flow: watched, they measure how far the hook moves them
            warnings.warn(f"Monitor: {hook}: training does not step along the loss's gradient, and the laws "
                          "watched drift at first order in τ", stacklevel=2)  # fmt: skip
        self._hooked = bool(hook)
        self._conflicts = mode_conflicts(model, laws is not None)
        if laws is not None:  # e.g. find_laws(model, ...).laws: one group, "found", instead of the registry's
            laws, self._conflicts = laws_under_masks(model, laws, self._conflicts, input_shape, inputs)
        for name, layer, why in self._conflicts:
            if layer.training:
                raise ValueError(conflict_message(name, layer, why))
        device = model_device(model) if device is None else default_device(device)
        self.every = every
        self._count = 0
        self.own: OwnLaws | None = None  # the parts outside the registered blocks and the laws found for them
        self._alarm = alarm
        given = laws is not None  # the user's own laws, which the gradient check cannot tell from non-laws
        if given:
            grouped = {FOUND: laws}
        else:
            grouped = self._registered_and_own(model, input_shape, inputs, search_seconds)
        grouped = without_frozen(grouped, model)
        if not grouped:
            raise ValueError(
                f"Monitor: no conservation law to watch in {type(model).__name__}: every law reads a frozen parameter"
            )
        # Group g owns laws bounds[g]:bounds[g+1] of the one flat vector.
        self._groups = list(grouped)
        self._keys = [group.key for group in self._groups]
        self._bounds = np.cumsum([0, *(len(fns) for fns in grouped.values())])
        named = dict(model.named_parameters())
        start = {n: p.detach().to(device, torch.float64) for n, p in named.items()}
        laws = {key: fn for fns in grouped.values() for key, fn in fns.items()}  # keys are unique
        with torch.no_grad():
            plan = stack_sources(_sources(model, laws), start)  # repeated layers: one call for all of them
            self._laws = LawValues.start(plan.sources, plan.params)
            read = sorted(plan.read)
            slots = 1 if alarm is not None else evaluate_every or slots_for(plan)
            self._snapshots = Snapshots(plan, read, slots)
        self.stacked_layers = plan.layers
        self.evaluate_every = slots
        self._model, self._read = model, read
        self._theta = [named[n] for n in read]  # copied into a snapshot at each record
        self._links = _links(model, read)
        self._optimizers = AttachedOptimizers(self.step, dict(zip(read, self._theta, strict=True)))
        judged = np.array([group.kind == "law" for group, fns in grouped.items() for _ in fns])
        self._gradients = GradientCheck(plan, read, self._theta, self._laws.largest, list(laws), judged, given)
        self._edits = EditCheck(plan, read, self._theta, self._laws.norms, list(laws), judged)  # θ written by hand
        self._steps = [0]
        self._drift = list(self._laws.drift(self._laws.h0[None]))  # per record: each law's ‖h_i(θ_k) − h_i(θ₀)‖
        self._say_zero_laws(list(laws))

    def _registered_and_own(self, model: nn.Module, input_shape, inputs, seconds) -> dict[Group, dict[str, Law]]:
        """The registry's laws by group, and (group ``"found"``) those found for the parts outside its blocks."""
        blocks = find_blocks(model)
        refuse_calls(model, blocks, self)  # a call that adds a loss term breaking a block's laws (a router's)
        registered = groups(model).items() if blocks else ()
        known = input_shape is not None or inputs is not None
        example = example_inputs(model, input_shape, inputs) if known and blocks else None
        outside = read_outside(model, [b.path for b in blocks], example)
        dropped = set()
        for block in [b for b in blocks if b.path in outside]:
            print(
                f"Monitor: the laws of `{block.path or 'the model'}` ({block.kind}) are not watched: "
                f"{outside[block.path]}, and then they are not laws of the model"
            )
            dropped |= {block.key(name) for name in (*block.laws, *block.controls)}
        grouped = {group: {q.key: q.fn for q in qs if q.key not in dropped} for group, qs in registered}
        grouped = {group: fns for group, fns in grouped.items() if fns}
        self.own = own_laws(model, input_shape, inputs, seconds=seconds) if uncovered(model) else None
        if self.own is not None and not self.own.searched and not grouped:
            raise ValueError(missing_input_message(model))
        if self.own is not None and not self.own.searched:
            parts = ", ".join(f"`{part.path or '(the model)'}`" for part in self.own.parts)
            print(f"Monitor: the registered blocks' laws only; {parts} outside them not searched (give input_shape= "
                  "or inputs= to find their laws too)")
        if self.own is not None and self.own.laws:
            grouped[FOUND] = self.own.laws
        if not grouped:
            why = self.own or "it has no parameters to train"
            raise ValueError(f"Monitor: no conservation law to watch in {type(model).__name__}; {why}")
        if self.own is not None and self.own.searched:
            print(f"Monitor: {self.own}")
            self._conflicts += [c for c in mode_conflicts(model, True) if self.own.breaks_in_train(c[0], c[1])]
            for name, layer, why in self._conflicts:
                if layer.training:
                    raise ValueError(conflict_message(name, layer, why))
        return grouped

    @property
    def groups(self) -> list[Group]:
        """The groups: each block family's laws, then each family's controls."""
        return list(self._groups)

    @property
    def steps(self) -> np.ndarray:
        """The step indices k at which ε was recorded (0 = the start)."""
        return np.array(self._steps)

    def step(self) -> bool:
        """Count one optimizer step; every ``every`` steps record each law's relative drift. True if it recorded."""
        self._optimizers.refuse_by_hand()
        self._count += 1
        if (why := self._gradients.step()) and not (self._hooked and self._gradients.edited):  # hook named: once
            warnings.warn(f"Monitor: {why}", stacklevel=2)
        if self._count % self.every:
            return False
        for name, layer, why in self._conflicts:  # switched to train mode after the start: say so, once
            if layer.training:
                warnings.warn(conflict_message(name, layer, why), stacklevel=2)
                self._conflicts = []
                break
        with torch.inference_mode():  # no version counters, no views tracked
            self._snapshots.take(self._theta)
        self._steps.append(self._count)
        if self._snapshots.full:
            self.flush()
        if self._alarm is not None:
            self._alarm(self)
        return True

    def flush(self) -> None:
        """Evaluate the laws at the records taken since the last evaluation (reading any result does it first).

        :class:`Diverged`, naming the step, where a law is NaN or infinite: θ left the finite
        numbers (a step size too large, a NaN in the loss), and no drift can be measured from there on.
        """
        if self._snapshots.pending:
            self._check_parameters()
            with torch.inference_mode():
                h = self._snapshots.evaluate().cpu().numpy()
            bad = ~np.isfinite(h).all(axis=1)
            if bad.any():
                index = len(self._drift) + int(np.argmax(bad))
                step, before = self._steps[index], self._steps[index - 1]
                why = "the laws are NaN or infinite there (a step size too large, or a NaN in the loss)"
                if step - before > 1:  # every > 1: it happened after step `before`, when they were finite
                    why += f", first recorded there: records are every {self.every} steps, at step {before} finite"
                raise Diverged(step, why)
            self._drift.extend(self._laws.drift(h))

    def _check_parameters(self) -> None:
        """A ``ValueError`` naming the parameters the model no longer holds: the records read the tensors it had."""
        if all(held.get(key) is value for held, key, value in self._links):
            return
        now = dict(self._model.named_parameters())
        replaced = [name for name, p in zip(self._read, self._theta) if now.get(name) is not p]
        if replaced:
            verb = "is" if len(replaced) == 1 else "are"
            raise ValueError(
                f"Monitor: {listed([repr(name) for name in replaced], 3)} of the model {verb} no longer the parameter "
                "the monitor started with (replaced by a new nn.Parameter, load_state_dict(assign=True), deleted, or "
                "renamed by a layer inserted or wrapped around it), so its records read the old tensor: start a new "
                "Monitor after changing the model's parameters"
            )

    def judge_optimizers(self, *optimizers: torch.optim.Optimizer) -> None:
        """Warn why the watched laws are not those of training with ``optimizers``
        (:func:`~conslaw_lite.attached_optimizers.training_warnings`), once for each reason, with the parameters none
        of them updates: a trainer's callback calls it at the start (later steps are judged as they come)."""
        self._optimizers.judge(optimizers)

    def gradients_in_16_bits(self) -> None:
        """Training computes the gradient in 16 bits (autocast), clipped or accumulated: its round-off reaches the
        tolerance of the check of ``.grad`` (:mod:`conslaw_lite.gradient_check`), which stops (the callbacks' case)."""
        self._gradients.rounded = True

    def attach(self, optimizer: torch.optim.Optimizer) -> torch.utils.hooks.RemovableHandle:
        """Call :meth:`step` once every optimizer attached has stepped (one per layer: after all of them); returns the
        handle (``.remove()`` detaches).

        Attaching twice to one optimizer is an error (each step would count twice). An optimizer that does not
        follow the gradient flow the laws belong to (weight decay, Adam's per-coordinate steps) gets a warning: ε
        then measures how far it moves the laws, at first order in τ
        (:class:`~conslaw_lite.attached_optimizers.AttachedOptimizers`).
        """
        return self._optimizers.attach(optimizer)

    def relative_drift(self, key: str) -> np.ndarray:
        """``‖h_i(θ_k) − h_i(θ_0)‖ / ‖h_i(θ_0)‖`` per record and law of the group ``key``, shape (records, N); NaN for a
        law with ``h_i(θ_0) = 0`` (:meth:`absolute_drift` follows it)."""
        return self.absolute_drift(key) / self._group(key, self._laws.norm0)

    def absolute_drift(self, key: str) -> np.ndarray:
        """``‖h_i(θ_k) − h_i(θ_0)‖`` per record and law of the group ``key``, shape (records, N): what a law that starts
        at 0 (Qwen3's ``|γ_q|² − |γ_k|²``, both gains initialised to 1) has instead of a relative drift.

        Examples
        ========
        >>> import torch
        >>> from conslaw_lite.families.toy import ToyProduct
        >>> monitor = Monitor(ToyProduct(a=1.0, b=1.0))  # a² − b² = 0 at θ₀
        Monitor: 1 law starts at 0 (no relative drift, left out of ε; absolute_drift(key) follows it): a^2-b^2
        >>> with torch.no_grad(): _ = monitor._model.a.add_(0.1)
        >>> _ = monitor.step()
        >>> monitor.absolute_drift("toy").round(4).tolist(), monitor.epsilon("toy").tolist()
        ([[0.0], [0.21]], [nan, nan])
        """
        self.flush()
        return self._group(key, np.stack(self._drift))

    def _say_zero_laws(self, names: list[str]) -> None:
        """Name, once, the laws that start at 0: ε leaves them out, and a group of only such laws has ε NaN."""
        zero = [name for name, norm in zip(names, self._laws.norm0, strict=True) if np.isnan(norm)]
        if zero:
            law = "law starts" if len(zero) == 1 else "laws start"
            it = "it" if len(zero) == 1 else "them"
            print(f"Monitor: {len(zero)} {law} at 0 (no relative drift, left out of ε; absolute_drift(key) follows "
                  f"{it}): {listed(zero, 3)}")  # fmt: skip

    def last_relative_drift(self, key: str) -> np.ndarray:
        """The latest record's ``‖h_i(θ_k) − h_i(θ_0)‖ / ‖h_i(θ_0)‖`` per law of group ``key``, shape (N,).

        Cheap to call every step (no stacking of the history).

        Examples
        ========
        >>> import torch
        >>> from conslaw_lite.families.toy import ToyProduct
        >>> model = ToyProduct(a=2.0, b=1.0)
        >>> monitor = Monitor(model)
        >>> with torch.no_grad(): _ = model.a.add_(0.1)
        >>> _ = monitor.step()
        >>> monitor.last_relative_drift("toy").round(4).tolist()  # |2.1² − 2²| / 3
        [0.1367]
        """
        self.flush()
        return self._group(key, self._drift[-1] / self._laws.norm0)

    def last_epsilon(self) -> dict[str, float]:
        """``{group key: ε_block}`` at the latest record, for every group (laws and controls); NaN for a group whose
        laws all start at 0."""
        return {group.key: float(epsilon_block(self.last_relative_drift(group.key))) for group in self.groups}

    def epsilon(self, key: str) -> np.ndarray:
        """ε_block of group ``key`` per record: the mean of :meth:`relative_drift` over the laws."""
        return epsilon_block(self.relative_drift(key))

    def history(self) -> dict[str, np.ndarray]:
        """``{"step": k, group key: ε_block, ...}`` as plain arrays, ready to plot or save."""
        return {"step": self.steps, **{key: self.epsilon(key) for key in self._keys}}

    def _group(self, key: str, relative: np.ndarray) -> np.ndarray:
        """The columns (last axis) of ``relative`` that belong to group ``key``."""
        if key not in self._keys:
            raise ValueError(f"no group {key!r}; this model has {self._keys}")
        g = self._keys.index(key)
        return relative[..., self._bounds[g] : self._bounds[g + 1]]


def laws_against_controls(monitor: Monitor) -> dict[str, dict[str, float]]:
    """ε_block at the latest record, per block family: ``{family: {"laws": ε, "controls": ε}}`` (NaN: no controls).

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy import ToyProduct
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> monitor = Monitor(model)
    >>> with torch.no_grad(): _ = model.a.add_(0.1)
    >>> _ = monitor.step()
    >>> {family: {k: round(v, 4) for k, v in eps.items()} for family, eps in laws_against_controls(monitor).items()}
    {'toy': {'laws': 0.1367, 'controls': 0.0513}}
    """
    last = monitor.last_epsilon()
    return {
        group.block: {"laws": last[group.key], "controls": last.get(f"{group.key}:control", float("nan"))}
        for group in monitor.groups
        if group.kind == "law"
    }


@dataclass(frozen=True)
class WatchedRun:
    """What :func:`train_watched` recorded: each step's loss, the monitor, and the seconds of each part of a step."""

    losses: np.ndarray  # (steps,) the loss of step k's batch, at θ_k (before the step)
    monitor: Monitor
    step_seconds: np.ndarray  # (steps,) forward, backward and optimizer.step()
    monitor_seconds: np.ndarray  # (steps,) monitor.step()

    @property
    def overhead(self) -> float:
        """What watching every step costs: the monitor's seconds over the training steps' seconds, in all (a
        median would miss the records evaluated together, see :mod:`conslaw_lite.snapshots`)."""
        return float(self.monitor_seconds.sum() / self.step_seconds.sum())


def _links(model: nn.Module, names: list[str]) -> list[tuple[dict, str, object]]:
    """Every link from ``model`` down to the parameters ``names`` (the dict holding it, key, what it holds then): the
    model holds those parameters still while every dict holds the same object, a few dict lookups at each evaluation
    (walking ``named_parameters()`` took 0.2 ms, a sixth of the evaluation on a two-layer Qwen3)."""
    links = {}
    for name in names:
        *path, leaf = name.split(".")
        module = model
        for part in path:
            child = module._modules[part]
            links[id(module._modules), part] = (module._modules, part, child)
            module = child
        links[id(module._parameters), leaf] = (module._parameters, leaf, module._parameters[leaf])
    return list(links.values())


def train_watched(
    model: nn.Module,
    monitor: Monitor,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[nn.Module, int], torch.Tensor],
    steps: int,
) -> WatchedRun:
    """Take ``steps`` steps of ``optimizer`` on ``loss_fn(model, k)`` (step k's batch), ``monitor`` after each.

    The training step (forward, backward, ``optimizer.step()``) and ``monitor.step()`` are timed apart, the
    device synchronised before each clock reading, so :attr:`WatchedRun.overhead` is the monitor's share (the last
    step's includes evaluating the records still pending).

    Examples
    ========
    >>> torch.manual_seed(0) and None
    >>> mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    >>> x, y = torch.randn(16, 3, dtype=torch.float64), torch.randn(16, 2, dtype=torch.float64)
    >>> monitor = Monitor(mlp, input_shape=(3,))
    Monitor: searched 1 part outside the registered blocks for their laws, in ... s:
      `(the model)` (Linear-ReLU-Linear, 26 parameters): 4 quadratic laws found; N = 4: the list is complete
    >>> run = train_watched(mlp, monitor, torch.optim.SGD(mlp.parameters(), lr=0.01),
    ...                     lambda model, k: ((model(x) - y) ** 2).mean(), steps=5)
    >>> run.losses.shape, run.monitor.steps.tolist(), bool(run.losses[-1] < run.losses[0])
    ((5,), [0, 1, 2, 3, 4, 5], True)
    >>> bool(run.monitor.epsilon("found")[-1] < 1e-3), run.overhead > 0
    (True, True)
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    where = model_device(model)
    sync = torch.cuda.synchronize if where is not None and where.type == "cuda" else lambda: None
    losses, step_s, monitor_s = [], [], []
    for k in range(steps):
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        (loss := loss_fn(model, k)).backward()
        optimizer.step()
        sync()
        t1 = time.perf_counter()
        monitor.step()
        if k == steps - 1:
            monitor.flush()
        sync()
        t2 = time.perf_counter()
        losses.append(float(loss.detach()))
        step_s.append(t1 - t0)
        monitor_s.append(t2 - t1)
    return WatchedRun(np.array(losses), monitor, np.array(step_s), np.array(monitor_s))
