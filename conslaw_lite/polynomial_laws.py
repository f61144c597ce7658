"""Quadratic laws as code and as text: evaluate ``h(θ) = Σ c_jk θ_jθ_k + Σ b_jθ_j``, print it readably.

A :class:`PolynomialLaw` holds its coefficients on *monomials* of the flat parameter vector
(``(j, k)`` for θ_jθ_k with j ≤ k, ``(j,)`` for θ_j) and the :class:`Layout` that names
the flat coordinates (tensor name and index). Printing finds, for each tensor (pair) and
coefficient, the fewest Frobenius inner products of slices that cover its monomials:
``θ[W][i,0]² + θ[W][i,1]² + θ[W][i,2]²`` is ``‖W[i, :]‖²``, ``Σ_q P[a,q]P[b,q]`` is
``⟨P[a, :], P[b, :]⟩``. :func:`group_laws` then puts laws that differ only in their
indices under one pattern: one running index (``for i in 0..5: ‖W2[:, i]‖² − ‖W1[i, :]‖²``),
or the entries of k×k blocks of a matrix law (``Q[B, :] Q[B, :]ᵀ − K[B, :] K[B, :]ᵀ``,
per block B: per attention head). Anything else is printed law by law.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from itertools import product

import torch

Monomial = tuple[int, ...]  # (j, k), j ≤ k: θ_jθ_k; (j,): θ_j
Coefficient = float | Fraction
Range = tuple[int, int]  # lo:hi on one axis


@dataclass(frozen=True)
class Layout:
    """Names and shapes of the parameter tensors, in the order of the flat vector θ."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    def where(self, j: int) -> tuple[int, tuple[int, ...]]:
        """Flat coordinate j → (tensor number, index in that tensor)."""
        for t, shape in enumerate(self.shapes):
            size = math.prod(shape)
            if j < size:
                return t, tuple(int(i) for i in _unravel(j, shape))
            j -= size
        raise IndexError(f"coordinate {j} is outside θ")

    def offset(self, t: int) -> int:
        return sum(math.prod(s) for s in self.shapes[:t])


def _unravel(j: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for n in reversed(shape):
        index.append(j % n)
        j //= n
    return index[::-1]


@dataclass(frozen=True)
class PolynomialLaw:
    """``h(θ) = Σ coefficients[m] · Π_{j ∈ m} θ_j`` over monomials m, on parameter dicts named by ``layout``.

    Examples
    ========
    >>> import torch
    >>> layout = Layout(("a", "b"), ((), ()))
    >>> h = PolynomialLaw({(0, 0): 1.0, (1, 1): -1.0}, layout)  # a² − b²
    >>> h({"a": torch.tensor(3.0), "b": torch.tensor(1.0)}), h.text()
    (tensor(8.), 'a² − b²')
    """

    coefficients: dict[Monomial, Coefficient]
    layout: Layout

    def __call__(self, params) -> torch.Tensor:
        return LawVector([self], self.layout)(params)[0]

    def terms(self) -> list[Term]:
        """The law as inner products (and sums) of slices, in a fixed order."""
        return sorted(_terms(self), key=Term.order)

    def coefficient_list(self) -> list:
        """``[[c, [tensor, index], ...], ...]``: one entry per monomial, coefficients as floats."""
        out = []
        for mono, c in sorted(self.coefficients.items()):
            factors = [self.layout.where(j) for j in mono]
            out.append([float(c), *([self.layout.names[t], list(i)] for t, i in factors)])
        return out

    def text(self) -> str:
        return _join([(term.coefficient, term.text(term.slots)) for term in self.terms()])


class LawVector:
    """The laws ``laws[0..L-1]`` evaluated at once: ``params`` → tensor (L,), one gather and one sum."""

    def __init__(self, laws: list[PolynomialLaw], layout: Layout) -> None:
        tensors = sorted({layout.where(j)[0] for law in laws for m in law.coefficients for j in m})
        local = {t: sum(math.prod(layout.shapes[u]) for u in tensors[:n]) for n, t in enumerate(tensors)}
        self.names = [layout.names[t] for t in tensors]
        self.size = len(laws)

        def coordinate(j: int) -> int:
            t, _ = layout.where(j)
            return local[t] + j - layout.offset(t)

        quad = [
            (n, coordinate(m[0]), coordinate(m[1]), float(c))
            for n, law in enumerate(laws)
            for m, c in law.coefficients.items()
            if len(m) == 2
        ]
        lin = [
            (n, coordinate(m[0]), float(c))
            for n, law in enumerate(laws)
            for m, c in law.coefficients.items()
            if len(m) == 1
        ]
        self.quad = [
            torch.tensor(col, dtype=torch.float64 if i == 3 else torch.long) for i, col in enumerate(zip(*quad))
        ]
        self.lin = [torch.tensor(col, dtype=torch.float64 if i == 2 else torch.long) for i, col in enumerate(zip(*lin))]

    def __call__(self, params) -> torch.Tensor:
        theta = torch.cat([params[name].reshape(-1) for name in self.names])
        out = theta.new_zeros(self.size)
        if self.quad:
            law, j, k, c = self.quad
            out = out.index_add(
                0, law.to(theta.device), c.to(theta) * theta[j.to(theta.device)] * theta[k.to(theta.device)]
            )
        if self.lin:
            law, j, c = self.lin
            out = out.index_add(0, law.to(theta.device), c.to(theta) * theta[j.to(theta.device)])
        return out


@dataclass(frozen=True)
class Slice:
    """``tensor[lo_0:hi_0, lo_1:hi_1, ...]``: a block of one parameter tensor."""

    tensor: int
    ranges: tuple[Range, ...]


@dataclass(frozen=True)
class Term:
    """``coefficient · ⟨left, right⟩`` (Frobenius inner product of equal-shaped slices), or ``coefficient · Σ left``."""

    coefficient: Coefficient
    left: Slice
    right: Slice | None  # None: a linear term Σ left
    layout: Layout

    @property
    def slots(self) -> tuple[int, ...]:
        """The integers of the term (its slices' bounds), in order: what differs between laws of one pattern."""
        parts = [self.left] if self.right is None else [self.left, self.right]
        return tuple(b for s in parts for r in s.ranges for b in r)

    def shape(self) -> tuple:
        """Everything but the integers: laws whose terms have equal shapes differ only in indices."""
        key = (self.left.tensor, len(self.left.ranges)), None if self.right is None else (self.right.tensor,)
        return _coefficient_key(self.coefficient), key

    def order(self) -> tuple:
        right = (-1,) if self.right is None else (self.right.tensor,)
        return (self.right is None, self.left.tensor, *right, self.slots)

    def text(self, slots: tuple) -> str:
        """The term with ``slots`` (ints or strings such as ``"i+4"``) as its bounds."""
        it = iter(slots)
        left = _slice_text(self.layout, self.left, it)
        if self.right is None:
            return left if _is_entry(self.left) else f"Σ {left}"
        right = _slice_text(self.layout, self.right, it)
        if left == right:
            return f"{left}²" if _is_entry(self.left) else f"‖{left}‖²"
        return f"⟨{left}, {right}⟩"


def _is_entry(s: Slice) -> bool:
    return all(hi - lo == 1 for lo, hi in s.ranges)


def _slice_text(layout: Layout, s: Slice, bounds) -> str:
    name, shape = layout.names[s.tensor], layout.shapes[s.tensor]
    if not shape:
        return name
    parts = []
    for n in shape:
        lo, hi = next(bounds), next(bounds)
        if isinstance(lo, int) and isinstance(hi, int):
            parts.append(_range_text((lo, hi), n))
        else:
            parts.append(str(lo) if _plus(lo, 1) == hi else f"{lo}:{hi}")
    return f"{name}[{', '.join(parts)}]" if any(p != ":" for p in parts) else name


@dataclass(frozen=True)
class Index:
    """The index ``step·var + offset`` of a pattern (``i``, ``i+4``, ``2h+2``)."""

    var: str
    step: int
    offset: int

    def __str__(self) -> str:
        head = self.var if self.step == 1 else f"{self.step}{self.var}"
        return head if self.offset == 0 else f"{head}+{self.offset}" if self.offset > 0 else f"{head}−{-self.offset}"


def _plus(index, n: int):
    return index + n if isinstance(index, int) else Index(index.var, index.step, index.offset + n)


def _coefficient_key(c: Coefficient) -> str:
    return str(c) if isinstance(c, Fraction) else f"{c:.12g}"


def _coefficient_text(c: Coefficient) -> str:
    c = abs(c)
    if c == 1:
        return ""
    return f"{c}·" if isinstance(c, Fraction) else f"{c:.4g}·"


def _join(parts: list[tuple[Coefficient, str]]) -> str:
    text = ""
    for n, (c, body) in enumerate(parts):
        sign = "−" if c < 0 else "+"
        lead = ("−" if c < 0 else "") if n == 0 else f" {sign} "
        text += f"{lead}{_coefficient_text(c)}{body}"
    return text


# --- from monomials to terms ------------------------------------------------------------------


def _terms(law: PolynomialLaw) -> list[Term]:
    """Each (tensor pair, coefficient) group of monomials, covered by the fewest slice products."""
    groups: dict[tuple, list] = defaultdict(list)
    for mono, c in law.coefficients.items():
        where = [law.layout.where(j) for j in mono]
        groups[(tuple(t for t, _ in where), _coefficient_key(c))].append((c, [i for _, i in where]))
    terms = []
    for (tensors, _), items in groups.items():
        c = items[0][0]
        indices = [i for _, i in items]
        best = min((_cover(indices, axis) for axis in _axes(law.layout, tensors)), key=len)
        terms += [
            Term(c, Slice(tensors[0], r[0]), Slice(tensors[1], r[1]) if len(tensors) == 2 else None, law.layout)
            for r in best
        ]
    return terms


def _axes(layout: Layout, tensors: tuple[int, ...]) -> list[int | None]:
    """Candidate running axes (the same for both slices); None: every monomial on its own."""
    ndims = {len(layout.shapes[t]) for t in tensors}
    if len(ndims) != 1 or 0 in ndims:
        return [None]
    return [None, *range(ndims.pop())]


def _cover(indices: list[list[tuple[int, ...]]], axis: int | None) -> list[tuple[tuple[Range, ...], ...]]:
    """Slices (per factor: a range per axis) that cover the monomials exactly, along ``axis``, then merged."""
    if axis is None:
        return [tuple(tuple((i, i + 1) for i in idx) for idx in mono) for mono in indices]
    lines: dict[tuple, list[int]] = defaultdict(list)
    singles = []
    for mono in indices:
        if len({idx[axis] for idx in mono}) != 1:
            singles.append(mono)
            continue
        fixed = tuple(tuple(i for a, i in enumerate(idx) if a != axis) for idx in mono)
        lines[fixed].append(mono[0][axis])
    vectors = []  # (fixed indices per factor, running range)
    for fixed, runs in lines.items():
        for lo, hi in _contiguous(sorted(runs)):
            vectors.append((fixed, (lo, hi)))
    whole = [tuple(_ranges(tuple((i, i + 1) for i in f), run, axis) for f in fixed) for fixed, run in vectors]
    return _merge_blocks(whole) + _cover(singles, None)


def _contiguous(values: list[int]) -> list[Range]:
    runs, lo = [], None
    for n, v in enumerate(values):
        if lo is None:
            lo = v
        if n + 1 == len(values) or values[n + 1] != v + 1:
            runs.append((lo, v + 1))
            lo = None
    return runs


def _merge_blocks(slices: list) -> list:
    """Slices that are one block cut in two merge, along each axis in turn, until none do.

    ``⟨L, R⟩ + ⟨L', R'⟩ = ⟨L ∪ L', R ∪ R'⟩`` where L' continues L along one axis, R' continues R along the same one,
    and every other range is equal: a conv kernel's columns ``W[i, 0, :, 0]``, ``W[i, 0, :, 1]``, ... make
    ``W[i, :, :, :]``, consecutive rows ``Q[a, :]``, ``Q[a+1, :]`` make ``Q[a:a+2, :]``.
    """
    merged = True
    while merged:
        merged = False
        for axis in range(len(slices[0][0]) if slices else 0):
            slices, joined = _merge_along(slices, axis)
            merged |= joined
    return slices


def _merge_along(slices: list, axis: int) -> tuple[list, bool]:
    """One pass of :func:`_merge_blocks` along ``axis``: (the slices, whether any two merged)."""
    lines: dict[tuple, list] = defaultdict(list)
    for s in slices:
        rest = tuple(r[:axis] + r[axis + 1 :] for r in s)
        lines[(rest, tuple(r[axis][0] - s[0][axis][0] for r in s))].append(s)
    out = []
    for line in lines.values():
        line.sort(key=lambda s: s[0][axis])
        out.append(line[0])
        for s in line[1:]:
            last = out[-1]
            if s[0][axis][0] == last[0][axis][1]:
                out[-1] = tuple(r[:axis] + ((r[axis][0], t[axis][1]),) + r[axis + 1 :] for r, t in zip(last, s))
            else:
                out.append(s)
    return out, len(out) < len(slices)


def _ranges(fixed: tuple[Range, ...], run: Range, axis: int) -> tuple[Range, ...]:
    ranges = list(fixed)
    ranges.insert(axis, run)
    return tuple(ranges)


# --- grouping laws into patterns ---------------------------------------------------------------


def group_laws(laws: list[PolynomialLaw]) -> dict[str, LawVector]:
    """``{pattern text: function of the parameter dict}``: laws that differ only in indices share a pattern.

    Examples
    ========
    A ReLU layer's units: ``‖B[i, :]‖² − ‖A[:, i]‖²`` for B (3×2), A (1×3).

    >>> layout = Layout(("B", "A"), ((3, 2), (1, 3)))
    >>> unit = lambda i: {(2 * i, 2 * i): 1, (2 * i + 1, 2 * i + 1): 1, (6 + i, 6 + i): -1}  # ‖B[i, :]‖² − A[0, i]²
    >>> laws = [PolynomialLaw(unit(i), layout) for i in range(3)]
    >>> list(group_laws(laws))
    ['for i in 0..2: ‖B[i, :]‖² − A[0, i]²']
    """
    groups: dict[tuple, list[PolynomialLaw]] = defaultdict(list)
    for law in laws:
        groups[tuple(term.shape() for term in law.terms())].append(law)
    out = {}
    for members in groups.values():
        for text, part in _patterns(members):
            out[text] = LawVector(part, part[0].layout)
    return out


def _patterns(members: list[PolynomialLaw]) -> list[tuple[str, list[PolynomialLaw]]]:
    """One pattern for the group (one running index, or k×k blocks of a matrix law), else one line per law."""
    if len(members) == 1:
        return [(members[0].text(), members)]
    slots = torch.tensor([[s for t in law.terms() for s in t.slots] for law in members])
    varying = [s for s in range(slots.shape[1]) if len(set(slots[:, s].tolist())) > 1]
    classes: list[list[int]] = []
    for s in varying:
        home = next((c for c in classes if len(set((slots[:, s] - slots[:, c[0]]).tolist())) == 1), None)
        home.append(s) if home is not None else classes.append([s])
    if len(classes) == 2:
        blocks = _blocks(slots[:, classes[0][0]].tolist(), slots[:, classes[1][0]].tolist())
        text = None if blocks is None else _block_text(members[0], slots[0].tolist(), classes, blocks)
        if text is not None:
            return [(text, members)]
    return _grid(members, slots, classes) or [(law.text(), [law]) for law in members]


def _grid(members: list[PolynomialLaw], slots: torch.Tensor, classes: list[list[int]]) -> list[tuple[str, list]] | None:
    """``for i in .., j in ..: law`` when each class of slots steps evenly and every combination occurs once."""
    keys = [tuple(int(slots[n, c[0]]) for c in classes) for n in range(len(members))]
    axes = [sorted(set(v)) for v in zip(*keys)]
    if len(set(keys)) != len(keys) or len(keys) != math.prod(map(len, axes)):
        return None
    steps = [(v[1] - v[0]) if len(v) > 1 else 1 for v in axes]
    if any(v != [v[0] + k * n for n in range(len(v))] for v, k in zip(axes, steps)):
        return None
    plain, strided = iter("ijlq"), iter("hgeu")  # i, j, ... run over indices; h, g, ... count blocks of a stride
    order = sorted(range(len(members)), key=lambda n: keys[n])
    base = slots[order[0]].tolist()
    names, over = list(base), []
    for c, k, v in zip(classes, steps, axes):
        var = next(plain if k == 1 else strided)
        for s in c:
            names[s] = Index(var, k, int(base[s]) - (v[0] if k == 1 else 0))
        over.append(f"{var} in {v[0]}..{v[-1]}" if k == 1 else f"{var} in 0..{len(v) - 1}")
    over = ", ".join(over)
    return [(f"for {over}: {_law_text(members[order[0]], names)}", [members[n] for n in order])]


def _law_text(law: PolynomialLaw, slots: list) -> str:
    it = iter(slots)
    parts = []
    for term in law.terms():
        n = len(term.slots)
        parts.append((term.coefficient, term.text(tuple(next(it) for _ in range(n)))))
    return _join(parts)


def _blocks(u: list[int], v: list[int]) -> list[Range] | None:
    """The k×k blocks whose entries (u ≤ v, or all pairs) the laws are, if they are exactly that; else None."""
    pairs = set(zip(u, v))
    values = sorted(set(u) | set(v))
    parent = {x: x for x in values}

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
    comps: dict[int, list[int]] = defaultdict(list)
    for x in values:
        comps[root(x)].append(x)
    blocks = sorted((min(c), max(c) + 1) for c in comps.values())
    sizes = {hi - lo for lo, hi in blocks}
    if len(sizes) != 1 or any(hi - lo != len(comps[root(lo)]) for lo, hi in blocks):
        return None
    upper = {(a, b) for lo, hi in blocks for a, b in product(range(lo, hi), repeat=2) if a <= b}
    full = {(a, b) for lo, hi in blocks for a, b in product(range(lo, hi), repeat=2)}
    return blocks if pairs in (upper, full) and len(pairs) == len(u) else None


def _block_text(law: PolynomialLaw, slots: list[int], classes: list[list[int]], blocks: list[Range]) -> str | None:
    """``for h in 0..n−1, B = k·h:k·h+k (k×k): X Yᵀ − ...`` with X, Y the slices over block B; None if not so."""
    k = blocks[0][1] - blocks[0][0]
    single = len(blocks) == 1
    pieces, at = [], 0
    for term in law.terms():
        n = len(term.slots)
        text = _matrix_text(term, range(at, at + n), slots, classes, blocks[0] if single else None)
        if text is None:
            return None
        pieces.append((term.coefficient, text))
        at += n
    body = _join(pieces)
    if single:
        return f"{body} ({k}×{k})"
    starts = [lo for lo, _ in blocks]
    if starts == [starts[0] + k * h for h in range(len(blocks))]:
        first = f"{k}h" if starts[0] == 0 else f"{starts[0]}+{k}h"
        head = f"for h in 0..{len(blocks) - 1}, B = {first}:{first}+{k} ({k}×{k})"
    else:
        head = f"for B in ({', '.join(f'{lo}:{hi}' for lo, hi in blocks)}) ({k}×{k})"
    return f"{head}: {body}"


def _matrix_text(term: Term, own: range, slots: list[int], classes: list[list[int]], block: Range | None) -> str | None:
    """``X Yᵀ`` for the term ``⟨X_u, Y_v⟩`` over u, v in a block; None if a slice does not run over the block."""
    if term.right is None:
        return None
    bounds = list(own)
    sides = {}
    for s, first in ((term.left, 0), (term.right, 2 * len(term.left.ranges))):
        ndim = len(s.ranges)
        axes = [a for a in range(ndim) if any(bounds[first + 2 * a] in c for c in classes)]
        if len(axes) != 1:
            return None
        a = axes[0]
        lo_slot = bounds[first + 2 * a]
        cls = 0 if lo_slot in classes[0] else 1
        off = slots[lo_slot] - slots[classes[cls][0]]
        shape = term.layout.shapes[s.tensor]
        if block is not None:
            lo, hi = block[0] + off, block[1] + off
            over = ":" if (lo, hi) == (0, shape[a]) else f"{lo}:{hi}"
        else:
            over = "B" if off == 0 else f"B+{off}" if off > 0 else f"B−{-off}"
        parts = [over if b == a else _range_text(r, shape[b]) for b, r in enumerate(s.ranges)]
        name = term.layout.names[s.tensor]
        text = f"{name}[{', '.join(parts)}]" if any(p != ":" for p in parts) else name
        sides[cls] = (text, a == 1 and ndim == 2)
    if set(sides) != {0, 1}:
        return None
    (x, x_cols), (y, y_cols) = sides[0], sides[1]
    return f"{x}{'ᵀ' if x_cols else ''} {y}{'' if y_cols else 'ᵀ'}"


def _range_text(r: Range, n: int) -> str:
    lo, hi = r
    return ":" if (lo, hi) == (0, n) and n > 1 else str(lo) if hi == lo + 1 else f"{lo}:{hi}"
