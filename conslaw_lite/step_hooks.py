"""Every optimizer's steps, for the monitors alive: torch's global step hooks, registered once.

A monitor judges the optimizers that step the parameters its laws read, attached or not
(:mod:`conslaw_lite.attached_optimizers`), looks at θ between their steps (:mod:`conslaw_lite.theta_edits`), and
keeps θ before them where its check of the gradient may need it (:mod:`conslaw_lite.gradient_check`).
Each listens here, held weakly: a hook of its own, removed when it is collected, would be removed while torch runs
the hooks (the collector runs at any allocation, a hook's too: "OrderedDict mutated during iteration").
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Protocol

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


class Listener(Protocol):
    def before(self, optimizer: torch.optim.Optimizer) -> None: ...

    def after(self, optimizer: torch.optim.Optimizer) -> None: ...


class Holders:
    """Whether an optimizer steps one of ``params``, asked of each optimizer once (held weakly), and those that do.

    Examples
    ========
    >>> w, other = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    >>> holders = Holders([w])
    >>> first, second = torch.optim.SGD([w, other], lr=0.1), torch.optim.SGD([other], lr=0.1)
    >>> holders(first), holders(second), holders.seen() == [first]
    (True, False, True)
    """

    def __init__(self, params: Iterable[torch.Tensor]) -> None:
        self.ids = {id(p) for p in params}
        self._holds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __call__(self, optimizer: torch.optim.Optimizer) -> bool:
        if optimizer not in self._holds:
            stepped = (p for group in optimizer.param_groups for p in group["params"])
            self._holds[optimizer] = any(id(p) in self.ids for p in stepped)
        return self._holds[optimizer]

    def seen(self) -> list[torch.optim.Optimizer]:
        """The optimizers asked about so far, alive, that step one of the parameters."""
        return [optimizer for optimizer, holds in self._holds.items() if holds]


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
