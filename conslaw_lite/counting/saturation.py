"""θ where units saturate: coordinates with exactly zero gradient, and smooth units torch computes as linear.

Where a coordinate gets exactly zero gradient on every input (a softmax saturated to one-hot), the counter draws the
next θ ten times smaller, down to ``MIN_FACTOR``; zeros on the same entries at every θ there are structural (a
tensor the output does not read: :func:`frozen_error` names the others), and where they are the same at the model's
own scale too, the first θ is ranked beside the smallest (:func:`zeros_everywhere`). Where the model has a kink the
counter does not see, whose units a small θ leaves on one piece, the zeros of every θ drawn, the smallest included,
make the θ at the model's own scale with those zeros alone rankable (:func:`zeros_at_every_scale`).

A smooth unit is linear at θ where torch computes it so: ``F.softplus(z, β, threshold)`` returns z itself where
``βz > threshold`` (20 by default), and its derivative there is exactly 1. A unit that a θ keeps past the threshold
on every input (a large bias behind a bounded ``tanh``, a large β) is a linear unit at that θ (and nearly one from
``βz > 10``, ``NEARLY_LINEAR``), with the laws of one (a balancedness matrix), which the smooth piece that other θ
reach breaks: counted there, they were 8 conclusive laws where the model has none. Such a θ is not generic; the
counter draws the next one ten times smaller, as where a softmax saturates, and says so where it cannot leave them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from conslaw_lite.counting.problem import Problem
from conslaw_lite.counting.strata import call_argument

MIN_FACTOR = 1e-3  # the smallest scale, relative to the model's, of θ drawn after a tensor's gradient vanished

SOFTPLUS = frozenset({F.softplus})  # nn.Softplus calls it
# βz past which a softplus unit counts as linear even below the threshold: its curvature is e^(−βz) of its slope,
# 5·10⁻⁵ at 10, and θ whose units all sat in (10, 20] gave ranks between the linear unit's and the generic one's
NEARLY_LINEAR = 10.0
STILL_LINEAR = (
    f"a softplus unit stays on or near torch's linear piece (βz > {NEARLY_LINEAR:g}; past its threshold torch returns "
    "z) on every input at each θ drawn, down to {factor:g} times the model's scale: it is a linear unit there, whose "
    "laws other θ break; count the model with a smaller β or bias, or near your θ with "
    "at=dict(model.named_parameters())"
)
FLAT = (
    "the output's gradient in θ is zero on every sampled input at {flat} of {draws} random θ, and fewer than two "
    "others were found: an op whose derivative is zero where it exists reads θ (a cast to an integer type, as in "
    "torch's Householder orthogonal map; torch.round; a comparison); count the model without it, or near your θ "
    "with at=dict(model.named_parameters())"
)


def too_few_moving(linear: bool, flat: int, draws: int) -> str:
    """Why no count where fewer than two θ drawn moved the output and kept no unit linear: :data:`STILL_LINEAR`
    where some θ had a ``linear`` softplus unit, else :data:`FLAT` (``flat`` of ``draws`` θ left the output flat).

    Examples
    ========
    >>> too_few_moving(False, 15, 16)[:63]
    "the output's gradient in θ is zero on every sampled input at 15"
    """
    return STILL_LINEAR.format(factor=MIN_FACTOR) if linear else FLAT.format(flat=flat, draws=draws)


class _Thresholds(TorchFunctionMode):
    """Notes whether a softplus call has a unit (an index of its last dimension) past its threshold everywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SOFTPLUS and not self.linear:
            z = args[0].detach()
            beta = call_argument(args, kwargs, 1, "beta", 1.0)
            threshold = call_argument(args, kwargs, 2, "threshold", 20.0)
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


def zeros_everywhere(drawn: list) -> object | None:
    """The first θ drawn, where every θ has the same zero coordinates, at the model's scale as at the smallest: they
    are structural there too, and the smallest θ may be degenerate (a weight behind ``torch.round``, 0 at 10⁻³)."""
    live = [d for d in drawn if not d.stratum.constant]
    return live[0] if all(d.zero is not None and torch.equal(d.zero, live[0].zero) for d in live) else None


def lifted(draw: object, structural: torch.Tensor | None) -> object:
    """The draw (``count._Draw``), its zeros taken as structural where they are ``structural``: those of every
    scale (:func:`zeros_everywhere`, :func:`zeros_at_every_scale`), which the rank counts as laws."""
    same = structural is not None and draw.zero is not None and torch.equal(draw.zero, structural)
    return replace(draw, zero=None) if same else draw


def zeros_at_every_scale(drawn: list, points: int) -> torch.Tensor | None:
    """The coordinates with zero gradient at every θ drawn, where at least ``points`` of them are at ``MIN_FACTOR``;
    None if there are none.

    Zeros that shrinking θ a thousandfold does not lift are structural (the taps of a 3 × 3 convolution that read
    only padding once its maps are 1 × 1, as in a ResNet's last stage on small images), where a saturated softmax's
    are lifted, and a dead unit's move from θ to θ. A deep model's kinks fall to one piece at that scale (each
    layer's bias outweighs its input), so its small θ only vouch for the zeros: the θ ranked are drawn at the model's
    scale again, with these zeros and no other (``count._ranks_at_points``).

    Examples
    ========
    >>> from types import SimpleNamespace as D
    >>> live, zeros = D(constant=False), torch.tensor([[1, 1, 0], [1, 0, 0], [1, 0, 1]], dtype=torch.bool)
    >>> first, *small = [D(stratum=live, factor=f, zero=z) for f, z in zip((1.0, MIN_FACTOR, MIN_FACTOR), zeros)]
    >>> zeros_at_every_scale([first, *small], 2).tolist(), zeros_at_every_scale([first, small[0]], 2)
    ([True, False, False], None)
    """
    live = [d for d in drawn if not d.stratum.constant]
    if sum(d.factor <= MIN_FACTOR for d in live) < points or any(d.zero is None for d in live):
        return None
    common = torch.stack([d.zero for d in live]).all(0)
    return common if bool(common.any()) else None


def frozen_error(problem: Problem, drawn: list, points: int) -> ValueError | None:
    """``None`` if ``points`` draws or more at ``MIN_FACTOR`` share their zero coordinates (structural: accepted by
    the counter), else the error naming the tensors whose zeros change from θ to θ."""
    smallest = [d.zero for d in drawn if not d.stratum.constant and d.factor <= MIN_FACTOR]
    if len(smallest) >= points and all(z is not None and torch.equal(z, smallest[0]) for z in smallest):
        return None
    seen = torch.stack([d.zero for d in drawn if d.zero is not None]).any(dim=0)
    names = [name for name, part in problem.split(seen) if bool(part.any())]
    return ValueError(
        f"parameter {', '.join(map(repr, names))} gets exactly zero gradient on every sampled input at "
        f"{sum(d.zero is not None for d in drawn)} of {len(drawn)} random θ, down to {MIN_FACTOR:g} times the "
        "model's scale, but not at the same entries: an op whose derivative vanishes there (a ReLU off on every "
        "input, when there are few of them, a softmax or sigmoid saturated to exactly 0 or 1, or a cast of θ to an "
        "integer type, as in torch's Householder orthogonal map) would make each "
        "such entry a spurious law; give more inputs (num_samples, inputs) or count the model at a smaller "
        "weight scale"
    )
