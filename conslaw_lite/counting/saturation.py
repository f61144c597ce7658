"""Smooth units that torch computes as exactly linear at θ: ``F.softplus`` past its threshold.

``F.softplus(z, β, threshold)`` returns z itself where ``βz > threshold`` (20 by default), and its derivative there
is exactly 1. A unit that a θ keeps past the threshold on every input (a large bias behind a bounded ``tanh``, a
large β) is a linear unit at that θ (and nearly one from ``βz > 10``, ``NEARLY_LINEAR``), with the laws of one (a
balancedness matrix), which the smooth piece that other θ reach breaks: counted there, they were 8 conclusive laws
where the model has none. Such a θ is not generic; the counter draws the next one ten times smaller
(:func:`~conslaw_lite.counting.count_laws`), as it does where a softmax saturates, and says so where it cannot
leave them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

SOFTPLUS = frozenset({F.softplus})  # nn.Softplus calls it
# βz past which a softplus unit counts as linear even below the threshold: its curvature is e^(−βz) of its slope,
# 5·10⁻⁵ at 10, and θ whose units all sat in (10, 20] gave ranks between the linear unit's and the generic one's
NEARLY_LINEAR = 10.0
STILL_LINEAR = (
    "a softplus unit stays on or near torch's linear piece (βz > 10; past its threshold torch returns z) on every "
    "input at each θ "
    "drawn, down to {factor:g} times the model's scale: it is a linear unit there, whose laws other θ break; "
    "count the model with a smaller β or bias, or near your θ with at=dict(model.named_parameters())"
)


class _Thresholds(TorchFunctionMode):
    """Notes whether a softplus call has a unit (an index of its last dimension) past its threshold everywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SOFTPLUS and not self.linear:
            z = args[0].detach()
            beta = args[1] if len(args) > 1 else kwargs.get("beta", 1.0)
            threshold = args[2] if len(args) > 2 else kwargs.get("threshold", 20.0)
            past = (z * beta > min(threshold, NEARLY_LINEAR)).reshape(-1, z.shape[-1] if z.dim() else 1)
            self.linear = bool(past.all(dim=0).any())
        return func(*args, **kwargs)


def linear_units(forward: Callable[[], object]) -> bool:
    """Whether ``forward()`` keeps a softplus unit past torch's threshold (``βz > threshold``, where torch returns z),
    or past ``NEARLY_LINEAR``, on every input it is given: a linear unit at this θ, or nearly one.

    Examples
    ========
    >>> import torch
    >>> x = torch.linspace(-1, 1, 5, dtype=torch.float64)[:, None]
    >>> b = torch.tensor([0.0, 25.0], dtype=torch.float64)  # unit 1: z = x + 25 > 20 on every input
    >>> linear_units(lambda: F.softplus(x + b)), linear_units(lambda: F.softplus(x + b, beta=0.2))
    (True, False)
    """
    with _Thresholds() as seen:
        forward()
    return seen.linear
