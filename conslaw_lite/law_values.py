"""Every watched law's values h(θ) as one flat row, and each law's norm of a row: the monitor's records of the laws.

A source (:mod:`conslaw_lite.law_stacks`) gives the entries of one or more laws; the monitor lays every source's
entries side by side in one row h per record, each law's entries next to each other. Then, for all laws and records
at once,

    ‖d_i‖ = (Σ_{e ∈ law i} d_e²)^½      (:meth:`LawValues.norms`),

the drift ``‖h_i(θ_k) − h_i(θ₀)‖`` is that of ``d = h(θ_k) − h(θ₀)``, and a change of the laws between two points
is that of the difference of their rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from conslaw_lite.law_stacks import Recorder, Source

# A law whose ‖h_i(θ₀)‖ is at most this times ‖θ_S‖² (S: the tensors its source reads; a law is quadratic in them)
# starts at 0 to round-off, which is about 10⁻¹⁶ of that.
ZERO_LAW = 1e-12


@dataclass
class LawValues:
    """Every law of every group, compared with h(θ₀) a few torch operations at a time.

    :meth:`drift` gives each law's ``‖h_i − h_i(θ₀)‖`` for all laws and records at once, without storing the history
    of h: every source's entries at one record are one row h, each law's entries lie side by side in it, and
    ``np.add.reduceat`` sums their squares segment by segment (numpy: a few thousand numbers, where torch's dispatch
    would cost more than the arithmetic; a tenth of what ``np.bincount`` took on a two-layer Qwen3).

    Examples
    ========
    >>> p = {"a": torch.tensor([3.0, 1.0], dtype=torch.float64), "b": torch.tensor([1.0, 1.0], dtype=torch.float64)}
    >>> units = lambda q: q["a"].square() - q["b"].square()  # two laws, a_i² − b_i², from one source
    >>> values = LawValues.start([(units, [0, 1])], p)
    >>> values.h0.tolist(), values.norm0.tolist()  # the second law starts at 0: no relative drift
    ([8.0, 0.0], [8.0, nan])
    >>> values.drift(np.array([[8.0, 0.0], [7.0, 2.0]])).tolist()
    [[0.0, 0.0], [1.0, 2.0]]
    """

    h0: np.ndarray  # (E,) float64: every entry of every law at θ₀, the sources' values one after the other
    starts: np.ndarray  # (N,) where each law's entries start in h, in the order they lie there
    order: np.ndarray  # (N,) law i's segment among those
    norm0: np.ndarray  # (N,) ‖h_i(θ₀)‖, NaN where it is 0

    @classmethod
    def start(cls, sources: list[Source], params: Mapping[str, torch.Tensor]) -> LawValues:
        """Every law's entries at ``params`` (θ₀), laid out as the ``sources`` give them."""
        values, scales = [], []
        for fn, at in sources:
            read = Recorder(params)
            values.append(fn(read).reshape(len(at), -1))  # (laws of the source, entries per law)
            scales.append(np.full(len(at), sum(float(params[key].square().sum()) for key in read.order)))
        law = np.concatenate([at for _, at in sources])  # the law of each segment
        sizes = np.concatenate([np.full(len(at), v.shape[1]) for (_, at), v in zip(sources, values, strict=True)])
        if not (sizes > 0).all() or not np.array_equal(np.sort(law), np.arange(len(law))):
            raise ValueError("every law must be given by one source, with at least one number")
        starts, order = np.cumsum(sizes) - sizes, np.argsort(law)
        h0 = torch.cat([v.reshape(-1) for v in values]).cpu().numpy()
        norm0 = np.sqrt(np.add.reduceat(h0 * h0, starts)[order])
        # A law that starts at 0 (a key bias initialised to zero, a unit balanced at the start) has no relative drift:
        # NaN, left out of ε. Round-off of a balanced start is not a scale to divide by (ε was 10¹⁴).
        zero = norm0 <= ZERO_LAW * np.concatenate(scales)[order]
        return cls(h0, starts, order, np.where(zero, np.nan, norm0))

    def largest(self, entries: np.ndarray) -> np.ndarray:
        """Each law's largest value of ``entries`` (one per entry of h): shape (N,)."""
        return np.maximum.reduceat(entries, self.starts)[self.order]

    def norms(self, d: np.ndarray) -> np.ndarray:
        """Each law's ``‖d_i‖`` over its entries, for each row of ``d`` (shape (R, E)): shape (R, N)."""
        return np.sqrt(np.add.reduceat(d * d, self.starts, axis=1)[:, self.order])

    def drift(self, h: np.ndarray) -> np.ndarray:
        """``‖h_i(θ_r) − h_i(θ₀)‖`` for each record r (the rows of ``h``, shape (R, E)) and law i: shape (R, N)."""
        return self.norms(h - self.h0)
