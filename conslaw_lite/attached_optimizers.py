"""The optimizers a :class:`~conslaw_lite.monitor.Monitor` is attached to: one record per training step, however
many optimizers take it, and what their settings do to the laws.

A training step is taken when every attached optimizer has stepped. A model trained by one optimizer per layer was
recorded between them too, with one layer moved and the other not: there a law that couples the layers
(``‖W1[i, :]‖² − ‖W2[:, i]‖²``) has moved at first order (ten times the drift of a whole step, four times less at τ/4
instead of sixteen), and each step counted twice. So the monitor records once all of them have stepped.

What breaks the laws is said once each (:func:`training_warnings`): an optimizer's own settings when it is attached
(weight decay or Adam on a parameter a law reads, param groups stepping apart), the parameters no attached optimizer
updates at the first step (the optimizer that updates them may be attached after the first), and groups that come to
step apart later (a ``LambdaLR`` with one lambda per group) at the step where they do. A monitor attached to none
judges the optimizers that step a parameter its laws read all the same, through torch's global step hook: a loop that
calls ``monitor.step()`` by hand with AdamW, weight decay or param groups at two lr is named too.
"""

from __future__ import annotations

import re
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping

import torch
from torch.utils.hooks import RemovableHandle

from conslaw_lite.step_hooks import Holders, listen
from conslaw_lite.watch_conditions import STEP_SETTINGS, listed, optimizer_breaks_laws, steps_apart


def training_warnings(
    optimizers: Iterable[torch.optim.Optimizer], watched: Mapping[str, torch.Tensor], missed: bool = True
) -> list[str]:
    """Why the laws reading ``watched`` (name → parameter) are not those of training with ``optimizers``:
    :func:`~conslaw_lite.watch_conditions.optimizer_breaks_laws`, :func:`~conslaw_lite.watch_conditions.steps_apart`,
    and (``missed``) the parameters no optimizer updates.

    Examples
    ========
    >>> from torch import nn
    >>> w, head = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    >>> training_warnings([torch.optim.SGD([w], lr=0.1), torch.optim.SGD([head], lr=0.1, weight_decay=0.1)], {"w": w})
    []
    >>> training_warnings([torch.optim.SGD([head], lr=0.1)], {"w": w})[0][:48]
    'no optimizer attached updates w, which the laws '
    """
    optimizers = tuple(optimizers)
    why = [reason for optimizer in optimizers for reason in optimizer_breaks_laws(optimizer, watched)]
    why += steps_apart(optimizers, watched)
    stepped = {id(p) for optimizer in optimizers for group in optimizer.param_groups for p in group["params"]}
    left = [name for name, p in watched.items() if id(p) not in stepped]
    if missed and left:
        why.append(
            f"no optimizer attached updates {listed(left, 4)}, which the laws read: they are not conserved by this "
            "training (ε measures how far it moves them); give an optimizer every parameter (and attach every "
            "optimizer: the monitor records once all attached ones have stepped), or freeze these "
            "(requires_grad_(False)) before starting the Monitor, which then leaves their laws out"
        )
    return why


class AttachedOptimizers:
    """Calls ``record()`` once every optimizer attached has stepped since the last record; ``watched`` (name →
    parameter) are the parameters the laws read, which :func:`training_warnings` judges the optimizers by.

    Examples
    ========
    >>> from torch import nn
    >>> a, b = nn.Parameter(torch.ones(1)), nn.Parameter(torch.ones(1))
    >>> records = []
    >>> attached = AttachedOptimizers(lambda: records.append(1), {"a": a, "b": b})
    >>> first, second = torch.optim.SGD([a], lr=0.1), torch.optim.SGD([b], lr=0.1)
    >>> _ = attached.attach(first), attached.attach(second)
    >>> (a + b).sum().backward()
    >>> first.step(); len(records), second.step(), len(records)  # one record, after both
    (0, None, 1)
    """

    def __init__(self, record: Callable[[], object], watched: Mapping[str, torch.Tensor]) -> None:
        # The monitor holds this, so its method and the optimizers are held weakly here (a cycle kept a replaced
        # monitor, and the hooks by which it refuses calls on the model, alive until the garbage collector ran); an
        # optimizer's hook holds the method, which keeps a monitor attached alive as long as its optimizer.
        self._record = weakref.WeakMethod(record) if hasattr(record, "__self__") else lambda: record
        self.watched = watched
        self._attached: dict[int, tuple[weakref.ref, RemovableHandle]] = {}
        self._stepped: set[int] = set()
        self._settings: tuple | None = None  # the live optimizers' step settings at the last step (None: none yet)
        self._said: set[str] = set()
        self._recording = False  # inside an attached optimizer's call of the monitor's step
        # Every optimizer's steps, where none is attached (a loop that calls the monitor by hand): whether each holds a
        # parameter the laws read, so that its settings are judged as an attached one's are
        self._holds = Holders(watched.values())
        listen(self)

    def attach(self, optimizer: torch.optim.Optimizer) -> RemovableHandle:
        """Record after each step that ``optimizer`` takes with the others attached; its handle's ``.remove()``
        detaches it. Attaching twice is an error (each step would count twice)."""
        if id(optimizer) in self.live():
            raise ValueError("Monitor.attach: already attached to this optimizer; each step would count twice")
        record = self._record()
        handle = optimizer.register_step_post_hook(lambda stepped, *_: self._stepped_by(stepped, record))
        self._attached[id(optimizer)] = (weakref.ref(optimizer), handle)
        self._say(training_warnings(self.live().values(), self.watched, missed=False))
        return handle

    def live(self) -> dict[int, torch.optim.Optimizer]:
        """The optimizers attached whose handle was not removed, by ``id``."""
        alive = {key: (held(), handle) for key, (held, handle) in self._attached.items()}
        return {
            key: optimizer
            for key, (optimizer, handle) in alive.items()
            if optimizer is not None and handle.id in getattr(optimizer, "_optimizer_step_post_hooks", {})
        }

    def judge(self, optimizers: Iterable[torch.optim.Optimizer], missed: bool = True) -> None:
        """Warn, once for each reason, why ``optimizers`` do not train the watched laws: at the first call (with the
        parameters none updates, if ``missed``), and again where their step settings changed since the last (a
        scheduler that set param groups apart)."""
        optimizers = tuple(optimizers)
        settings = _settings(optimizers)
        if settings != self._settings:
            self._say(training_warnings(optimizers, self.watched, missed=missed and self._settings is None))
            self._settings = settings

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing to judge before a step."""

    def after(self, optimizer: torch.optim.Optimizer) -> None:
        """After any optimizer's step, where none is attached: judge those that update a parameter the laws read
        (the optimizer that updates the others may not have stepped yet: no parameter is called missed)."""
        if self._attached and self.live():
            return
        if self._holds(optimizer):
            self.judge(self._holds.seen(), missed=False)

    def _stepped_by(self, optimizer: torch.optim.Optimizer, record: Callable[[], object]) -> None:
        live = self.live()
        self.judge(live.values())
        self._stepped.add(id(optimizer))
        if self._stepped >= live.keys():
            self._stepped.clear()
            self._recording = True
            try:
                record()
            finally:
                self._recording = False

    def refuse_by_hand(self) -> None:
        """A ``ValueError`` where the monitor is stepped by hand while attached: each step would count twice."""
        if self._attached and not self._recording and self.live():
            raise ValueError(
                "Monitor.step() called by hand while the monitor is attached to an optimizer, which calls it after "
                "each of its steps: every step would count twice; call one or the other"
            )

    def _say(self, reasons: list[str]) -> None:
        """Warn once for each reason; one that differs only in its numbers (an lr that a scheduler sets at every
        step) is the same reason."""
        for why in reasons:
            kind = re.sub(r"\d[\d.e+-]*", "#", why)
            if kind not in self._said:
                self._said.add(kind)
                warnings.warn(f"Monitor: {why}", stacklevel=3)


def _settings(optimizers: Iterable[torch.optim.Optimizer]) -> tuple:
    """Each group's step settings: a tensor lr (capturable optimizers) by its identity and version, read without a
    device sync."""
    return tuple(
        (key, (id(v), v._version) if isinstance(v, torch.Tensor) else v)
        for optimizer in optimizers
        for group in optimizer.param_groups
        for key, v in group.items()
        if key in STEP_SETTINGS
    )
