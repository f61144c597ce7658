"""The evidence for the deep-stack conjecture: :func:`count_laws` over kinds, depths and widths.

:func:`count_case` counts one :class:`~.block.DeepFFN` and holds the count against the conjectured
:func:`~.laws.formula` and the conjectured laws (:func:`~conslaw_lite.counting.check_laws`);
:func:`random_widths` draws the shapes of the sweep from a seed. ``benchmarks/deep_stacks.py`` runs the
sweep and writes its results; chapter 16 counts the small cases live and loads the rest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.families.deep.block import DeepFFN
from conslaw_lite.families.deep.laws import formula
from conslaw_lite.laws import law_functions
from conslaw_lite.seeding import seeded

KINDS = ("relu", "gelu", "swiglu")
DEPTHS = (2, 3, 4)


@dataclass(frozen=True)
class DeepCount:
    """One stack of the sweep: the count, the conjecture, and the evidence (the singular-value gap)."""

    kind: str
    widths: tuple[int, ...]  # (d, r_1, …, r_L, m)
    num_params: int
    counted: int | None  # N from count_laws; None when inconclusive
    formula: int  # the conjecture's N
    known_laws: int  # independent conjectured laws that hold (check_laws)
    agrees: bool  # conclusive, counted == formula == known_laws, the laws conserved
    sigma_kept: float
    sigma_dropped: float
    seconds: float
    reason: str  # why the count is inconclusive (no number given: no evidence either way), or ""

    def to_dict(self) -> dict:
        return asdict(self)


def count_case(kind: str, widths: tuple[int, ...], seed: int = 0) -> DeepCount:
    """Count the laws of ``DeepFFN(widths, kind)`` and hold them against the conjecture.

    Examples
    ========
    >>> c = count_case("swiglu", (2, 2, 2, 1))
    >>> c.counted, c.formula, c.agrees
    (4, 4, True)
    """
    with seeded(seed):
        net = DeepFFN(widths, kind).double()
    start = time.perf_counter()
    count = count_laws(net, (widths[0],), seed=seed)
    check = check_laws(net, law_functions(net), (widths[0],), seed=seed, count=count)
    N = formula(kind, widths[1:-1])[0]
    agrees = bool(count.conclusive and count.num_laws == N and check.complete and check.independent == N)
    return DeepCount(
        kind, tuple(widths), count.num_params, count.num_laws, N, check.independent, agrees,
        count.sigma_kept, count.sigma_dropped, time.perf_counter() - start, count.reason,
    )  # fmt: skip


def random_widths(depth: int, count: int, low: int = 1, high: int = 6, seed: int = 0) -> list[tuple[int, ...]]:
    """``count`` shapes ``(d, r_1, …, r_L, m)`` of ``depth`` hidden layers, each width uniform in [low, high].

    Examples
    ========
    >>> random_widths(2, 2, seed=0)
    [(1, 4, 6, 1), (3, 4, 1, 2)]
    """
    gen = torch.Generator().manual_seed(seed * 100 + depth)
    return [tuple(torch.randint(low, high + 1, (depth + 2,), generator=gen).tolist()) for _ in range(count)]
