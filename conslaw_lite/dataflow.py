"""Which layers read one layer's output: a norm and the q, k, v projections after it.

A pre-norm block computes ``h = norm(x)`` and then ``q(h)``, ``k(h)``, ``v(h)``. Scaling the norm's gain
``γ_j → λγ_j`` (and its bias) and column j of all three readers by 1/λ leaves the output unchanged, so per
coordinate j

    γ_j² + β_j² − ‖W_q[:, j]‖² − ‖W_k[:, j]‖² − ‖W_v[:, j]‖²

is conserved: a law over four layers, in no pair of them. :func:`~conslaw_lite.find_laws.find_laws` searches
pairs of layers; these *fan-outs* tell it which larger groups to search too (per unit j,
:func:`conslaw_lite.law_blocks.fan_out_slices`). They are read off one forward: a layer with parameters whose
output tensor is the first input of two or more other layers with parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from conslaw_lite.config import evaluating
from conslaw_lite.counting.problem import Problem, sample_inputs


def fan_outs(model: nn.Module, x: torch.Tensor) -> list[tuple[str, list[str]]]:
    """``(layer, [its readers])`` for every layer whose output is the first input of at least two layers, in the
    order of the forward; a layer is a module with parameters of its own, named as in ``named_modules``.

    Examples
    ========
    >>> class PreNorm(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.norm, self.q, self.k, self.out = nn.LayerNorm(4), nn.Linear(4, 2), nn.Linear(4, 2), nn.Linear(2, 1)
    ...     def forward(self, x):
    ...         h = self.norm(x)
    ...         return self.out(self.q(h) * self.k(h))
    >>> fan_outs(PreNorm(), torch.randn(3, 4))
    [('norm', ['q', 'k'])]
    """
    made: dict[int, str] = {}  # id of an output tensor -> the layer that made it
    readers: dict[str, list[str]] = {}
    kept: list[torch.Tensor] = []  # every output stays alive until the end: no other tensor takes its id

    def record(name: str, args: tuple, output: object) -> None:
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is not None and made.get(id(first), name) != name:
            readers.setdefault(made[id(first)], []).append(name)
        if isinstance(output, torch.Tensor):
            made[id(output)] = name
            kept.append(output)

    forward_watched(model, x, record)
    return [(name, list(dict.fromkeys(read))) for name, read in readers.items() if len(dict.fromkeys(read)) > 1]


def forward_watched(model: nn.Module, x: torch.Tensor, seen: Callable[[str, tuple, object], None]) -> None:
    """One forward of ``model`` on ``x`` (eval mode, no gradient), ``seen(name, args, output)`` called as each layer
    (a module with parameters of its own, named as in ``named_modules``) returns.

    Examples
    ========
    >>> names = []
    >>> forward_watched(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), torch.randn(2, 3),
    ...                 lambda name, args, output: names.append(name))
    >>> names
    ['0', '2']
    """
    layers = {m: name for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))}
    handles = [m.register_forward_hook(lambda m, args, out: seen(layers[m], args, out)) for m in layers]
    try:
        with evaluating(model), torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()


def readers_of(problem: Problem, input_shape, inputs, seed: int) -> list[list[str]]:
    """Each layer with the layers that read its output (:func:`fan_outs`), by module name, on inputs sampled as the
    counter samples them (``input_shape`` or ``inputs``, ``seed``); none for a function, or a module that one forward
    on them does not run (:func:`~conslaw_lite.find_laws.find_laws` is sound without them: they only add blocks to
    its search)."""
    if problem.module is None:
        return []
    x = problem.to_device(sample_inputs(input_shape, inputs, 2, torch.Generator().manual_seed(seed)))
    try:
        return [[layer, *readers] for layer, readers in fan_outs(problem.module, x)]
    except Exception:  # noqa: BLE001 - the count that follows names what is wrong with the model
        return []
