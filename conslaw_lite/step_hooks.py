"""Every optimizer's steps, for the monitors alive: torch's global step hooks, registered once.

A monitor judges the optimizers that step the parameters its laws read, attached or not
(:mod:`conslaw_lite.attached_optimizers`), and looks at θ between their steps (:mod:`conslaw_lite.theta_edits`).
Each listens here, held weakly: a hook of its own, removed when it is collected, would be removed while torch runs
the hooks (the collector runs at any allocation, a hook's too: "OrderedDict mutated during iteration").
"""

from __future__ import annotations

import weakref
from typing import Protocol

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


class Listener(Protocol):
    def before(self, optimizer: torch.optim.Optimizer) -> None: ...

    def after(self, optimizer: torch.optim.Optimizer) -> None: ...


_LISTENERS: weakref.WeakSet = weakref.WeakSet()
_REGISTERED: list = []  # torch's handles, once the first listener comes


def listen(listener: Listener) -> None:
    """Call ``listener.before(optimizer)`` and ``listener.after(optimizer)`` around every optimizer's step while
    ``listener`` lives.

    Examples
    ========
    >>> class Count:
    ...     steps = 0
    ...     def before(self, optimizer): pass
    ...     def after(self, optimizer): self.steps += 1
    >>> count, w = Count(), torch.nn.Parameter(torch.ones(1))
    >>> listen(count)
    >>> w.sum().backward(); torch.optim.SGD([w], lr=0.1).step()
    >>> count.steps
    1
    """
    if not _REGISTERED:
        _REGISTERED.extend([register_optimizer_step_pre_hook(_before), register_optimizer_step_post_hook(_after)])
    _LISTENERS.add(listener)


def _before(optimizer: torch.optim.Optimizer, *_) -> None:
    for listener in list(_LISTENERS):
        listener.before(optimizer)


def _after(optimizer: torch.optim.Optimizer, *_) -> None:
    for listener in list(_LISTENERS):
        listener.after(optimizer)
