"""The laws of unit slices and of pairs of them: one slice (or pair) solved, its laws moved to the others.

:func:`~conslaw_lite.find_laws.find_laws` cuts θ into the slices a law can lie in (hidden unit i's row before and
column after it, head i's rows, a channel; :mod:`conslaw_lite.law_blocks`). The slices of one axis are alike, so the
first one is solved and its laws are moved to the others by renaming the unit (:func:`~conslaw_lite.law_moves.swapped`)
and kept where every sample conserves them; only the slices where a moved law fails are solved on their own. Pairs of
slices (a head's entry (i, j) of QᵀQ − KᵀK) go the same way, pair by pair of one axis. Each stage works within its
budget of seconds and stops once the laws found reach the count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from conslaw_lite.law_blocks import PAIR_SECONDS, SLICE_SECONDS, squares_only, unit_group
from conslaw_lite.law_moves import MOVED_TOL, swapped, swapped_pair
from conslaw_lite.law_search import Samples, Search, Stopped, as_dicts, assembled, residuals, within_budget
from conslaw_lite.null_space import weaker
from conslaw_lite.polynomial_laws import Layout


def tally(blocks: int, kind: str, units: Units) -> str:
    """What a stage did: ``"80 unit slices: 66 solved, 14 by symmetry"``, how many were over its budget and how many
    it did not need."""
    unsearched = blocks - units.solved - units.moved - units.over_budget
    return (
        f"{blocks} {kind}: {units.solved} solved, {units.moved} by symmetry"
        + (f", {units.over_budget} over the budget" if units.over_budget else "")
        + (f", {unsearched} not needed" if unsearched else "")
    )


@dataclass
class Units:  # what the unit slices gave: the laws, the evidence, the slices solved and those whose laws were moved
    vectors: list[dict]
    sigma_kept: float
    sigma_dropped: float
    solved: int
    moved: int
    lawful: set[tuple] = field(default_factory=set)  # the axes whose first slice has laws
    later: list[list[int]] = field(default_factory=list)  # the other slices of the axes whose first has none
    over_budget: int = 0  # slices or pairs of them not solved: SLICE_SECONDS or PAIR_SECONDS spent

    @property
    def evidence(self) -> tuple[float, float]:
        return self.sigma_kept, self.sigma_dropped

    def join(self, other: Units) -> Units:
        """Take another stage's laws and evidence in; that stage."""
        self.vectors += other.vectors
        self.sigma_kept, self.sigma_dropped = weaker((self.sigma_kept, self.sigma_dropped), other.evidence)
        return other

    def add(self, found: Search) -> list[dict]:
        """Take a search's laws and evidence in; its laws."""
        laws = as_dicts(found)
        self.vectors += laws
        self.sigma_kept, self.sigma_dropped = weaker((self.sigma_kept, self.sigma_dropped), found.evidence)
        self.solved += found.blocks
        return laws

    def stopped_at(self, stop: Stopped) -> Stopped:
        """``stop`` (:class:`~conslaw_lite.law_search.Stopped`) with this stage's laws: those of the blocks it had
        solved before and of those ``stop`` holds."""
        self.add(stop.found)
        return Stopped(str(stop), assembled(self.vectors, self.sigma_kept, self.sigma_dropped, ""))


def unit_laws(
    samples: Samples, layout: Layout, slices: list, degree: int, enough: Callable | None, before: list[dict],
    spent: list[float],
) -> Units:  # fmt: skip
    """Axis by axis: its first slice solved, its laws moved to its other slices (``swapped``) and kept where conserved
    on every sample (``MOVED_TOL``), the slices where one failed (or of a flattened axis) solved on their own; no
    further axis once the laws found (with ``before``) reach the count. The other slices of an axis whose first has
    no law are left for last (``later``; of a grouped axis, left out), after the pairs of slices: another axis may
    reach the count first (a transformer layer's model axis, 16 slices without a law, before its hidden units; the
    448 slices without a law of an attention of d = 16 took 140 s before its heads' pairs). Slices are solved while
    ``SLICE_SECONDS`` last (``spent``: the work so far), the axes with the smallest first slices first (a ResNet block's
    convolution's channel and its BatchNorm, 38 coordinates, before both axes of the convolution, 63, and no law)."""
    axes: dict[tuple, list] = {}
    for key, coords in slices:
        axes.setdefault(key[:4], []).append((key[4], coords))
    units = Units([], math.inf, 0.0, 0, 0)
    reached = None if enough is None else (lambda more: enough(before + units.vectors + more))
    later: list[list[int]] = []
    smallest_first = sorted(axes.items(), key=lambda item: samples.unknowns(item[1][0][1], degree))
    try:
        for axis, ((u0, head), *others) in smallest_first:
            if reached is not None and reached([]):
                break
            n = axis[2]
            search, left = within_budget(samples, [head], degree, spent, SLICE_SECONDS)
            if left:
                units.over_budget += 1 + len(others)
                continue
            head_laws = units.add(search)
            if head_laws:
                units.lawful.add(axis)
            rest = []
            for u, coords in others:
                candidates = [swapped(law, layout, n, u0, u, unit_group(axis)) for law in head_laws] if n > 0 else []
                if candidates and max(residuals(samples, candidates)) <= MOVED_TOL:
                    units.vectors += candidates
                    units.moved += 1
                else:
                    rest.append(coords)
            if head_laws:
                search, left = within_budget(samples, rest, degree, spent, SLICE_SECONDS, reached)
                units.add(search)
                units.over_budget += left
            elif unit_group(axis) is None:  # a grouping of rows whose first unit has none is no grouping of the model's
                later += rest
        units.later = later
        return units
    except Stopped as stop:  # this stage's laws go with it
        raise units.stopped_at(stop) from None


def pair_laws(
    samples: Samples, layout: Layout, pairs: list, degree: int, enough: Callable, lawful: frozenset[tuple],
    others: bool, work: list[float],
) -> Units:  # fmt: skip
    """The pairs of unit slices of the axes in ``lawful`` (or with ``others``, of the other axes) in two passes: the
    axes one by one (the first pair solved, its laws moved to the others), then the pairs where they were not all
    conserved; ``others``: fewest unknowns first, on their sums of squares (``squares``), then whole. Before a pair is
    solved, the laws of the pairs of its axis solved so far are moved to it (``swapped_pair``) and kept where conserved
    (``MOVED_TOL``); it is solved when those of no solved pair all are (a head's entry (0, 1) moved to its entry
    (0, 2); a RoPE head's law of units 0 and 2, found among the squares, to units 1 and 3), while ``PAIR_SECONDS``
    last (:func:`~conslaw_lite.law_blocks.pair_seconds`; ``work``: what the search's pairs have spent so far), until
    the laws found reach the count. A flattened axis's pairs are solved one by one."""
    units = Units([], math.inf, 0.0, 0, 0)
    solved: dict[tuple, list[tuple[tuple[int, int], list[dict]]]] = {}  # per axis: (pair, its laws) when it has some
    done: set[tuple] = set()  # (axis, pair) of those pairs, and of those moved or over the budget: not tried again
    by_axis: dict[tuple, list] = {}
    for p in pairs:
        by_axis.setdefault(p[0], []).append(p)

    def moved(axis: tuple, to: tuple[int, int]) -> bool:
        """The laws of the pairs solved before on ``axis`` moved to ``to``: True, those of a pair kept, when they all
        are conserved, else those of the first pair that are."""
        for n, (first, laws) in enumerate(solved.get(axis, [])):
            there = [swapped_pair(law, layout, axis[2], first, to, unit_group(axis)) for law in laws]
            conserved = [law for law, r in zip(there, residuals(samples, there)) if r <= MOVED_TOL]
            if len(conserved) == len(there) or n == 0:
                units.vectors += conserved
            if len(conserved) == len(there):
                units.moved += 1
                done.add((axis, to))
                return True
        return False

    def solve(axis: tuple, pair: tuple[int, int], coords: list[int], on: Samples) -> None:
        search, left = within_budget(on, [coords], degree, work, PAIR_SECONDS, lambda v: enough(units.vectors + v))
        if left:
            units.over_budget += 1
            done.add((axis, pair))
            return
        laws = units.add(search)
        if on is not samples and not laws:  # a screen that found none: the pair is moved or solved whole after it
            units.solved -= search.blocks
        if laws and axis[2] > 0:
            solved.setdefault(axis, []).append((pair, laws))
            done.add((axis, pair))

    def squares(coords: list[int]) -> Samples:
        return replace(samples, monomials={tuple(coords): squares_only(len(coords))})

    def whole(coords: list[int]) -> Samples:
        return samples

    try:
        unmoved = []  # axis by axis: its first pair solved, its laws moved to the others
        for axis in [axis for axis in by_axis if axis in lawful and not others]:
            if enough(units.vectors):
                return units
            (_, u, v, coords, _), *rest = by_axis[axis]
            solve(axis, (u, v), coords, samples)
            unmoved += [p for p in rest if not moved(axis, p[1:3])]
        order = {axis: n for n, axis in enumerate(by_axis)}
        cheapest = lambda p: (samples.unknowns(p[3], degree), order[p[0]])  # noqa: E731
        rest = sorted((p for p in pairs if p[0] not in lawful), key=cheapest) if others else []
        screened = [p for p in rest if p[0][2] > 0] if degree == 2 else []
        for chosen, on in ((unmoved, whole), (screened, squares), (rest, whole)):
            for axis, u, v, coords, _ in chosen:
                if enough(units.vectors):
                    return units
                if (axis, (u, v)) not in done and not moved(axis, (u, v)):
                    solve(axis, (u, v), coords, on(coords))
        return units
    except Stopped as stop:  # this stage's laws go with it
        raise units.stopped_at(stop) from None
