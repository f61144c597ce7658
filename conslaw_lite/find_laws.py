"""Find the conservation laws themselves, not only how many: ``find_laws(model, input_shape)``.

A law of degree ≤ 2 is ``h(θ) = Σ_{j≤k} c_jk θ_j θ_k + Σ_j b_j θ_j`` (that is θᵀMθ + bᵀθ).
It is conserved exactly when ``⟨∇h(θ), ∇_θ f_i(x; θ)⟩ = 0`` for every θ, input x and output i,
and ``∇h(θ) = 2Mθ + b`` makes that condition *linear* in the unknown coefficients (c, b):

    Σ_{j≤k} c_jk (g_j θ_k + g_k θ_j) + Σ_j b_j g_j = 0    for every θ and every g ∈ W(θ),

with ``W(θ) = span{∇_θ f_i(x; θ)}``. :func:`find_laws` writes one such row for each of many
random θ (each tensor at the model's scale, brought within 10^±2 of ``nn.Linear``'s: at 10⁻⁶, as LayerScale and ReZero
start, a law's products θ_jθ_k are round-off beside its θ_j, and laws hold at every θ) and random
elements g of W(θ) (random combinations of the Jacobian's rows at random inputs), in float64.
One θ gives at most rank W(θ) independent rows (a deep linear net: at most d·m, whatever its D),
and fewer on one block's coordinates, so the first θ measures that rank on each block and enough
θ are drawn for twice as many *independent* rows as unknowns: with fewer, the missing rank is
an exactly-zero singular value, a spurious "law" that no gap can flag. The laws are the null
space of that matrix.
Rows and columns are scaled to unit length first (:mod:`conslaw_lite.null_space`); a singular value below
``CUT`` times the largest is dropped, and the search is *conclusive* only if, in every block searched, the
smallest kept one exceeds the largest dropped one by ``GAP`` = 10⁴ (the counter's evidence, for the same reason;
a block's σ are weighed against each other only, :func:`~conslaw_lite.null_space.weaker`).

Structure keeps it small. D parameters give D(D+1)/2 + D unknowns, too many to treat
densely beyond D ≈ 100, but every law the book knows couples at most two *layers* (the
tensors of one module: ``Q.weight`` with ``Q.bias``), and within them a few slices along an axis
they share: ‖A_{:,i}‖² − ‖C_{i,:}‖² (hidden unit i), Q_iᵀQ_i − K_iᵀK_i (head i), Σ_e W_e. A layer that
computes q, k and v in one matrix (``nn.Linear(d, 3d)`` split after it, ``nn.MultiheadAttention``'s
``in_proj_weight``) is searched again cut into its parts where its whole falls short. So the
search runs over each layer and pair of layers of at most ``MAX_BLOCK`` = 64 coordinates whole,
over the *unit slices* of larger pairs (unit i's row before and column after it, up to
``MAX_SLICE`` = 96 coordinates; up to 2,376 on their squares alone, as a convolution's channel needs) and of a
layer with the layers reading its output (a pre-norm block's
γ_i² + β_i² − ‖W_q[:, i]‖² − ‖W_k[:, i]‖² − ‖W_v[:, i]‖²: :mod:`conslaw_lite.dataflow`), over the linear laws of
all of θ up to 4,096 coordinates (Σ_i b[i] of a ``Linear`` that a LayerNorm centres, Σ(o.bias − fc2.bias) whose sum
one reads: one unknown per coordinate), then over pairs of slices (per-head matrix laws: one pair solved per axis,
its laws moved to the others) and over the sums of squares of all of θ up to 2,376 coordinates (Σ_j c_j θ_j² + b_j θ_j:
two unknowns per coordinate, the rescaling laws of any number of layers, a residual stream's channel across the layer
before it, both layers of the block and the head; after the blocks, whose laws it would otherwise give as mixes), the
last four only until the laws found reach the count (:mod:`conslaw_lite.law_blocks`); and over the whole of θ only
when all that finds fewer laws than :func:`~conslaw_lite.counting.count_laws` counts and D is small. Up to
``SQUARES_FIRST`` = 2,376 coordinates the sums of squares, with the pairs of the channels they hold laws along and the
Gram-matrix laws of each axis size (all its tensors at once, up to ``MAX_STREAM`` = 4,752 products:
:func:`~conslaw_lite.law_streams.stream_blocks`, the one law of a stream that a LayerNorm reads), are tried first,
right after the layers whole, and kept when they reach the count: the laws of a plain or residual MLP
lie there (two ReLU blocks on a stream of width 6, D = 381: 10 s, where the blocks first took 100 s, most of it on
guesses of fused or grouped layers that an MLP does not have). Where they fall short they are dropped, and the stages
run in the order above.

Limits: D ≤ ``MAX_PARAMS`` = 8,192 parameters (an 8-16-4 MLP with biases, D = 212: 16 laws; a
32-64-16 ReLU MLP, D = 3,072: 64 laws, most of the time in the count); a slice of more than 96
coordinates is searched on its squares alone, one of more than 2,376 left out (the result says how many were);
other laws coupling three layers or more, but sums of squares up to D = 2,376, or more than two slices, are found
only when D ≤ ``MAX_FULL`` = 64. A law that is no polynomial of
degree ≤ 2 is never found: the comparison with the count says how many such laws there are.
Chapter 2's example: ``f(x) = (a·b + c)·x`` keeps a² − b² and (a + b)·e^(−c); only the first is found.

The laws found are brought to reduced row-echelon form (each law has a pivot coefficient 1
that no other law has: the fewest non-zeros an echelon basis can have when the laws' supports
are disjoint, as they are per unit and per head), a basis is chosen from it and the null vectors found, fewest
terms first (two hidden layers: each layer's unit laws), rounded to small rationals where the
rounded law still passes :func:`~conslaw_lite.counting.check_laws`, checked one by one (a law that
fails is left out, and the result is then inconclusive), and printed by
:mod:`conslaw_lite.polynomial_laws` with tensor names and indices, grouped into patterns.
When linear laws ℓ exist (e.g. Σ_e W_e for a softmax gate), their products ℓ_i ℓ_j are
quadratic laws too, but add nothing: they are left out of the basis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from conslaw_lite.counting import RESIDUAL_TOL, LawCheck, LawCount, Model, check_laws, count_laws
from conslaw_lite.counting.check import check_count_of
from conslaw_lite.counting.exact_ops import quiet_vmap
from conslaw_lite.counting.problem import Problem, outputs_note, problem_of
from conslaw_lite.dataflow import readers_of
from conslaw_lite.exact_linalg import rational
from conslaw_lite.law_basis import reduced_basis
from conslaw_lite.law_blocks import (
    MAX_SLICE,
    MAX_SQUARES,
    SLICE_SECONDS,
    Plan,
    slice_pairs,
    squares_only,
)
from conslaw_lite.law_moves import with_moved_laws
from conslaw_lite.law_search import Samples, Search, Span, Stopped, assembled, block_laws, within_budget
from conslaw_lite.law_streams import channel_slices, stream_blocks
from conslaw_lite.laws import Params
from conslaw_lite.null_space import gap
from conslaw_lite.polynomial_laws import Layout, PolynomialLaw, group_laws
from conslaw_lite.search_plans import layout_searches
from conslaw_lite.slice_laws import Units, pair_laws, tally, unit_laws
from conslaw_lite.time_limit import OutOfTime, check_time, past_limits, time_limit

MAX_PARAMS = 8192  # D beyond which find_laws refuses (count_laws's basis is 0.5 GB there, its count minutes)
MAX_FULL = 64  # D up to which the whole of θ is searched when the pairs fall short
SQUARES_FIRST = MAX_SQUARES  # D up to which the sums of squares are tried before the blocks (module docstring)
MAX_STREAM = 2 * MAX_SQUARES  # products of an axis size's Gram block tried with them (4,752: about 12 s on 2 cores)
ROUND_DENOMINATOR = 12  # coefficients become fractions p/q with q ≤ 12 when the law still passes
# a search some of whose laws fail check_laws is run once more from seed + RETRY_SEED (streams apart from the first
# search's seed + 1): a residual MLP with its branch's last layer at 0 found 6 junk sums of squares at one seed of 4
RETRY_SEED = 7919
DROPPED = 1e-4  # terms under this share of a law's largest are dropped where the law then passes, and not before


@dataclass(frozen=True)
class FoundLaws:
    """The laws :func:`find_laws` found, readable, and how they compare with the count.

    ``laws`` maps each printed pattern (``"for i in 0..5: ‖A[:, i]‖² − ‖B[i, :]‖²"``) to a
    function of the parameter dict, as :func:`conslaw_lite.laws.law_functions` does (a pattern
    over many indices returns the vector of its laws): :func:`~conslaw_lite.counting.check_laws`
    and :class:`~conslaw_lite.monitor.Monitor` take it. ``basis`` holds every scalar law
    with its coefficients; ``num_found`` how many are functionally independent (the rank of
    their gradients: ``W₁W₁ᵀ − W₂ᵀW₂`` of a linear net 2 → 5 → 2 is 15 polynomials, 14 independent);
    ``count`` the :class:`~conslaw_lite.counting.LawCount`; ``check`` the laws' ``check_laws``.

    ``conclusive`` is the certificate: the null space had a clear gap, every law returned
    passes ``check_laws`` (residual ≤ ``RESIDUAL_TOL``; a law that fails is left out of
    ``laws`` and ``basis``, and makes the result inconclusive) and, when the count is
    conclusive, ``num_found ≤ N``. Otherwise ``reason`` names what failed. ``complete``:
    conclusive and ``num_found == N``.
    """

    laws: dict[str, Callable[[Params], torch.Tensor]]
    basis: tuple[PolynomialLaw, ...]
    num_found: int
    count: LawCount
    check: LawCheck
    complete: bool
    conclusive: bool
    reason: str
    searched: str  # "pairs of layers" or "all of θ"
    sigma_kept: float  # the smallest kept singular value of the searched system with the smallest gap
    sigma_dropped: float  # the largest dropped one of that system
    degree: int
    seconds: float
    stopped: str = ""  # why the search stopped before its end: its time limit (seconds=), or "" when it did not
    left_out: int = 0  # laws the search returned that failed check_laws, left out

    @classmethod
    def not_searched(cls, count: LawCount, stopped: str, degree: int = 2) -> FoundLaws:
        """No law: a time limit around the search (``stopped`` says which) ended before it began. The count stands.

        Examples
        ========
        >>> from conslaw_lite.families.toy.block import ToyProduct
        >>> count = count_laws(ToyProduct(a=1.0, b=2.0), (1,))
        >>> print(FoundLaws.not_searched(count, "stopped at its time limit of 1 s").message)
        found 0 of N = 1: the search stopped at its time limit of 1 s, before it began
        """
        check = LawCheck(0.0, {}, 0, count.num_laws, False, count)
        stopped = f"{stopped}, before it began"
        return cls({}, (), 0, count, check, False, True, "", "", math.nan, math.nan, degree, math.nan, stopped)

    @property
    def gap(self) -> float:
        """``sigma_kept / sigma_dropped`` (infinite when nothing was dropped)."""
        return gap(self.sigma_kept, self.sigma_dropped)

    @property
    def message(self) -> str:
        """One line: how many laws were found against the count ``N``, and what that means (and, for a model that
        returns several tensors, that the laws keep them all: :func:`~conslaw_lite.counting.problem.outputs_note`)."""
        note = outputs_note(self.count.outputs)
        return f"{self.verdict}; {note}" if note else self.verdict

    @property
    def verdict(self) -> str:
        """:attr:`message` without the note on several outputs: what a part of a model, whose outputs the rest of the
        model reads, is told."""
        kind = "quadratic" if self.degree == 2 else "linear"
        found = f"{len(self.basis)} {kind} law{'' if len(self.basis) == 1 else 's'} found"
        if len(self.basis) > self.num_found:  # e.g. W₁W₁ᵀ − W₂ᵀW₂ when W₁ has more rows than columns
            found += f" ({self.num_found} independent)"
        if not self.conclusive:
            return f"inconclusive: {self.reason}"
        stop = f"the search {self.stopped}" if self.stopped else ""
        if not self.count.conclusive:
            return f"{found}; the count is inconclusive ({self.count.reason})" + (f"; {stop}" if stop else "")
        n, missing = self.count.num_laws, self.count.num_laws - self.num_found
        if self.complete:
            return f"{found}; N = {n}: the list is complete"
        head = f"found {self.num_found} of N = {n}: "
        if stop and not self.basis and not self.searched:
            return head + stop
        if stop:
            return head + f"{stop} before it found the other {missing}"
        if self.searched != "all of θ":  # blocks of θ only: a law across more of it is not excluded
            squares = ", sums of squares of all of θ" if "sums of squares of all of θ" in self.searched else ""
            where = (
                "layers and pairs of layers of ≤ 64 coordinates, hidden units and pairs of them, fused layers cut in "
                f"parts{squares}; a law across other slices is not excluded"
            )
            return head + f"the other {missing} {'is' if missing == 1 else 'are'} not in the blocks searched ({where})"
        what = f"is not a {kind} polynomial" if missing == 1 else f"are not {kind} polynomials"
        return head + f"{missing} law{'' if missing == 1 else 's'} {what}"

    def __str__(self) -> str:
        return "\n".join([self.message, *(f"  {name}" for name in self.laws)])

    def to_dict(self) -> dict:
        """JSON-ready: the message, the evidence, the laws as strings and each scalar law's coefficients.

        ``coefficients`` lists, per scalar law, its text and its terms ``[c, [tensor, index], [tensor, index]]``
        (c·θ_tensor[index]·θ_tensor[index]; a linear term has one factor).
        """
        return {
            "message": self.message,
            "num_found": self.num_found,
            "complete": self.complete,
            "conclusive": self.conclusive,
            "reason": self.reason,
            "searched": self.searched,
            "sigma_kept": self.sigma_kept,
            "sigma_dropped": self.sigma_dropped,
            "stopped": self.stopped,
            "laws": list(self.laws),
            "coefficients": [{"law": law.text(), "terms": law.coefficient_list()} for law in self.basis],
        }


@quiet_vmap()  # torch's note on vmap's speed, at each of the search's many calls
def find_laws(
    model: Model,
    input_shape: tuple[int, ...] | None = None,
    *,
    degree: int = 2,
    inputs: torch.Tensor | None = None,
    params: Params | None = None,
    seed: int = 0,
    count: LawCount | None = None,
    seconds: float | None = None,
) -> FoundLaws:
    """Every conservation law ``h(θ) = θᵀMθ + bᵀθ`` of ``model``, readable, checked against the count.

    ``model``, ``input_shape``, ``inputs``, ``params`` and ``seed`` are those of
    :func:`~conslaw_lite.counting.count_laws` (and bad input gets its messages); ``count`` is that
    function's result if already computed. ``degree=1`` looks for linear laws ``bᵀθ`` only. ``seconds``: a limit on
    the time of the count and the search, each stopped within one step of it: a count stopped raises
    :class:`~conslaw_lite.time_limit.OutOfTime` (a ``TimeoutError``); a search stopped returns the laws found so far,
    each checked as always, not ``complete``, with :attr:`FoundLaws.stopped` and the message saying so. A search
    some of whose laws fail :func:`~conslaw_lite.counting.check_laws` (θ drawn where its rows fell short) is run once
    more on other random θ, and that one is returned if it is conclusive.
    See the module docstring for the method and its limits: D ≤ ``MAX_PARAMS`` = 8,192; layers and
    pairs of layers of more than 64 coordinates are searched per unit slice (≤ 96 coordinates) and
    pair of slices; laws coupling more than two layers, but for a layer and those reading its output, linear
    laws and (D ≤ 2,376) sums of squares, are found only when D ≤ ``MAX_FULL`` = 64.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> print(find_laws(ToyProduct(a=1.0, b=2.0), (1,)))  # f = a·b·x
    1 quadratic law found; N = 1: the list is complete
      a² − b²
    >>> import torch
    >>> linear = lambda p, x: x @ p["B"].T @ p["A"].T  # f = ABx, r = 2: AᵀA − BBᵀ
    >>> found = find_laws(linear, (3,), params={"B": torch.ones(2, 3), "A": torch.ones(3, 2)})
    >>> found.num_found, found.complete, list(found.laws)
    (3, True, ['B Bᵀ − Aᵀ A (2×2)'])
    """
    start = time.perf_counter()
    found = _find_laws(model, input_shape, degree, inputs, params, seed, count, seconds)
    rest = None if seconds is None else seconds - (time.perf_counter() - start)
    if found.left_out and not found.stopped and (rest is None or rest > 0):  # unlucky θ: once more, on others
        try:
            again = _find_laws(model, input_shape, degree, inputs, params, seed + RETRY_SEED, found.count, rest)
        except OutOfTime:
            again = found
        found = again if again.conclusive else found
    return replace(found, seconds=time.perf_counter() - start)


def _find_laws(model, input_shape, degree, inputs, params, seed, count, seconds) -> FoundLaws:
    """One search of :func:`find_laws`, its θ drawn from ``seed``."""
    start = time.perf_counter()
    if degree not in (1, 2):
        raise ValueError(f"degree must be 1 (linear laws) or 2 (quadratic laws), got {degree!r}")
    problem = problem_of(model, params)
    D = problem.num_params
    if D > MAX_PARAMS:
        raise ValueError(
            f"find_laws handles models of at most {MAX_PARAMS} parameters; this one has D = {D:,}. A narrower model "
            "of the same architecture has the same law patterns (per unit, per head); "
            "count_laws(model, input_shape) still counts this one's laws, and "
            "conslaw_lite.rescaling_laws.rescaling_laws(model, input_shape) gives those of its rescaled units, "
            "checked but not counted"
        )
    with time_limit(seconds):  # stops at a step of the count or the search (time_limit)
        layout = _layout(problem)
        readers = readers_of(problem, input_shape, inputs, seed)
        if count is None:
            count = count_laws(model, input_shape, inputs=inputs, params=params, seed=seed)
        check_count_of(count, problem, input_shape, inputs)
        searches = layout_searches(layout, degree, readers)
        search, stopped = _search_blocks(problem, input_shape, inputs, seed, degree, searches, count)
        basis = reduced_basis(search.vectors, search.columns, degree, search.gap)
        if D <= MAX_SQUARES:
            basis = with_moved_laws(basis, search.vectors, search.columns, layout, degree, search.gap)
        stopped = stopped or _past_limit()  # shortening the laws ran past it: they are the same span
        if search.conclusive and _short(basis, count) and D <= MAX_FULL and not stopped:
            samples = Samples.draw(problem, input_shape, inputs, seed + 1, [list(range(D))], degree)
            search = block_laws(samples, [list(range(D))], degree, "all of θ")
            basis = reduced_basis(search.vectors, search.columns, degree, search.gap)
    with past_limits():  # what the search found is checked, however it stopped (an outer limit too)
        laws = _rounded(model, problem, basis, input_shape, inputs, params, seed, count)
        numbered = {str(n): law for n, law in enumerate(laws)}
        each = check_laws(model, numbered, input_shape, inputs=inputs, params=params, seed=seed, count=count)
        passing = [law for n, law in enumerate(laws) if each.residuals[str(n)] <= RESIDUAL_TOL]
        grouped = group_laws(passing)
        check = check_laws(model, grouped, input_shape, inputs=inputs, params=params, seed=seed, count=count)
    reason = _verdict(search, len(laws) - len(passing), len(laws), each.max_residual, check, count)
    return FoundLaws(
        laws=grouped,
        basis=tuple(passing),
        num_found=check.independent,
        count=count,
        check=check,
        complete=not reason and check.complete,
        conclusive=not reason,
        reason=reason,
        searched=search.searched,
        sigma_kept=search.sigma_kept,
        sigma_dropped=search.sigma_dropped,
        degree=degree,
        seconds=time.perf_counter() - start,
        stopped=stopped,
        left_out=len(laws) - len(passing),
    )


def _verdict(search: Search, failed: int, total: int, max_residual: float, check: LawCheck, count: LawCount) -> str:
    """Why the laws found are no certificate, ``""`` when they are one.

    Conclusive means: the null space had a clear gap, every law returned passes
    check_laws (those that fail are left out, and the search is then not trusted either),
    and they are no more independent laws than the count's N.
    """
    reasons = [search.reason] if search.reason else []
    if failed:
        reasons.append(
            f"{failed} of the {total} laws found fail check_laws (max residual {max_residual:.1e} > "
            f"{RESIDUAL_TOL:.0e}) and are left out"
        )
    if count.conclusive and check.independent > count.num_laws:
        reasons.append(f"{check.independent} independent laws found, more than the count N = {count.num_laws}")
    return "; ".join(reasons)


def _short(basis: list[dict], count: LawCount) -> bool:
    """The pairs found fewer laws than counted (or the count is inconclusive): worth searching all of θ."""
    return not count.conclusive or len(basis) < count.num_laws


def _search_blocks(
    problem: Problem, input_shape, inputs, seed: int, degree: int, searches: list[tuple[str, Plan, Layout]], count
) -> tuple[Search, str]:
    """Layers and pairs of layers whole, then unit slices of the larger pairs, the larger layers' linear laws, then
    pairs of slices (:mod:`conslaw_lite.law_blocks`), then grouped unit slices and their pairs; each stage on every
    ``(label, plan, layout)`` in turn (θ's own layers, then with fused layers cut:
    :func:`~conslaw_lite.search_plans.fused_layout`), a block met before left out, and the pairs of slices first of the
    layout whose unit slices hold laws on the most axes (a fused qkv's cut heads, not its whole rows); all but the first
    stage only until the laws found reach the count. With the search, why it stopped before the end (``""``: it did
    not): a time limit (:mod:`conslaw_lite.time_limit`) reached in a stage keeps the laws of the stages before it."""
    target = count.num_laws if count.conclusive else None
    span = Span()
    enough = None if target is None else (lambda v: span.reaches(v, degree, target))
    found, lawful, later, seen = Units([], math.inf, 0.0, 0, 0), {}, [], set()
    paired, drawn = {}, {}  # per (search, kind of slices): their pairs, their samples
    slice_work, pair_work = [0.0], {}  # spent on unit slices by all searches, on pairs by each and by θ's channels
    notes: dict[str, list[str]] = {label: [] for label, _, _ in searches}
    theta = searches[0][0]  # θ's own layers' label
    confirmed: dict[tuple, tuple[Search, str]] = {}  # confirmed_laws' results by (tier, blocks)

    def short() -> bool:
        return enough is None or not enough(found.vectors)

    def new(blocks: list, coords=lambda block: block) -> list:
        kept = [b for b in blocks if tuple(coords(b)) not in seen]
        seen.update(tuple(coords(b)) for b in kept)
        return kept

    def units_of(label: str, slices: list, layout: Layout, kind: str) -> None:
        products = {tuple(c): squares_only(len(c)) for _, c in slices} if kind == "large" else None
        samples = Samples.draw(problem, input_shape, inputs, seed, [c for _, c in slices], degree, 1, products)
        units = found.join(unit_laws(samples, layout, slices, degree, enough, found.vectors, slice_work))
        lawful[label, kind] = (slices, frozenset(units.lawful))
        later.append((label, samples, units.later))
        wide = f"unit slices over {MAX_SLICE} coordinates" + (", on their squares" if degree == 2 else "")
        notes[label].append(tally(len(slices), wide if products else f"{kind} unit slices".lstrip(), units))

    def pairs_of(label: str, layout: Layout, kind: str, others: bool) -> None:
        """The pairs of slices of the axes with unit laws, or with ``others``, of the axes without."""
        if (label, kind) not in lawful or target is None or not short():
            return
        if (label, kind) not in paired:
            paired[label, kind] = slice_pairs(*lawful[label, kind], layout)
        pairs, left = paired[label, kind]
        scope = [p for p in pairs if (p[0] in lawful[label, kind][1]) != others]
        left = 0 if others else left  # those over the size limit, said once
        if scope:
            if (label, kind) not in drawn:
                blocks, products = [p[3] for p in pairs], {tuple(p[3]): p[4] for p in pairs if p[4] is not None}
                drawn[label, kind] = Samples.draw(problem, input_shape, inputs, seed, blocks, degree, 2, products)
            reached = lambda v: enough(found.vectors + v)  # noqa: E731
            axes, spent = lawful[label, kind][1], pair_work.setdefault((label, kind == "channel"), [0.0])
            units = pair_laws(drawn[label, kind], layout, pairs, degree, reached, axes, others, spent)
            found.join(units)
            named = f"pairs of {kind + ' ' if kind else ''}slices" + (" of axes without unit laws" if others else "")
            notes[label].append(tally(len(scope), named, units))
        if left:
            notes[label].append(f"{left} pairs of slices left out (over {MAX_SLICE} coordinates)")

    def confirmed_laws(blocks: list[list[int]], degree: int, tier: int, products=None) -> tuple[Search, str]:
        """Laws of blocks across many layers, where fresh θ keep them too (Search.confirmed), and a note of the rest;
        solved once (the sums of squares dropped after they were tried first come back the same)."""
        key = (tier, tuple(map(tuple, blocks)))
        if key not in confirmed:
            samples = Samples.draw(problem, input_shape, inputs, seed, blocks, degree, tier, products)
            fresh = Samples.fresh(problem, input_shape, inputs, seed, tier + 10, samples.g.shape[1])
            try:
                search = block_laws(samples, blocks, degree, "").confirmed(fresh)
            except Stopped as stop:  # its blocks' laws are not confirmed yet: none kept
                raise OutOfTime(str(stop)) from None
            removed = f" ({search.removed} directions that fresh θ break left out)" if search.removed else ""
            confirmed[key] = search, removed
        return confirmed[key]

    def sums_of_squares() -> None:
        """All of θ on its squares (D ≤ MAX_SQUARES): a law across any number of layers (a residual stream's channel);
        after the searches whose laws print alone (its null vectors mix them), θ's own grouped-query heads' pairs too
        (a Llama's RoPE blocks), before the guesses of a layer cut in grouped-query parts (a minute in an MLP)."""
        every = list(range(problem.num_params))
        if degree == 1 or len(every) > MAX_SQUARES or not short():
            return
        squares, removed = confirmed_laws([every], 2, 4, {tuple(every): squares_only(len(every))})
        if squares.conclusive:  # else left out: no clear gap on all of θ does not make the blocks' laws doubtful
            found.add(squares)  # and the channels it holds laws along are paired (a residual stream's Gram law)
            channels = channel_slices(searches[0][2], squares.vectors, squares.columns)
            lawful[theta, "channel"] = (channels, frozenset(key[:4] for key, _ in channels))
        said = "sums of squares of all of θ" if squares.conclusive else "squares of all of θ without a clear gap"
        notes[theta].append(said + removed if squares.conclusive else f"{said}, left out")

    def grouped_heads(label: str, plan: Plan, layout: Layout) -> None:
        """Grouped-query heads' unit slices and their pairs, before the axes without unit laws."""
        grouped = new(plan.grouped, lambda s: s[1])
        if grouped and target is not None and short():
            units_of(label, grouped, layout, "grouped")
            pairs_of(label, layout, "grouped", False)
            pairs_of(label, layout, "grouped", True)

    def squares_first() -> bool:
        """Sums of squares of all of θ and the pairs of the channels they give, tried right after θ's own layers whole:
        kept when with them the laws reach the count (a residual MLP, whose stream's laws lie there, and which would
        otherwise spend a minute on guesses: its layers cut in parts, a head and a hidden layer taken for grouped
        queries), else dropped and searched again in their turn, so that the laws of the blocks before print alone."""
        before = (list(found.vectors), found.sigma_kept, found.sigma_dropped, found.solved, list(notes[theta]))
        sums_of_squares()
        pairs_of(theta, searches[0][2], "channel", False)
        for n, coords, products in stream_blocks(searches[0][2]):
            if short() and len(products) <= MAX_STREAM:
                search, removed = confirmed_laws([coords], 2, 5, {tuple(coords): products})
                if search.conclusive:
                    found.add(search)
                    notes[theta].append(f"Gram laws of the axes of size {n}{removed}")
        if not short():
            return True
        # the squares, their channels' pairs and samples stay solved and drawn: in their turn they come back the same
        found.vectors, found.sigma_kept, found.sigma_dropped, found.solved, notes[theta] = before
        lawful.pop((theta, "channel"), None)
        pair_work.pop((theta, True), None)
        return False

    def stages() -> None:
        """Every stage in turn; a stop at the time limit leaves the laws of the stages before it."""
        for n, (label, plan, _) in enumerate(searches):
            whole = new(plan.whole)
            if whole and (n == 0 or short()):
                samples = Samples.draw(problem, input_shape, inputs, seed, whole, degree)
                found.add(block_laws(samples, whole, degree, ""))
                notes[label] += [f"{len(whole)} layers and pairs of them whole"] if n else []
            quadratic = degree == 2  # the squares, the stream's Gram laws: stages of quadratic laws only
            if n == 0 and quadratic and target is not None and problem.num_params <= SQUARES_FIRST and squares_first():
                return
        for label, plan, layout in searches:
            slices = new(plan.slices, lambda s: s[1])
            if slices and short():
                units_of(label, slices, layout, "")
        for label, plan, layout in searches:
            large = new(plan.squares, lambda s: s[1])
            if large and short():
                units_of(label, large, layout, "large")
        linear = new([b for _, plan, _ in searches for b in plan.linear])
        if linear and short():
            search, removed = confirmed_laws(linear, 1, 3)
            found.add(search)
            whole_theta = linear[0] == list(range(problem.num_params))
            said = "linear laws of all of θ" if whole_theta else f"linear laws of {len(linear)} layers"
            notes[theta].append(said + removed)
        by_laws = sorted(searches, key=lambda search: -len(lawful.get((search[0], ""), ((), ()))[1]))  # a head's first
        for label, _, layout in by_laws:
            pairs_of(label, layout, "", False)
        grouped_heads(*searches[0])
        sums_of_squares()  # after θ's own heads, before those of a layer cut in parts (a guess)
        pairs_of(theta, searches[0][2], "channel", False)
        for search in searches[1:]:
            grouped_heads(*search)
        for label, _, layout in by_laws:
            pairs_of(label, layout, "", True)
        for label, samples, rest in later:
            if rest and short():
                reached = enough and (lambda v: enough(found.vectors + v))
                search, left = within_budget(samples, rest, degree, slice_work, SLICE_SECONDS, reached)
                found.add(search)
                over = f", {left} over the budget" if left else ""
                said = f"{len(rest)} unit slices whose axis's first has no law: {search.blocks} solved{over}"
                notes[label].append(said)

    stopped = ""
    try:
        stages()
    except Stopped as stop:  # the laws of the blocks solved before it are kept, and checked as any others
        found.add(stop.found)
        stopped = str(stop)
    except OutOfTime as stop:  # between blocks: drawing samples, confirming sums of squares
        stopped = str(stop)
    ran = [search for search in searches if notes[search[0]] or search is searches[0]]
    for label, plan, _ in ran:
        if plan.over or (plan.large and not plan.slices):
            notes[label].append(f"{plan.over} slices over {MAX_SLICE} coordinates left out")
    searched = "; ".join(label + (f" ({'; '.join(notes[label])})" if notes[label] else "") for label, _, _ in ran)
    return assembled(span.independent(found.vectors), found.sigma_kept, found.sigma_dropped, searched), stopped


def _past_limit() -> str:
    """Why the search stops here (its time limit has passed), or ``""``."""
    try:
        check_time()
    except OutOfTime as stop:
        return str(stop)
    return ""


def _layout(problem: Problem) -> Layout:
    return Layout(tuple(problem.shapes), tuple(tuple(s) for s in problem.shapes.values()))


def _rounded(model, problem: Problem, basis: list[dict], input_shape, inputs, params, seed, count) -> list:
    """Each law with its coefficients rounded where that still passes check_laws: to a small rational within 10⁻⁶ of
    the largest, 0 included (a null vector's round-off, 10⁻⁹ beside an irrational 0.2959), the others as they are.
    Terms under that are 0 first: the check cannot see them (a cosine of 10⁻⁹ passes), and a linear law 8·10⁸ times
    a quadratic round-off (its coefficients 1, 34/9, 6/7: the nearest fractions) drifted at first order. Within
    ``DROPPED`` of the largest, the same, where the law still passes then: a tensor far below the others' scale (timm's
    MLP biases, initialised at 10⁻⁶, searched at 10⁻²) amplifies the round-off of its columns (``3·10⁻⁵ fc2.bias[1]²``
    beside 1, a residual of 6·10⁻¹⁰ that passed; 10⁻¹⁶ without), and a true term, or fraction, that far off fails."""
    layout = _layout(problem)
    exact = [PolynomialLaw(law, layout) for law in basis]
    tries = {}
    for n, law in enumerate(basis):
        largest = max(map(abs, law.values()))
        for level, drop in (("fine", 1e-6 * largest), ("coarse", DROPPED * largest)):
            near = {m: 0 if abs(c) <= drop else rational(c, ROUND_DENOMINATOR, drop) for m, c in law.items()}
            if any(f is not None for f in near.values()):
                kept = {m: c if near[m] is None else near[m] for m, c in law.items() if near[m] != 0}
                tries[f"{level}{n}"] = PolynomialLaw(kept, layout)
    if not tries:
        return exact
    passes = check_laws(model, tries, input_shape, inputs=inputs, params=params, seed=seed, count=count).residuals
    passing = {key: law for key, law in tries.items() if passes[key] <= RESIDUAL_TOL}
    return [passing.get(f"coarse{n}", passing.get(f"fine{n}", law)) for n, law in enumerate(exact)]
