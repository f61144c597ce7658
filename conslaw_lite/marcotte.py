"""The benchmark of Marcotte et al. (2023) for law counters: random deep linear and ReLU networks.

Their SageMath counter was run on 50 random linear networks (depth 2–4, widths
2–5) and 50 random ReLU networks (widths 2–9, no biases). Here the same shapes
are drawn from a seed, counted with :func:`conslaw_lite.counting.count_laws`, and
each count is checked against a number computed another way:

* **linear** ``W_L ⋯ W_1 x``: the balancedness laws ``W_{l+1}ᵀW_{l+1} − W_l W_lᵀ``
  of each hidden layer, their independent entries counted by
  :func:`conslaw_lite.counting.check_laws` (the rank of their Jacobian, not the
  naive ``Σ r(r+1)/2``: [2, 2, 5, 2, 5] has 20 laws, not 21, since a width-5
  layer between width-2 ones has a balancedness matrix of rank ≤ 4);
* **ReLU** ``W_L relu(⋯ relu(W_1 x))``: one law per hidden unit,
  ``‖W_{l+1}[:, i]‖² − ‖W_l[i, :]‖²``, checked the same way.

``widths = [n_0, n_1, …, n_L]``: input, hidden widths, output; depth L layers.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.families.ffn.laws import gram_balance, unit_balance
from conslaw_lite.laws import Law

SHAPES = {"linear": ((2, 4), (2, 5)), "relu": ((2, 4), (2, 9))}  # kind -> (depth range, width range), inclusive


@dataclass(frozen=True)
class SuiteResult:
    """One network of the suite: its count, the reference, and the evidence."""

    kind: str  # "linear" or "relu"
    widths: tuple[int, ...]
    num_params: int
    counted: int | None  # N from count_laws (None: inconclusive)
    reference: int  # N computed another way (see the module docstring)
    right: bool  # conclusive, counted == reference, and the known laws conserved and complete
    seconds: float  # count_laws' wall-clock time
    cpu_seconds: float  # its processor time (all threads): the wall-clock time it needs on idle cores
    skipped: int  # random θ passed over (the output constant there: a dead layer)
    reason: str  # why the count is inconclusive, or ""

    def to_dict(self) -> dict:
        return asdict(self)


def random_widths(kind: str, count: int, seed: int = 0) -> list[tuple[int, ...]]:
    """``count`` architectures of ``kind``: depth and each width uniform in :data:`SHAPES`' ranges.

    Examples
    ========
    >>> random_widths("linear", 2, seed=0)
    [(5, 3, 2, 5, 5), (5, 3, 5, 3)]
    """
    (low_depth, high_depth), (low, high) = SHAPES[kind]
    gen = torch.Generator().manual_seed(seed)
    shapes = []
    for _ in range(count):
        depth = int(torch.randint(low_depth, high_depth + 1, (), generator=gen))
        shapes.append(tuple(torch.randint(low, high + 1, (depth + 1,), generator=gen).tolist()))
    return shapes


def deep_net(widths: tuple[int, ...], relu: bool, seed: int = 0) -> nn.Sequential:
    """``W_L (relu)(⋯ (relu)(W_1 x))`` without biases, float64; ``Linear`` layers at even indices with ReLU.

    Examples
    ========
    >>> deep_net((3, 4, 2), relu=True)
    Sequential(
      (0): Linear(in_features=3, out_features=4, bias=False)
      (1): ReLU()
      (2): Linear(in_features=4, out_features=2, bias=False)
    )
    """
    layers: list[nn.Module] = []
    with torch.random.fork_rng():  # seeded weights without touching the caller's random state
        torch.manual_seed(seed)
        for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
            layers += [nn.Linear(n_in, n_out, bias=False)]
            layers += [nn.ReLU()] if relu and i < len(widths) - 2 else []
    return nn.Sequential(*layers).double()


def known_laws(widths: tuple[int, ...], relu: bool) -> dict[str, Law]:
    """The laws of :func:`deep_net`: per hidden layer, balancedness (linear) or one per unit (ReLU).

    Examples
    ========
    >>> import torch
    >>> laws = known_laws((2, 3, 2), relu=True)
    >>> list(laws), tuple(laws["unit balance 1"]({"0.weight": torch.ones(3, 2), "2.weight": torch.ones(2, 3)}).shape)
    (['unit balance 1'], (3,))
    """
    step = 2 if relu else 1  # index distance between consecutive Linear layers
    laws = {}
    for layer in range(1, len(widths) - 1):
        A, B = f"{step * layer}.weight", f"{step * (layer - 1)}.weight"
        laws[f"unit balance {layer}" if relu else f"balancedness {layer}"] = (
            unit_balance(A, B) if relu else gram_balance(A, B)
        )
    return laws


def run_case(kind: str, widths: tuple[int, ...], seed: int = 0) -> SuiteResult:
    """Count the laws of one network of the suite and check the count (see the module docstring).

    Examples
    ========
    >>> r = run_case("linear", (2, 2, 5, 2, 5))  # 3 + 10 + 3 balancedness entries, 20 independent
    >>> r.counted, r.reference, r.right
    (20, 20, True)
    """
    relu = kind == "relu"
    net = deep_net(widths, relu, seed)
    cpu_start = time.process_time()
    count = count_laws(net, (widths[0],), seed=seed)
    cpu_seconds = time.process_time() - cpu_start
    check = check_laws(net, known_laws(widths, relu), (widths[0],), seed=seed, count=count)
    reference = sum(widths[1:-1]) if relu else check.independent
    right = count.conclusive and count.num_laws == reference and check.complete
    return SuiteResult(
        kind, tuple(widths), count.num_params, count.num_laws, reference, right,
        count.seconds, cpu_seconds, len(count.strata), count.reason,
    )  # fmt: skip


def run_suite(num_linear: int = 50, num_relu: int = 50, seed: int = 0) -> list[SuiteResult]:
    """:func:`run_case` on ``num_linear`` linear then ``num_relu`` ReLU networks of :func:`random_widths`.

    Examples
    ========
    >>> [(r.kind, r.right) for r in run_suite(1, 1)]
    [('linear', True), ('relu', True)]
    """
    cases = [("linear", w) for w in random_widths("linear", num_linear, seed)]
    cases += [("relu", w) for w in random_widths("relu", num_relu, seed + 1)]
    return [run_case(kind, widths, seed) for kind, widths in cases]
