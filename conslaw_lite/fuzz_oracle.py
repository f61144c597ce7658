"""An oracle for N that shares no code with the counter, and the grading of a count against it.

The oracle *sandwiches* N = D − dim Lie(W) for a case of :mod:`conslaw_lite.fuzz`:

* **lower bound**: the case's closed-form laws (theory, chapters 02–05). At the oracle's own
  θ, each law entry must have ``|⟨∇h, ∇f_i(x)⟩| ≤ LAW_TOL ‖∇h‖‖∇f_i(x)‖`` on every input of every
  scale (else theory and model disagree: :class:`OracleError`); the lower bound is the number of
  singular values of the stacked unit ∇h above ``RANK_TOL``.
* **upper bound**: ``D − r`` with r a *provable* lower bound of dim Lie(W)(θ). The vectors are
  the rows of the Jacobian ∇_θ f(x; θ) over inputs x at several scales (0.1 to 100: capped units
  saturate, so their flat pieces are seen) and brackets ``[X_a, X_b] = H_b X_a − H_a X_b`` of
  fields ``X_a = Σ a_i ∇f_i``, the Hessian products ``H_a v`` by reverse over reverse mode
  (H_a is symmetric: ``H_a v = J_{X_a}ᵀ v``, one more vector-Jacobian product; no forward mode).
  A Jacobian row is divided by its norm; a bracket by ``10·ν_b‖X_a‖ + 10·ν_a‖X_b‖`` (ν_a: the
  largest ‖H_a v‖/‖v‖ seen, v random probes among them), a bound of the terms' round-off scale even
  where ``H_b X_a`` cancels to nothing, so round-off stays ≲ 1e-13 of every vector, and r counts
  singular values above ``RANK_TOL`` = 1e-7 (Weyl's inequality: the exact vectors have at least
  that rank). Every vector lies in Lie(W) at θ, hence N ≤ D − r
  at generic θ; for piecewise-linear units the same holds for the laws of the whole
  parameter space (those are conserved by the fields of every activation pattern met).
  The bound is taken at up to ``MAX_DRAWS`` θ (own scales, not the case's: N of an analytic
  model is the same at every generic θ) and the smallest is kept.

When the bounds meet the oracle knows N; otherwise the case is *undecided*.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch
from torch.func import functional_call, jacrev, vjp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from conslaw_lite.fuzz import Case
from conslaw_lite.seeding import Stream, generator

# Every stacked vector has length ≤ 1 and round-off ≲ 1e-13 of it, so the error matrix E of m ≤ 10⁴ rows has
# ‖E‖₂ ≤ ‖E‖_F ≲ 1e-11; by Weyl's inequality a computed singular value above RANK_TOL is a nonzero exact one.
RANK_TOL = 1e-7
LAW_TOL = 1e-8  # a conserved law's cosine with any gradient row: round-off, far below
INPUT_SCALES = (0.1, 1.0, 10.0, 100.0)
THETA_SCALES = (0.6, 1.5, 0.3)  # the oracle's θ: entries N(0, s²), one s per draw
MAX_DRAWS = len(THETA_SCALES)
FIELDS = 12  # random fields X_a whose Hessians give the depth-2 brackets
PROBES = 4  # random vectors the Hessians are applied to as well: estimates of their norms

OUTCOMES = ("right", "inconclusive", "refused", "wrong", "undecided", "error", "oracle-error")


class OracleError(RuntimeError):
    """The generator's theory is contradicted by the model (a law not conserved): a bug in the fuzz suite."""


@dataclass(frozen=True)
class Bounds:
    """``lower ≤ N ≤ upper``; ``exact`` is N when they meet."""

    lower: int
    upper: int
    num_params: int
    draws: int
    depth: int  # deepest bracket used
    seconds: float

    @property
    def exact(self) -> int | None:
        return self.lower if self.lower == self.upper else None


def numeric_rank(rows: torch.Tensor) -> int:
    """Singular values of ``rows`` (each of length ≤ 1) above ``RANK_TOL``: a rank the exact rows have at least.

    Examples
    ========
    >>> numeric_rank(torch.tensor([[1.0, 0.0], [1.0, 1e-12]], dtype=torch.float64))
    1
    """
    if rows.numel() == 0:
        return 0
    return int((torch.linalg.svdvals(rows) > RANK_TOL).sum())


def _unit(rows: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    keep = size > 0
    return rows[keep] / size[keep, None]


class _Flat:
    """The case's module as θ (D,) ↦ f(θ; X) flattened, in float64."""

    def __init__(self, case: Case) -> None:
        self.module = copy.deepcopy(case.model).double()
        self.shapes = {n: p.shape for n, p in self.module.named_parameters()}
        self.sizes = [math.prod(s) for s in self.shapes.values()]
        self.D = sum(self.sizes)

    def params(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.reshape(s) for (n, s), t in zip(self.shapes.items(), torch.split(theta, self.sizes))}

    def outputs(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.params(theta), (x,)).reshape(-1)


def _inputs(case: Case, flat: _Flat, gen: torch.Generator) -> torch.Tensor:
    probe = torch.zeros(1, *case.input_shape, dtype=torch.float64)
    out = flat.outputs(torch.zeros(flat.D, dtype=torch.float64), probe).numel()
    per_scale = max(16, math.ceil(2 * flat.D / out))  # 2D rows a scale: the ones of one scale alone span W
    xs = [s * torch.randn(per_scale, *case.input_shape, generator=gen, dtype=torch.float64) for s in INPUT_SCALES]
    return torch.cat(xs)


def _column_weights(J: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """One weight per parameter tensor: the inverse of its share of the unit rows (a diagonal: rank unchanged)."""
    shares = torch.stack([part.pow(2).mean().sqrt() for part in torch.split(J, sizes, dim=1)])
    shares = shares.clamp_min(1e-3 * float(shares.max()))
    return torch.cat([torch.full((n,), 1.0 / float(s), dtype=J.dtype) for s, n in zip(shares, sizes)])


def _field(flat: _Flat, x: torch.Tensor, a: torch.Tensor):
    """θ ↦ X_a(θ) = ∇_θ⟨a, f(θ; x)⟩ (one vector-Jacobian product)."""
    return lambda t: vjp(lambda u: flat.outputs(u, x), t)[1](a)[0]


def _hessian_products(flat: _Flat, theta, x, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``HV[i, j] = H_{a_i} V_j``: H_a is a symmetric Hessian, so ``H_a v = (J_{X_a})ᵀv`` is one more vjp."""
    out = []
    for a in A:
        _, back = vjp(_field(flat, x, a), theta)
        out.append(vmap(lambda v: back(v)[0])(V))
    return torch.stack(out)


def _bounds_at(case: Case, flat: _Flat, scale: float, gen: torch.Generator, lower: int):
    """(lower, upper, depth) at one random θ: laws' rank, ``D − r`` (r: provable rank of rows and brackets)."""
    theta = scale * torch.randn(flat.D, generator=gen, dtype=torch.float64)
    G = _law_gradients(case, flat, theta)
    target = lower = max(lower, numeric_rank(G))
    x = _inputs(case, flat, gen)
    J = jacrev(lambda t: flat.outputs(t, x))(theta)
    _check_conserved(case, G, J)
    w = _column_weights(_unit(J, J.norm(dim=1)), flat.sizes)
    stack = _unit(J * w, (J * w).norm(dim=1))
    rank, depth = numeric_rank(stack), 1
    try:
        if flat.D - rank > target:
            row_norms = J.norm(dim=1)
            A = torch.randn(FIELDS, len(J), generator=gen, dtype=torch.float64) / row_norms.clamp_min(1e-300)
            A = A * (row_norms > 0)
            X = A @ J
            probes = torch.randn(PROBES, flat.D, generator=gen, dtype=torch.float64)
            HV = _hessian_products(flat, theta, x, A, torch.cat([X, probes]))  # HV[i, j] = H_i V_j
            # ‖H_i‖₂ from above, about: a random probe keeps a fair share of the top singular direction
            nu = (HV.norm(dim=2) / torch.cat([X, probes]).norm(dim=1).clamp_min(1e-300)).amax(1) * 10
            HX = HV[:, :FIELDS]
            i, j = torch.triu_indices(FIELDS, FIELDS, 1)
            brackets = (HX[j, i] - HX[i, j]) * w  # [X_i, X_j] = H_j X_i − H_i X_j
            # round-off of H_j X_i is ε‖H_j‖‖X_i‖ even where H_j X_i cancels: the size divides by that bound
            size = (nu[j] * X[i].norm(dim=1) + nu[i] * X[j].norm(dim=1)) * float(w.max())
            stack = torch.cat([stack, _unit(brackets, size)])
            rank, depth = numeric_rank(stack), 2
    except (RuntimeError, NotImplementedError):  # no double derivative in torch (hardsigmoid): the rows alone
        pass
    return lower, flat.D - rank, depth


def _law_gradients(case: Case, flat: _Flat, theta: torch.Tensor) -> torch.Tensor:
    """The unit gradients of the law entries at θ that vary there (L, D)."""
    if not case.laws:
        return torch.zeros(0, flat.D, dtype=torch.float64)
    h = lambda t: torch.cat([law(flat.params(t)).reshape(-1) for law in case.laws.values()])  # noqa: E731
    G = jacrev(h)(theta)
    norms = G.norm(dim=1)
    varying = norms > 1e-12 * float(norms.max().clamp_min(1e-300))
    return G[varying] / norms[varying, None]


def _check_conserved(case: Case, G: torch.Tensor, J: torch.Tensor) -> None:
    """Every law entry orthogonal to every gradient row, to round-off (else :class:`OracleError`)."""
    rows = J[J.norm(dim=1) > 0]
    cosines = (G @ rows.T).abs() / rows.norm(dim=1)[None, :]
    if cosines.numel() and float(cosines.max()) > LAW_TOL:
        raise OracleError(f"case {case.seed} ({case.description}): a law is not conserved, cosine {cosines.max():.1e}")


def oracle_bounds(case: Case, seed: int = 0) -> Bounds:
    """``lower ≤ N ≤ upper`` for a case that must be counted (see the module docstring).

    Examples
    ========
    >>> from conslaw_lite.fuzz import make_case
    >>> b = oracle_bounds(make_case(3, "glu"))  # one law per hidden unit, and no more
    >>> b.exact == b.lower == len(make_case(3, "glu").model.A.weight[0])
    True
    """
    start = time.perf_counter()
    if case.must_refuse:
        raise ValueError(f"case {case.seed} must be refused: it has no N to bound")
    flat = _Flat(case)
    with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no second derivative
        return _bounds(case, flat, seed, start)


def _bounds(case: Case, flat: _Flat, seed: int, start: float) -> Bounds:
    gen = generator(seed, Stream.FUZZ_ORACLE, case.seed)
    lower, upper, depth, draws = 0, flat.D, 0, 0
    for scale in THETA_SCALES:
        draws += 1
        lower, bound, d = _bounds_at(case, flat, scale, gen, lower)
        upper, depth = min(upper, bound), max(depth, d)
        if upper < lower:
            raise OracleError(f"case {case.seed} ({case.description}): upper bound {upper} below lower bound {lower}")
        if upper == lower:
            break
    return Bounds(lower, upper, flat.D, draws, depth, time.perf_counter() - start)


def grade(case: Case, count: object, bounds: Bounds | None) -> str:
    """One of :data:`OUTCOMES` for a counter's answer (a ``LawCount``, or the exception it raised).

    * ``right``: conclusive and equal to the oracle's exact N, or a ``ValueError`` for a case that must be refused;
    * ``inconclusive``; ``refused``: a ``ValueError`` for a case that can be counted;
    * ``wrong``: conclusive, and the case must be refused or the count is outside [lower, upper];
    * ``undecided``: conclusive inside [lower, upper] with lower < upper; ``error``: any other exception.

    Examples
    ========
    >>> from types import SimpleNamespace
    >>> from conslaw_lite.fuzz import make_case
    >>> case, b = make_case(3, "glu"), Bounds(2, 2, 20, 1, 1, 0.0)
    >>> grade(case, SimpleNamespace(conclusive=True, num_laws=3), b), grade(case, ValueError("no"), b)
    ('wrong', 'refused')
    """
    if isinstance(count, ValueError):
        return "right" if case.must_refuse else "refused"
    if isinstance(count, BaseException):
        return "error"
    if not count.conclusive:
        return "inconclusive"
    if case.must_refuse or bounds is None:
        return "wrong"
    if not bounds.lower <= count.num_laws <= bounds.upper:
        return "wrong"
    return "right" if bounds.exact is not None else "undecided"


@dataclass(frozen=True)
class CaseResult:
    """One case of the suite: the counter's answer, the oracle's bounds, the outcome (:func:`grade`)."""

    seed: int
    family: str
    description: str
    num_params: int | None
    counted: int | None  # the counter's N (None: inconclusive or raised)
    conclusive: bool
    lower: int | None  # the oracle's bounds (None: not needed, the counter gave no count, or must refuse)
    upper: int | None
    outcome: str
    reason: str  # the counter's reason or the exception's first line
    counter_seconds: float
    oracle_seconds: float


def run_case(case: Case) -> CaseResult:
    """Count the case with the default :func:`~conslaw_lite.counting.count_laws`, bound N when a count came, grade.

    Examples
    ========
    >>> from conslaw_lite.fuzz import make_case
    >>> r = run_case(make_case(1, "cast"))  # a cast to float32 inside forward: no count is right
    >>> r.family, r.outcome in ("right", "inconclusive", "wrong")
    ('cast', True)
    """
    from conslaw_lite.counting import count_laws  # the counter under test, imported where it is used

    start = time.perf_counter()
    try:
        count: object = count_laws(case.model, case.input_shape)
    except Exception as err:  # noqa: BLE001  any exception is an outcome of the suite
        count = err
    counter_seconds = time.perf_counter() - start
    bounds, reason, oracle_failed = None, "", False
    if isinstance(count, BaseException):
        reason = f"{type(count).__name__}: {(str(count).strip().splitlines() or [''])[0]}"
    else:
        reason = count.reason
        if count.conclusive and not case.must_refuse:
            try:
                bounds = oracle_bounds(case)
            except OracleError as err:  # the suite's own theory is wrong for this case: reported, not graded
                reason, oracle_failed = str(err), True
    counted = None if isinstance(count, BaseException) or not count.conclusive else count.num_laws
    return CaseResult(
        case.seed, case.family, case.description,
        None if isinstance(count, BaseException) else count.num_params,
        counted, counted is not None, bounds and bounds.lower, bounds and bounds.upper,
        "oracle-error" if oracle_failed else grade(case, count, bounds), reason,
        counter_seconds, bounds.seconds if bounds else 0.0,
    )  # fmt: skip
