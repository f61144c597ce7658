"""Repeated layers evaluated as one: the law sources of L layers of the same structure, on stacked parameters.

A decoder repeats one layer L times, and each layer's laws are the same function of that layer's own
parameters. Called once per layer, a law costs L times its dispatch (dozens of small torch operations,
microseconds each, whatever the size of the matrices). Called once on the parameters stacked along a new
leading axis, ``θ^(l)`` → ``Θ`` of shape ``(L, *shape)``, it costs one layer's dispatch:

    h(Θ)[l] = h(θ^(l))      for every layer l,

which holds for a law written with negative axes (``W.mT @ W``, ``.sum(-2)``, ``unflatten(-2, ...)``).

A source joins a stack only when both hold:

1. it is the same code as the stack's first source and reads parameters of the same shapes, in the same order;
2. the stacked call gives, row by row, the values of the separate calls, at θ₀ and at a random point (at θ₀
   alone two different layouts can agree: every RMSNorm gain starts at 1).

A law that does not broadcast over a leading axis fails (2), raises, or returns another shape, and stays
alone: stacking changes the cost, never a value. The stacked parameters live in one float64 storage per
column of names ``(θ^(1)_j, …, θ^(L)_j)``, in the plan's mapping under the column's :func:`stack_key`; each
parameter's buffer is a view of its row, so a copy into the buffers refreshes the stacks in place. A stacked
law reads its storages from the mapping it is called with, so the same law evaluates any mapping of that layout
(the monitor's snapshots of θ, :mod:`conslaw_lite.snapshots`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from conslaw_lite.laws import Law, Params

# A source is one function whose value, along its first axis, holds the laws at these flat positions:
# a block's Batch (n heads in one batched call instead of n dispatch-bound ones) or a single law, [i].
Source = tuple[Law, list[int]]

DOES_NOT_STACK = (RuntimeError, IndexError, KeyError, ValueError, TypeError)  # what a law raises on stacked input
RANDOM_SEED = 0  # the random point of check (2): fixed, so a monitor's plan is reproducible


class Recorder(dict):
    """A parameter mapping that records the names a law reads, in the order of first reading.

    Examples
    ========
    >>> p = Recorder({"a": torch.ones(1), "b": torch.zeros(1)})
    >>> _ = p["b"] + p["a"] + p["b"]
    >>> p.order
    ['b', 'a']
    """

    def __init__(self, params: Mapping[str, torch.Tensor]) -> None:
        super().__init__(params)
        self.order: list[str] = []

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self.order:
            self.order.append(key)
        return super().__getitem__(key)


@dataclass
class Plan:
    """How to evaluate a model's sources each step: the sources (stacked ones reading the storages of their
    columns), the float64 buffer of every parameter a law reads (a view into a stack where stacked) and every
    storage, by key, and which names are stacked."""

    sources: list[Source]
    params: dict[str, torch.Tensor]
    stacked: set[str]
    read: set[str]  # every name some source reads
    layers: int  # the number of separate calls that the stacks replaced by one each
    storages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # key in params -> its column of names


def stack_key(column: tuple[str, ...]) -> str:
    """The key of a column's storage in a plan's mapping (no parameter name holds a space).

    Examples
    ========
    >>> stack_key(("0.W", "1.W"))
    'stack 0.W 1.W'
    """
    return " ".join(("stack", *column))


def _code(fn: Callable) -> object:
    """What makes two law functions the same code: their code object (closures of one factory share it)."""
    return getattr(fn, "__code__", fn)


def agrees(stacked: torch.Tensor, separate: list[torch.Tensor]) -> list[bool]:
    """Row l of ``stacked`` equals ``separate[l]`` to the rounding of a batched product, for each l.

    Examples
    ========
    >>> agrees(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 5.0])])
    [True, False]
    """
    if tuple(stacked.shape) != (len(separate), *separate[0].shape):
        return [False] * len(separate)
    scale = max(float(v.abs().max()) if v.numel() else 0.0 for v in separate)
    tolerance = 1e-10 * max(scale, 1e-300)
    return [bool(torch.allclose(row, v, rtol=1e-10, atol=tolerance)) for row, v in zip(stacked, separate, strict=True)]


def _stacked_call(fn: Law, columns: list[tuple[str, ...]], points: list[Params]) -> list[torch.Tensor]:
    """``fn`` on the parameters of ``columns`` stacked (the first layer's names), at each of ``points``."""
    return [fn({c[0]: torch.stack([point[n] for n in c]) for c in columns}) for point in points]


def _verified(
    members: list[int], sources: list[Source], reads: list[tuple[str, ...]], params: Params, at_start: list
) -> list[int]:
    """The members, from the first, whose rows of one stacked call agree with their separate calls (``at_start``:
    every source's value at θ₀), at θ₀ and at a random point of the parameters they read; shrunk and checked again
    until all agree (one member: no stack)."""
    while len(members) >= 2:
        columns = list(zip(*(reads[i] for i in members), strict=True))
        points = [params, random_point({n: params[n] for c in columns for n in c})]
        try:
            results = _stacked_call(sources[members[0]][0], columns, points)
            separate = [[at_start[i] for i in members], [sources[i][0](points[1]) for i in members]]
        except DOES_NOT_STACK:  # a law that does not broadcast over a leading axis: it stays alone
            return members[:1]
        ok = [all(a) for a in zip(*map(agrees, results, separate), strict=True)]
        if all(ok):
            return members
        if not ok[0]:
            return members[:1]
        members = [i for i, good in zip(members, ok, strict=True) if good]
    return members


def random_point(params: Params) -> dict[str, torch.Tensor]:
    """Standard normal values of the shapes, dtypes and devices of ``params``, from a fixed seed.

    Examples
    ========
    >>> point = random_point({"W": torch.zeros(2, 3, dtype=torch.float64)})
    >>> point["W"].shape, point["W"].dtype, bool(point["W"].abs().sum() > 0)
    (torch.Size([2, 3]), torch.float64, True)
    """
    generator = torch.Generator().manual_seed(RANDOM_SEED)
    return {n: torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device) for n, p in params.items()}


def stack_sources(sources: list[Source], params: Params) -> Plan:
    """Group the sources that are one layer's laws repeated, and evaluate each group once on stacked parameters.

    ``params`` are float64 values of θ₀ by name. Sources that cannot be stacked (see the module docstring) are
    kept as they are, reading ``Plan.params``.

    Examples
    ========
    >>> p = {f"{l}.W": torch.randn(3, 2, dtype=torch.float64) for l in range(4)}
    >>> gram = lambda name: (lambda q: q[name].mT @ q[name])
    >>> plan = stack_sources([(gram(f"{l}.W"), [l]) for l in range(4)], p)
    >>> len(plan.sources), plan.layers, sorted(plan.stacked) == sorted(p)
    (1, 4, True)
    >>> bool(torch.allclose(plan.sources[0][0](plan.params)[2], p["2.W"].T @ p["2.W"]))
    True
    """
    reads, at_start, candidates = [], [], {}
    for i, (fn, _) in enumerate(sources):
        recorder = Recorder(params)
        at_start.append(fn(recorder))
        reads.append(tuple(recorder.order))
        key = (_code(fn), tuple(tuple(params[n].shape) for n in reads[i]), tuple(at_start[i].shape))
        candidates.setdefault(key, []).append(i)
    plan = Plan([], dict(params), set(), {n for r in reads for n in r}, 0)
    done: set[int] = set()
    for members in candidates.values():
        while len(members) >= 2 and reads[members[0]]:
            group = _verified(members, sources, reads, params, at_start)
            if len(group) >= 2:
                columns = list(zip(*(reads[i] for i in group), strict=True))
                law = _stacked_law(sources[group[0]][0], columns, plan)
                plan.sources.append((law, [j for i in group for j in sources[i][1]]))
                plan.layers += len(group)
                done.update(group)
            members = [i for i in members if i not in group]
    plan.sources += [s for i, s in enumerate(sources) if i not in done]
    for name in set(plan.params) - plan.read - set(plan.storages):
        del plan.params[name]
    return plan


def _stacked_law(fn: Law, columns: list[tuple[str, ...]], plan: Plan) -> Law:
    """``fn`` on its columns of parameters stacked: each column gets its own storage (in ``plan.params`` under its
    :func:`stack_key`), whose rows become the names' buffers, unless one of its names already has a buffer in
    another storage (a parameter read in two different columns, e.g. one RMSNorm gain by a coupling of layers and
    by the controls of every gain); such a column is stacked from the buffers at each call, along the axis before
    the parameter's own (the leading axes of a mapping of snapshots stay in front)."""
    owner = {n: c for c in plan.storages.values() for n in c}
    stacks, gathered = {}, {}
    for c in columns:
        key = stack_key(c)
        if key in plan.storages:
            stacks[c[0]] = key
        elif len(set(c)) == len(c) and not any(n in owner for n in c):
            plan.params[key] = torch.stack([plan.params[n] for n in c])
            plan.storages[key] = c
            for layer, n in enumerate(c):
                plan.params[n] = plan.params[key][layer]
                owner[n] = c
            plan.stacked.update(c)
            stacks[c[0]] = key
        else:
            gathered[c[0]] = (c, plan.params[c[0]].ndim)

    def law(p: Params) -> torch.Tensor:
        q = {first: p[key] for first, key in stacks.items()}
        q |= {first: torch.stack([p[n] for n in c], dim=-1 - ndim) for first, (c, ndim) in gathered.items()}
        return fn(q)

    return law
