"""The laws found, as a basis with the fewest non-zeros: reduced row-echelon form, products of linear laws left out.

Each law gets a pivot coefficient 1 that no other law has (the fewest non-zeros an echelon basis can
have when the laws' supports are disjoint, as they are per unit and per head). When linear laws ℓ
exist (Σ_e W_e for a softmax gate), their products ℓ_i ℓ_j are quadratic laws too, but add nothing:
they are left out. Used by :func:`~conslaw_lite.find_laws.find_laws`.

Examples
========
>>> import numpy as np
>>> echelon(np.array([[2.0, 2.0, 0.0], [1.0, 0.0, 1.0]]))  # pivots on columns 0 and 1
array([[ 1.,  0.,  1.],
       [ 0.,  1., -1.]])
"""

from __future__ import annotations

from contextvars import ContextVar

import numpy as np
from scipy.sparse import bmat, csr_matrix, vstack
from scipy.sparse.csgraph import connected_components

from conslaw_lite.polynomial_laws import Monomial
from conslaw_lite.time_limit import OutOfTime, check_time

COEFFICIENT_TOL = 1e-9  # relative size under which a coefficient of the echelon basis is zero
# A null vector's coefficients are off by about σ_dropped / σ_kept of the largest: terms under this many times that are
# its round-off (a GQA block with biases, gap 2·10⁸: terms of 5·10⁻⁹ kept it from being shortened to one entry's law)
NOISE_FACTOR = 100.0
PIVOT_TOL = 1e-4  # a column whose residual is below this of the largest entry is no pivot (the same round-off)
_TOL: ContextVar[float] = ContextVar("coefficient tolerance", default=COEFFICIENT_TOL)
# A row's residual off the rows before it, relative to its length, under which it adds no direction: its square is
# read off the Gram matrix, where round-off is about (largest / smallest residual kept) × 10⁻¹⁶ of the squared length
ADDS_TOL = 1e-5
SPAN_TOL = 1e-7  # singular values of the null vectors under this of the largest add no direction to their span


def _in_order(m: Monomial) -> tuple[bool, Monomial]:
    """The order of the basis's columns: quadratic monomials first, then linear ones, each in θ's order."""
    return len(m) == 1, m


def echelon(vectors: np.ndarray, orthonormal: bool = False) -> np.ndarray:
    """A basis of the rows' span in reduced row-echelon form: pivot columns chosen left to right (``orthonormal``:
    the rows are an orthonormal basis already, and no SVD is taken to find one)."""
    if vectors.shape[0] == 0:
        return vectors
    span = vectors if orthonormal else _span(vectors)
    pivots = _pivots(span, PIVOT_TOL * np.abs(span).max())
    basis = np.linalg.solve(span[:, pivots], span)  # identity on the pivot columns
    basis[np.abs(basis) < _TOL.get() * np.abs(basis).max(axis=1, keepdims=True)] = 0.0
    return basis


def _span(vectors: np.ndarray, chunk: int = 512) -> np.ndarray:
    """An orthonormal basis of the rows' span (singular values over ``SPAN_TOL`` of the largest), ``chunk`` rows at a
    time beside the basis so far: the laws of overlapping pairs repeat, and one SVD of an LM's thousands of null vectors
    over 50,000 monomials took minutes.

    Examples
    ========
    >>> abs(_span(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]), chunk=1)).round(6).tolist()  # up to signs
    [[1.0, 0.0], [0.0, 1.0]]
    """
    span = np.zeros((0, vectors.shape[1]))
    for start in range(0, len(vectors), chunk):
        _, s, vh = np.linalg.svd(np.vstack([span, vectors[start : start + chunk]]), full_matrices=False)
        span = vh[s > SPAN_TOL * s[0]] if len(s) and s[0] > 0 else span
    return span


def _pivots(span: np.ndarray, floor: float, chunk: int = 256) -> list[int]:
    """The first columns, left to right, each with a part above ``floor`` outside the ones before: a chunk of columns
    projected at once, then one rank-1 update per pivot found in it (a column at a time took minutes on an LM's
    span of 300 laws over 50,000 monomials).

    Examples
    ========
    >>> _pivots(np.array([[0.0, 1.0, 2.0, 0.0], [0.0, 0.0, 0.0, 1.0]]), 1e-9)
    [1, 3]
    """
    pivots: list[int] = []
    q = np.zeros((span.shape[0], 0))
    candidates = np.flatnonzero(np.linalg.norm(span, axis=0) > floor)  # most monomials are in no law: never pivots
    for start in range(0, len(candidates), chunk):
        if len(pivots) == span.shape[0]:
            break
        columns = candidates[start : start + chunk]
        rest = span[:, columns] - q @ (q.T @ span[:, columns])
        while len(pivots) < span.shape[0]:
            hits = np.flatnonzero(np.linalg.norm(rest, axis=0) > floor)
            if not len(hits):
                break
            v = rest[:, hits[0]] - q @ (q.T @ rest[:, hits[0]])  # once more against all: round-off
            v /= np.linalg.norm(v)
            q = np.column_stack([q, v])
            pivots.append(int(columns[hits[0]]))
            rest = rest - np.outer(v, v @ rest)
            rest[:, : hits[0] + 1] = 0.0  # decided: dependent, or the pivot itself
    return pivots


def reduced_basis(
    vectors: np.ndarray, columns: list[Monomial], degree: int, gap: float = np.inf, first: np.ndarray | None = None
) -> list[dict]:
    """The echelon basis as ``{monomial: coefficient}``, products of linear laws left out.

    Columns are ordered quadratic monomials first, so a law whose pivot is a linear monomial
    has no quadratic part: those rows are the linear laws ℓ, and any quadratic row that lies in
    span(ℓ_i ℓ_j) given the rows kept before it adds no law and is dropped. Each law is then made
    shorter with the others where they share terms (:func:`_shortened`), and the basis is chosen from these laws and
    the null vectors themselves, fewest terms first (:func:`_fewest_terms`), then shortened again: a null vector of a
    block that holds several laws may be a mix of them (a GQA head's ``V Vᵀ − …`` entry (0, 1) plus 1.5 times entry
    (0, 0)), shorter than the echelon form's law and longer than the entry alone.

    ``gap``: σ_kept / σ_dropped of the search that gave the vectors. Coefficients under ``NOISE_FACTOR / gap`` of a
    law's largest (``COEFFICIENT_TOL`` at least) are its round-off, and are dropped. ``first``: laws of the span (rows
    over ``columns``) chosen before all others, fewest terms first among them.
    """
    token = _TOL.set(max(COEFFICIENT_TOL, NOISE_FACTOR / gap))
    try:
        kept, linear, products = _kept(vectors, columns, degree)
        try:
            laws = _shortened([law if law in linear else _sparsest(law, products) for law in kept])
            preferred = _as_laws(first, columns) if first is not None else []
            chosen = _shortened(_fewest_terms(laws, _as_laws(vectors, columns), products, preferred))
        except OutOfTime:  # shortening ran past a time limit: the echelon form's laws, the same span, as they are
            chosen = kept
    finally:
        _TOL.reset(token)
    # a law the others make empty: vectors dependent within the tolerance of a search without a clear gap
    return sorted(map(_leading_one, filter(None, chosen)), key=_first)


def _first(law: dict) -> tuple[bool, Monomial]:
    """The law's first monomial, as :func:`_in_order` ranks it."""
    return min(map(_in_order, law))


def _leading_one(law: dict) -> dict:
    """The law scaled to 1 at its first monomial."""
    first = law[_first(law)[1]]
    return {m: c / first for m, c in law.items()}


def _as_laws(vectors: np.ndarray, columns: list[Monomial]) -> list[dict]:
    """The null vectors as laws, each scaled to 1 at its first monomial (quadratic ones first, as :func:`_kept` orders
    them), coefficients under the tolerance (``COEFFICIENT_TOL`` or more, :func:`reduced_basis`) of the largest
    dropped."""
    order = sorted(range(len(columns)), key=lambda c: _in_order(columns[c]))
    laws = []
    for row in vectors[:, order]:
        big = np.flatnonzero(np.abs(row) > _TOL.get() * np.abs(row).max()) if row.any() else []
        if len(big):
            laws.append(_leading_one({columns[order[c]]: float(row[c]) for c in big}))
    return laws


def _fewest_terms(kept: list[dict], found: list[dict], products: list[dict], first: list[dict] = ()) -> list[dict]:
    """A basis of ``kept``'s span chosen from the laws of both lists, fewest terms first, each null vector taken from
    the span (:func:`_from_echelon`): greedy is optimal for independent sets, so no other choice from them has fewer
    terms in all. ``kept`` itself where the choice does not give as many laws (round-off in a null vector making it
    look independent). The laws ``first`` go before both lists, fewest terms first among them.

    The echelon form alone holds, for two hidden layers of a ReLU MLP, unit 0's law of the first layer plus every
    unit law of the second, whose pivots ``W₂[i, 0]²`` it holds, and :func:`_shortened` can walk from there to the
    sum of all the laws; the unit law itself is among the null vectors found.

    Examples
    ========
    >>> a, b = {(0, 0): 1.0, (1, 1): -1.0}, {(1, 1): 1.0, (2, 2): -1.0}  # x² − y², y² − z²
    >>> _fewest_terms([{(0, 0): 1.0, (1, 1): 1.0, (2, 2): -2.0}, b], [a, b], [])  # a + 2b replaced by a
    [{(0, 0): 1.0, (1, 1): -1.0}, {(1, 1): 1.0, (2, 2): -1.0}]
    """
    pool = sorted(first, key=_terms) + sorted(kept + found, key=_terms)  # stable: on a tie, the echelon form's law
    adds = _adds_after(products, pool)
    echelon_laws = {id(law) for law in kept}
    chosen = [law if id(law) in echelon_laws else _from_echelon(law, kept) for law, new in zip(pool, adds) if new]
    return sorted(chosen, key=_first) if len(chosen) == len(kept) else kept


def _from_echelon(law: dict, kept: list[dict]) -> dict:
    """The law of ``kept``'s span on ``law``'s monomials nearest to it, scaled to 1 at its first monomial: a null vector
    of one small block carries that block's round-off (coefficients off by 10⁻⁶, past what rounds to a fraction), the
    echelon form that of all of them. The law as it is where no law of the span lies on its monomials.

    Examples
    ========
    >>> _from_echelon({(0, 0): 1.0, (1, 1): -1.000001}, [{(0, 0): 1.0, (2, 2): -1.0}, {(1, 1): 1.0, (2, 2): -1.0}])
    {(0, 0): 1.0, (1, 1): -1.0}
    """
    touching = [k for k in kept if k.keys() & law.keys()]
    columns = sorted({m for k in touching for m in k} | law.keys(), key=_in_order)
    rows = np.array([[k.get(m, 0.0) for m in columns] for k in touching])
    outside = [n for n, m in enumerate(columns) if m not in law]
    u, s, _ = np.linalg.svd(rows[:, outside], full_matrices=True) if outside else (np.eye(len(rows)), [], None)
    rank = int((np.asarray(s) > 1e-7 * max(s, default=0.0)).sum())
    on_law = u[:, rank:].T @ rows  # the span's laws on law's monomials
    if not len(on_law):
        return law
    target = np.array([law.get(m, 0.0) for m in columns])
    nearest = np.linalg.lstsq(on_law.T, target, rcond=None)[0] @ on_law
    nearest[np.abs(nearest) < _TOL.get() * np.abs(nearest).max()] = 0.0
    return _leading_one({columns[n]: float(nearest[n]) for n in np.flatnonzero(nearest)})


def law_count(vectors: np.ndarray, columns: list[Monomial], degree: int, orthonormal: bool = False) -> int:
    """How many laws the null vectors hold: :func:`reduced_basis`'s length (ℓ, ℓ² and ℓ·ℓ' are one law);
    ``orthonormal``: the vectors are an orthonormal basis of their span already.

    Examples
    ========
    >>> columns = [(0, 0), (0,), (1,)]  # θ₀², θ₀, θ₁
    >>> law_count(np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]), columns, 2)  # θ₀, θ₀², θ₁
    2
    """
    return len(_kept(vectors, columns, degree, orthonormal)[0])


def _kept(
    vectors: np.ndarray, columns: list[Monomial], degree: int, orthonormal: bool = False
) -> tuple[list[dict], list[dict], list[dict]]:
    """The echelon basis's laws that are no product of linear laws, the linear laws, and their products."""
    order = sorted(range(len(columns)), key=lambda c: _in_order(columns[c]))
    columns = [columns[c] for c in order]
    basis = echelon(vectors[:, order], orthonormal) if len(columns) else vectors
    laws = [{columns[c]: float(row[c]) for c in np.flatnonzero(row)} for row in basis]
    linear = [law for law in laws if all(len(m) == 1 for m in law)]
    if degree == 1 or not linear:
        return laws, linear, []
    index = {m: n for n, m in enumerate(columns)}
    products = [_product(a, b) for n, a in enumerate(linear) for b in linear[n:]]
    for p in products:
        for m in p:
            index.setdefault(m, len(index))
    others = [law for law in laws if law not in linear]
    adds = dict(zip(map(id, others), _adds_after(products, others)))
    return [law for law in laws if law in linear or adds[id(law)]], linear, products


def _shortened(laws: list[dict]) -> list[dict]:
    """Each law plus multiples of the others that share its terms, where that makes it shorter (:func:`_sparsest`, in
    order; a linear law only with linear ones, so it stays linear): the same span. An echelon form writes a pre-norm
    block's gain law ``γ[0]² + β[0]² − ‖W[:, 0]‖²`` plus every unit law ``‖W[i, :]‖² + b[i]² − ‖W₂[:, i]‖²``,
    whose pivots ``W[i, 0]²`` it holds.

    Examples
    ========
    >>> unit = {(2, 2): 1.0, (3, 3): 1.0, (4, 4): -1.0}  # c² + d² − e²
    >>> _shortened([{(0, 0): 1.0, (1, 1): -1.0, (3, 3): 1.0, (4, 4): -1.0}, unit])  # a² − b² + d² − e², minus unit
    [{(0, 0): 1.0, (1, 1): -1.0, (2, 2): -1.0}, {(2, 2): 1.0, (3, 3): 1.0, (4, 4): -1.0}]
    """
    out = list(laws)
    for i, law in enumerate(out):
        linear = all(len(m) == 1 for m in law)
        others = [
            other
            for j, other in enumerate(out)
            if j != i and law.keys() & other.keys() and (not linear or all(len(m) == 1 for m in other))
        ]
        out[i] = _sparsest(law, others, shared=2) if others else law
    return out


def _product(a: dict, b: dict) -> dict:
    out: dict = {}
    for (j,), c in a.items():
        for (k,), d in b.items():
            m = (min(j, k), max(j, k))
            out[m] = out.get(m, 0.0) + c * d
    return out


def _sparse(laws: list[dict], index: dict) -> csr_matrix:
    """The laws as the rows of a sparse matrix over the monomials of ``index``."""
    data = [c for law in laws for c in law.values()]
    columns = [index[m] for law in laws for m in law]
    starts = np.cumsum([0] + [len(law) for law in laws])
    return csr_matrix((data, columns, starts), shape=(len(laws), len(index)))


def _adds_after(products: list[dict], laws: list[dict]) -> list[bool]:
    """Whether each of ``laws`` adds a direction to ``products`` and to the laws before it that did (:func:`_adds`).

    Only the products joined to some law by shared monomials, directly or through other products, are stacked: a
    combination of rows that equals a law's terms does so within each connected part of the rows' monomials, so the
    others change no answer, and their Gram matrix would be of the square of their number (the 384 unread entries of a
    position embedding are as many linear laws, and their 74,112 products held 41 GiB).

    Examples
    ========
    >>> a, b = {(0,): 1.0}, {(1,): 1.0}  # two linear laws; their products a², ab, b²
    >>> products = [{(0, 0): 1.0}, {(0, 1): 1.0}, {(1, 1): 1.0}]
    >>> _adds_after(products, [{(0, 0): 2.0, (1, 1): -1.0}, {(2, 2): 1.0}])  # 2a² − b² is theirs, c² is not
    [False, True]
    """
    index: dict = {}
    for law in products + laws:
        for m in law:
            index.setdefault(m, len(index))
    rows = _sparse(products + laws, index)
    n = len(products)
    joined = rows[:n][_joined(rows, n)]  # a transformer layer's 33 linear laws: 561 products of 256 terms
    stacked = vstack([joined, rows[n:]]).tocsr()
    return _adds((stacked @ stacked.T).toarray())[joined.shape[0] :]


def _joined(rows: csr_matrix, n: int) -> np.ndarray:
    """Which of the first ``n`` rows share a connected part with a row after them, rows joined by shared columns."""
    incidence = (rows != 0).astype(np.int8)
    graph = bmat([[None, incidence], [incidence.T, None]])  # rows and columns, an edge for each nonzero entry
    _, part = connected_components(graph, directed=False)
    return np.isin(part[:n], part[n : rows.shape[0]])


def _adds(gram: np.ndarray) -> list[bool]:
    """Whether each row adds a direction to the rows before it that did (residual over ``ADDS_TOL`` of its length), from
    the rows' Gram matrix: one product of the rows, then a Cholesky factor grown row by row (the residuals of a
    stack grown one row at a time cost 28 s for the 528 products of a transformer layer's 32 linear laws). Each row
    chosen updates the residuals of all the rows after it at once, so a row that adds nothing costs one comparison.

    Examples
    ========
    >>> _adds(np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 4.0]]))  # the second row repeats the first
    [True, False, True]
    """
    n = len(gram)
    factor = np.zeros_like(gram)  # column m: the m-th chosen row's Cholesky column, over every row
    residual = gram.diagonal().copy()  # each row's squared part outside the rows chosen before it
    adds, m = [], 0
    for i in range(n):
        adds.append(bool(residual[i] > ADDS_TOL**2 * gram[i, i]))
        if adds[-1]:
            pivot = np.sqrt(residual[i])
            column = (gram[i + 1 :, i] - factor[i + 1 :, :m] @ factor[i, :m]) / pivot
            factor[i, m], factor[i + 1 :, m] = pivot, column
            residual[i + 1 :] -= column**2
            m += 1
    return adds


def _plus(law: dict, other: dict, c: float) -> dict:
    """``law + c·other``, without the terms that cancel."""
    out = dict(law)
    for m, d in other.items():
        out[m] = out.get(m, 0.0) + c * d
    largest = max(map(abs, out.values()), default=0.0)
    return {m: v for m, v in out.items() if abs(v) > _TOL.get() * largest}


def _sparsest(law: dict, products: list[dict], shared: int = 1) -> dict:
    """The law plus multiples of ``products`` (products of linear laws, or other laws), with fewer cross terms θ_j θ_k
    (j ≠ k), then fewer terms, where one cancels them (greedy, the move that shortens it most first: taking the first
    that shortens it walked a deep MLP's ``‖W₁[0, :]‖² + … + Σ_j (‖W₂[j, :]‖² + …)`` to the sum of every unit law, 35
    terms, instead of unit 0's law, 9). With ``shared`` > 1, only the multiple that cancels
    the most terms is tried, where it cancels at least that many (two dense laws share many terms at as many ratios:
    trying each took 80 s for the 100 spurious laws of a search short of rows).

    The echelon form may hold a product's terms: ``‖W₁[i, :]‖² + 2 Σ_{j<k} W₂[j, i] W₂[k, i]`` is the unit law
    ``‖W₁[i, :]‖² − ‖W₂[:, i]‖²`` plus ``(Σ_j W₂[j, i])²`` where the columns of W₂ sum to a law.

    Examples
    ========
    >>> w = {(0, 0): 1.0, (1, 2): 2.0}  # a² + 2bc, with b + c a linear law
    >>> _sparsest(w, [{(1, 1): 1.0, (1, 2): 2.0, (2, 2): 1.0}])  # minus (b + c)²
    {(0, 0): 1.0, (1, 1): -1.0, (2, 2): -1.0}
    """
    while True:
        check_time()  # hundreds of dense laws, each against hundreds of others: minutes (a ReZero MLP at α = 10⁻⁶)
        best = law
        for p in products:
            for c in _multiples(law, p, shared):
                trial = _plus(law, p, -c)
                if _terms(trial) < _terms(best):
                    best = trial
        if best is law:
            return law
        law = best


def _multiples(law: dict, other: dict, shared: int) -> set[float]:
    """The c for which ``law − c·other`` cancels a term: all of them, or (``shared`` > 1) the one that cancels the most
    terms, if it cancels ``shared`` or more: ratios equal to the tolerance's digits are one, c their mean."""
    ratios = [law[m] / d for m, d in other.items() if m in law]
    if shared == 1:
        return set(ratios)
    digits = int(-np.log10(_TOL.get()))
    groups: dict[float, list[float]] = {}
    for r in ratios:
        groups.setdefault(round(r, digits), []).append(r)
    best = max(groups.values(), key=len, default=[])
    return {float(np.mean(best))} if len(best) >= shared else set()


def _terms(law: dict) -> tuple[int, int]:
    """(cross terms, terms): what :func:`_sparsest` makes fewer."""
    return sum(len(m) == 2 and m[0] != m[1] for m in law), len(law)
