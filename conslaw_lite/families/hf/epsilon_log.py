"""What the training callbacks log: the latest ε_block of every group of a :class:`~conslaw_lite.Monitor`."""

from __future__ import annotations

import math

from conslaw_lite.monitor import Monitor

PREFIX = "epsilon/"  # one key per group: "epsilon/swiglu", "epsilon/swiglu:control", ...


def latest_epsilon(monitor: Monitor) -> dict[str, float]:
    """``{"epsilon/<group key>": ε_block}`` at the monitor's latest record, one entry per group with a finite ε.

    ε_block = (1/N) Σ_i ‖h_i(θ_k) − h_i(θ_0)‖ / ‖h_i(θ_0)‖ over the group's N laws (or controls); a group whose
    laws all start at 0 has none and is left out.

    Examples
    ========
    >>> import torch
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> model = ToyProduct(a=2.0, b=1.0)
    >>> monitor = Monitor(model)
    >>> with torch.no_grad(): _ = model.a.add_(0.1)
    >>> _ = monitor.step()
    >>> {k: round(v, 4) for k, v in latest_epsilon(monitor).items()}  # |2.1² − 2²| / 3; (|2.1² − 2²| / 4 + 0) / 2
    {'epsilon/toy': 0.1367, 'epsilon/toy:control': 0.0513}
    """
    return {PREFIX + key: eps for key, eps in monitor.last_epsilon().items() if math.isfinite(eps)}
