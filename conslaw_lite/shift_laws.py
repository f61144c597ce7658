"""The laws of a shift that every output unit of a layer shares: what a softmax or a LayerNorm over them ignores.

A layer P whose outputs z_1, …, z_m the model reads only through a map that ignores a common shift,
g(z + c·1) = g(z) (a softmax or log-softmax over them: a classifier's log-probabilities, a mixture's router; a
LayerNorm over them with nothing else reading them: a post-norm transformer's sublayers), keeps the output when one
vector v is added to every unit's weights and one number c to every unit's bias: each z_e moves by the same
⟨v, x⟩ + c. The loss then has ⟨∇L, u⟩ = 0 along each such direction u of θ, so gradient flow conserves ⟨θ, u⟩:

    h(θ) = Σ_e P_e        (each input's weight summed over the units: one law an input, and the biases' sum).

A unit is what :func:`~conslaw_lite.rescaling_laws.producer` says: a ``Linear``'s row and bias entry, a convolution's
output channel, an embedding's column (a token's row then moves by one number); in a module of one's own, a matrix's
row or column, or a vector's entry (:func:`~conslaw_lite.rescaling_laws.shift_units`). A layer's shift is proposed
where moving it along a random such direction leaves the model's outputs as they were, in float64 on the check's
inputs, and a random move of it of the same size does not (where the signal vanishes, neither moves them); the check
of :mod:`conslaw_lite.rescaling_laws` then decides, as for every proposed law.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from conslaw_lite.counting.problem import Problem
from conslaw_lite.head_laws import Pattern
from conslaw_lite.laws import Law, Params

Unit = tuple[str, int]  # a tensor's name and the axis along which its entries belong to the units

UNMOVED = 1e-9  # largest change of the outputs that a shift may leave, relative to the largest output and to what
# a random move of the layer changes


def shift_law(units: list[Unit], shapes: dict[str, torch.Size]) -> Law:
    """``p ↦ Σ_e P_e``: each tensor of ``units`` summed along its unit axis, flattened and concatenated, over any
    leading axes a stack of θ adds.

    Examples
    ========
    >>> law = shift_law([("w", 0), ("b", 0)], {"w": torch.Size([2, 3]), "b": torch.Size([2])})
    >>> law({"w": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "b": torch.tensor([1.0, -3.0])}).tolist()
    [5.0, 7.0, 9.0, -2.0]
    """

    def law(p: Params) -> torch.Tensor:
        sums = []
        for name, axis in units:
            lead = p[name].dim() - len(shapes[name])
            total = p[name].sum(lead + axis)
            sums.append(total.reshape(*total.shape[:lead], -1))
        return torch.cat(sums, dim=-1)

    return law


def _term(name: str, axis: int, ndim: int) -> str:
    slices = [":"] * ndim
    slices[axis] = "e"
    return f"Σ_e {name}[{', '.join(slices)}]"


def shift_patterns(
    problem: Problem, theta: torch.Tensor, x: torch.Tensor, layers: list[tuple[str, list[Unit]]]
) -> list[Pattern]:
    """For each layer of ``layers`` (its name and its units' tensors) whose units share a shift that the model's
    outputs on ``x`` ignore at ``theta``, the linear laws ``Σ_e P_e`` (module docstring): a
    :class:`~conslaw_lite.head_laws.Pattern` of size 0, screened whole.

    Examples
    ========
    >>> from torch import nn
    >>> from conslaw_lite.counting.problem import problem_of
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.LogSoftmax(-1))
    >>> problem = problem_of(net, None)
    >>> theta = problem.flatten(dict(net.named_parameters()))
    >>> layers = [(n, [(f"{n}.weight", 0), (f"{n}.bias", 0)]) for n in ("0", "2")]
    >>> [p.key for p in shift_patterns(problem, theta, torch.randn(2, 3), layers)]
    ['Σ_e 2.weight[e, :] and Σ_e 2.bias[e]']
    """
    f = problem.outputs(x.double() if x.is_floating_point() else x)
    gen = torch.Generator().manual_seed(0)  # the caller's random state untouched
    patterns = []
    with torch.no_grad():
        at_rest = f(theta)
        moved = lambda direction: (f(theta + direction) - at_rest).abs().max()  # noqa: E731
        floor = UNMOVED * (at_rest.abs().max() + 1)
        for name, units in layers:
            shift, anywhere = _directions(problem, theta, units, gen)
            if _ignored(moved(shift), lambda anywhere=anywhere: moved(anywhere), floor):
                key = " and ".join(_term(t, axis, len(problem.shapes[t])) for t, axis in units)
                law = shift_law(units, problem.shapes)
                patterns.append(Pattern(("shift", name, *units), 0, key, law, corners=law))
    return patterns


def _directions(
    problem: Problem, theta: torch.Tensor, units: list[Unit], gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two moves of the layer's tensors in θ's layout, of one size: a random common shift of its units, and a random
    move of them."""
    shift, anywhere = torch.zeros_like(theta), torch.zeros_like(theta)
    shifted, any_way = dict(problem.split(shift)), dict(problem.split(anywhere))  # views of the two vectors
    for t, axis in units:
        common = list(problem.shapes[t])
        common[axis] = 1  # one value for every unit
        shifted[t].view(problem.shapes[t]).add_(torch.randn(common, generator=gen, dtype=theta.dtype))
        any_way[t].normal_(generator=gen)
    size = theta.abs().mean() + 1
    return shift * (size / shift.norm()), anywhere * (size / anywhere.norm())


def _ignored(shifted: torch.Tensor, anywhere: Callable[[], torch.Tensor], floor: torch.Tensor) -> bool:
    """Whether the outputs moved by ``shifted`` at most ``floor`` and at most ``UNMOVED`` times what a move of the
    layer anywhere, of the same size, moves them (computed only then), itself above ``floor``: where the signal
    vanishes (a deep ReLU MLP's first layers), every move leaves the outputs within round-off."""
    if shifted > floor:
        return False
    reach = anywhere()
    return bool(reach > floor and shifted <= UNMOVED * reach)
