"""θ at several records evaluated as one: the monitor's snapshots of θ along a leading axis.

On a small model a record costs the dispatch of its laws' torch operations (a few dozen, microseconds each,
whatever the size of the matrices) more than their arithmetic, and right after a training step each of them runs
with cold caches. So the monitor copies θ at each record into one slot of a ring of K float64 snapshots, and
evaluates the laws once every K records, on all K slots at once. Every buffer of the plan
(:class:`~conslaw_lite.law_stacks.Plan`) gets a leading axis of K,

    h(Θ)[k] = h(θ_k)      for every slot k,

the property that stacks a deep model's layers (:mod:`conslaw_lite.law_stacks`), checked here for each source
the same way, row by row at θ₀ and at a random point; a source that fails is called slot by slot. Batching
changes when the laws are evaluated, never their values: the monitor evaluates what is pending before it answers.

K is as many snapshots as fit in :data:`BUDGET` bytes, at most :data:`MOST`: the dispatch saved shrinks as 1/K
while the ring outgrows the caches. Measured by ``benchmarks/hf_monitor_overhead.py --sweep`` on 2 cores, after
each step of a float32 training (the monitor's time per step, one run): a two-layer Qwen3 of d = 64 (0.7 MB a
snapshot) 1.36 ms one record at a time, 0.84 at 3, 0.61 at 6, 0.64 at 16; an eight-layer one (2.6 MB) 2.68 ms
alone, 2.02 at 3, 1.90 at 6, 2.69 at 16. A model whose laws read more than about 1 M parameters gets one
snapshot (its operations are long enough that their dispatch no longer counts).
"""

from __future__ import annotations

import torch

from conslaw_lite.law_stacks import DOES_NOT_STACK, Plan, Recorder, agrees, random_point
from conslaw_lite.shared_squares import KeptSquares, shared_squares

BUDGET = 16 * 2**20  # bytes of float64 snapshots
MOST = 6  # snapshots evaluated at once


def slots_for(plan: Plan) -> int:
    """How many snapshots of the plan's buffers fit in :data:`BUDGET` bytes, from 1 to :data:`MOST`.

    Examples
    ========
    >>> from conslaw_lite.law_stacks import stack_sources
    >>> p = {"W": torch.zeros(1000, 1000, dtype=torch.float64)}
    >>> slots_for(stack_sources([(lambda q: q["W"].sum(-1), [0])], p))  # 8 MB a snapshot: two
    2
    >>> slots_for(stack_sources([(lambda q: q["W"].sum(-1), [0])], {"W": p["W"][:100]}))  # 0.8 MB: the most
    6
    """
    size = sum(t.numel() * t.element_size() for key, t in plan.params.items() if key not in plan.stacked)
    return max(1, min(MOST, BUDGET // max(size, 1)))


class Snapshots:
    """A ring of ``slots`` float64 snapshots of the buffers of ``plan``: :meth:`take` copies θ into the next slot,
    :meth:`evaluate` gives every source's values at the slots taken since the last evaluation.

    Examples
    ========
    >>> from conslaw_lite.law_stacks import stack_sources
    >>> p = {"W": torch.tensor([[1.0, 2.0]], dtype=torch.float64)}
    >>> ring = Snapshots(stack_sources([(lambda q: q["W"].square().sum(-1), [0])], p), ["W"], slots=4)
    >>> for scale in (1.0, 2.0, 3.0):
    ...     ring.take([scale * p["W"]])
    >>> ring.evaluate().tolist()  # ‖W‖² at each record
    [[5.0], [20.0], [45.0]]
    """

    def __init__(self, plan: Plan, names: list[str], slots: int) -> None:
        """``names``: the parameters each :meth:`take` copies, in the order of the values it is given."""
        self.sources = plan.sources
        self.slots, self.pending = slots, 0
        ring = _ring(plan, slots)
        self.slot = [{key: t[k] for key, t in ring.items()} for k in range(slots)]  # slot k's mapping
        self._first = [{key: t[:n] for key, t in ring.items()} for n in range(slots + 1)]  # the first n slots
        self._targets = [[self.slot[k][n] for n in names] for k in range(slots)]
        points = (plan.params, _random_layout(plan))
        self.batched = [_broadcasts(fn, points) for fn, _ in plan.sources]
        # Several slots: a small model, whose squares (a few MiB at most) keep their memory from one evaluation to
        # the next; one slot: a large model, whose squares are freed after each.
        mappings = [*self._first, *self.slot]
        self._kept = KeptSquares(t for m in mappings for t in m.values()) if slots > 1 else None

    @property
    def full(self) -> bool:
        return self.pending == self.slots

    def take(self, values: list[torch.Tensor]) -> None:
        """Copy ``values`` (θ's tensors, in the order of ``names``) into the next slot, in one foreach call."""
        if self.full:
            raise RuntimeError("every slot holds a snapshot not yet evaluated: call evaluate() first")
        torch._foreach_copy_(self._targets[self.pending], values)
        self.pending += 1

    def evaluate(self) -> torch.Tensor:
        """``(pending, E)``: the values of every source, one after the other, at each pending snapshot; the ring is
        then empty."""
        n, self.pending = self.pending, 0
        with shared_squares(self._kept):
            values = [
                fn(self._first[n]) if batched else torch.stack([fn(self.slot[k]) for k in range(n)])
                for (fn, _), batched in zip(self.sources, self.batched, strict=True)
            ]
            return torch.cat([v.reshape(n, -1) for v in values], dim=1)


def _ring(plan: Plan, slots: int) -> dict[str, torch.Tensor]:
    """Every buffer of ``plan`` with a leading axis of ``slots``, each slot holding θ₀; a stacked name is a view
    into its column's storage, as in the plan."""
    ring = {key: t.expand(slots, *t.shape).clone() for key, t in plan.params.items() if key not in plan.stacked}
    for key, column in plan.storages.items():
        for layer, name in enumerate(column):
            ring[name] = ring[key][:, layer]
    return ring


def _random_layout(plan: Plan) -> dict[str, torch.Tensor]:
    """A random point in the plan's layout: random values by name, each storage the stack of its column's values."""
    values = random_point({n: t for n, t in plan.params.items() if n not in plan.storages})
    return values | {key: torch.stack([values[n] for n in column]) for key, column in plan.storages.items()}


def _broadcasts(fn, points: tuple[dict, dict]) -> bool:
    """Whether ``fn`` on two snapshots at once (``points``: θ₀ and a random point, in the plan's layout) gives, row by
    row, its value at each; only what ``fn`` reads is stacked."""
    recorder = Recorder(points[0])
    at_start = fn(recorder)
    both = {key: torch.stack([points[0][key], points[1][key]]) for key in recorder.order}
    try:
        return all(agrees(fn(both), [at_start, fn(points[1])]))
    except DOES_NOT_STACK:  # a law that does not broadcast over a leading axis: called slot by slot
        return False
