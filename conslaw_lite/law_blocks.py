"""Which coordinates of θ :func:`~conslaw_lite.find_laws.find_laws` searches together: layers, pairs, unit slices.

A quadratic law over n coordinates has n(n+1)/2 + n unknown coefficients, and its null space is
solved densely: beyond about a hundred coordinates that is too slow. Every law the book knows
couples a few slices of two layers along an axis they share: a hidden unit i of an MLP ties row
i of the weight and bias before it to column i of the weight after it
(``‖W₁[i, :]‖² + b₁[i]² − ‖W₂[:, i]‖²``), an attention head ties the rows of its queries and keys.
So the search runs over

1. each layer and each pair of layers of at most ``MAX_BLOCK`` coordinates, whole;
2. for larger pairs, and for a layer with the layers that read its output (a norm and the q, k, v after it:
   :mod:`conslaw_lite.dataflow`), *unit slices*: for each axis size n the two layers share (any size, for a
   layer alone) and each index u < n, the entries of the pair's tensors whose index along an axis
   of size n is u, when the slice has at most ``MAX_SLICE`` coordinates;
   A law found on the first slice of an axis is moved to the others by swapping the unit's index
   (:func:`~conslaw_lite.law_moves.swapped`: hidden units are interchangeable) and kept where it is conserved there; the
   slices where that fails are solved on their own.
   Across a ``Flatten`` the unit's column after it is a group: channel c of a convolution feeds
   columns ``c·k … c·k + k − 1`` of the ``Linear`` after it (k = H·W, channels first), a token
   embedding's coordinate j the columns ``j, j + d, …`` (positions first). So a layer's unit axis
   of size n also pairs with an input axis of size n·k of the next layer's weight, both ways
   (:func:`flattened_slices`); those slices are solved one by one, not moved.
3. the linear laws ``bᵀθ`` of all of θ (one unknown a coordinate) when it has at most ``MAX_LINEAR`` coordinates,
   else of each layer too large for step 1: a law such as ``Σ_i b[i]`` of a ``Linear`` whose output a LayerNorm
   centres lies in no slice, and ``Σ_i (o.bias[i] − fc2.bias[i])`` of a pre-norm block, whose LayerNorm reads the
   sum of the two, in no layer;
4. if still short of the count, *pairs of unit slices* (u, v) of one such axis (the entries
   ``(u, v)`` of a per-head matrix law), the axes whose unit slices have laws first. The laws of an axis's first
   pair are moved to its other pairs (two swaps: u₀ → u, v₀ → v) and kept where conserved; the pairs where one
   fails are solved, within a budget of ``PAIR_SECONDS`` (about a minute of work on 2 cores; the unit slices of
   steps 2 and 5 have their own, ``SLICE_SECONDS``, cheapest first, shared with the searches of a fused layer's
   parts: a search short of its count ends, and says what it left out);
5. if still short, *grouped unit slices* (:func:`grouped_slices`: a K/V row with the query rows that read it) and
   their pairs, the same way.

A law found in a block is a law of the model (it is conserved by every sampled field); a law
that lies in no block is missed, and the comparison with the count says so.

Examples
========
>>> from conslaw_lite.polynomial_laws import Layout
>>> layout = Layout(("0.weight", "0.bias", "2.weight"), ((3, 2), (3,), (1, 3)))
>>> layers(layout)
[[0, 1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]]
>>> [coords for key, coords in unit_slices(layout, [0, 1])][:2]  # hidden unit 0: W₁[0, :], b₁[0], W₂[:, 0]
[[0, 1, 6, 9], [2, 3, 7, 10]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations, combinations_with_replacement, product

import numpy as np

from conslaw_lite.law_moves import Group, group_rows
from conslaw_lite.polynomial_laws import Layout

MAX_BLOCK = 64  # coordinates of a layer or pair of layers searched whole
MAX_SLICE = 96  # coordinates of a unit slice (or pair of slices): 4,752 unknowns at degree 2
MAX_SQUARES = 2376  # coordinates of a larger unit slice, or of all of θ, searched on its squares alone: 2 unknowns each
MAX_LINEAR = 4096  # coordinates of a layer whose linear laws are searched whole (one unknown each: Σ bias[i] of a
# Linear before a LayerNorm spans all its unit slices)
PAIR_SECONDS = 60.0  # the pairs of unit slices searched, in pair_seconds (a small transformer has thousands of pairs
# that hold no law: all of them took 440 s)
SLICE_SECONDS = 60.0  # the unit slices searched, in pair_seconds: a ResNet block with BatchNorm has 16 laws, 4 of them
# across four layers of its residual stream, in no slice, and its search was still solving slices after 15 minutes

# (first layer, second layer, axis, variant, unit u < n) of a unit slice; the axis is its size n, or for a flattened
# axis (flattened_slices) −(2n + 1) with channels first and −(2n + 2) with positions first: never moved by swapping;
# the variant 0 takes every axis of size n, the numbers 1, 2, ... one axis a layer (axis_slices), a tuple
# (G, b, layer, axis) the G·n axis of a layer that a unit's group of rows lies on (grouped_slices); θ's channels
# (channel_slices) are layer −2, their variant the (tensor, axis) of a stream
Key = tuple[int, int, int, int | tuple[int, int, int, int] | tuple[tuple[int, int], ...], int]


def unknowns(n: int, degree: int) -> int:
    """Coefficients of a law over n coordinates: n(n+1)/2 + n at degree 2, n at degree 1."""
    return n + (n * (n + 1) // 2 if degree == 2 else 0)


def layers(layout: Layout) -> list[list[int]]:
    """Coordinates of each layer: the tensors of one module (``Q.weight`` with ``Q.bias``), else each tensor."""
    found: dict[str, list[int]] = {}
    at = 0
    for name, shape in zip(layout.names, layout.shapes):
        module, dot, _ = name.rpartition(".")
        found.setdefault(module if dot else name, []).extend(range(at, at + math.prod(shape)))
        at += math.prod(shape)
    return list(found.values())


def layer_names(layout: Layout) -> list[str]:
    """The module name of each layer, in the order of :func:`layers`.

    Examples
    ========
    >>> layer_names(Layout(("norm.weight", "norm.bias", "q.weight"), ((2,), (2,), (3, 2))))
    ['norm', 'q']
    """
    return list(dict.fromkeys(name.rpartition(".")[0] or name for name in layout.names))


def layer_tensors(layout: Layout) -> list[list[int]]:
    """The tensor numbers of each layer, in the order of :func:`layers`."""
    found: dict[str, list[int]] = {}
    for t, name in enumerate(layout.names):
        module, dot, _ = name.rpartition(".")
        found.setdefault(module if dot else name, []).append(t)
    return list(found.values())


def pairs(count: int) -> list[tuple[int, int]]:
    """Each pair of layers (i, j), i < j, nearest first (a hidden unit's law couples the layers around it),
    then each layer alone (i, i)."""
    return sorted([(i, j) for i in range(count) for j in range(i + 1, count)], key=lambda p: p[1] - p[0]) + [
        (i, i) for i in range(count)
    ]


def whole_blocks(layout: Layout) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """The layers and pairs of at most ``MAX_BLOCK`` coordinates, and the (i, j) of those larger."""
    ranges = layers(layout)
    small, large = [], []
    for i, j in pairs(len(ranges)):
        block = sorted(set(ranges[i]) | set(ranges[j]))
        (small if len(block) <= MAX_BLOCK else large).append(block if len(block) <= MAX_BLOCK else (i, j))
    return small, large


def unit_slices(layout: Layout, pair: list[int]) -> list[tuple[Key, list[int]]]:
    """For each axis size n shared by the layers in ``pair`` (one layer: any of its sizes) and each u < n,
    the coordinates whose index along some axis of size n is u, in the tensors with such an axis."""
    tensors = layer_tensors(layout)
    sizes = [axis_sizes(layout, tensors[i]) for i in pair]
    shared = sorted(set.intersection(*sizes)) if len(set(pair)) > 1 else sorted(sizes[0])
    out = []
    for n in shared:
        for u in range(n):
            coords = [c for i in dict.fromkeys(pair) for t in tensors[i] for c in _slice(layout, t, n, u)]
            if coords:
                out.append(((pair[0], pair[-1], n, 0, u), sorted(coords)))
    return out


def _slice(layout: Layout, t: int, n: int, u: int) -> list[int]:
    """Flat coordinates of tensor t whose index along any axis of size n is u."""
    shape = layout.shapes[t]
    axes = [a for a, size in enumerate(shape) if size == n]
    if not axes:
        return []
    index = np.indices(shape).reshape(len(shape), -1)
    mask = np.zeros(index.shape[1], dtype=bool)
    for a in axes:
        mask |= index[a] == u
    return (np.flatnonzero(mask) + layout.offset(t)).tolist()


def flattened_slices(layout: Layout, pair: list[int]) -> list[tuple[Key, list[int]]]:
    """For consecutive layers i, j = i + 1 where the output axis (axis 0) of size n of layer i's tensors meets an
    input axis (axis 1) of size n·k, k > 1, of layer j's weights (a ``Flatten`` between them), and each u < n: layer
    i's entries with index u on axis 0, and layer j's weight columns of u, channels first (``u·k … u·k + k − 1``)
    or positions first (``u, u + n, …``).

    Examples
    ========
    >>> layout = Layout(("c.weight", "c.bias", "fc.weight"), ((2, 1, 3), (2,), (1, 4)))  # 2 channels of 2 positions
    >>> [(key, coords) for key, coords in flattened_slices(layout, [0, 1])][:2]  # channel 0: its filter, bias, columns
    [((0, 1, -5, 0, 0), [0, 1, 2, 6, 8, 9]), ((0, 1, -5, 0, 1), [3, 4, 5, 7, 10, 11])]
    """
    i, j = pair
    if j != i + 1:  # a Flatten sits between two consecutive layers
        return []
    tensors = layer_tensors(layout)
    inputs = {layout.shapes[t][1] for t in tensors[j] if len(layout.shapes[t]) >= 2}
    out = []
    for n in sorted({layout.shapes[t][0] for t in tensors[i] if layout.shapes[t] and layout.shapes[t][0] > 1}):
        for m in sorted(m for m in inputs if m > n and m % n == 0):
            for order, columns in enumerate((_channels_first, _positions_first)):
                for u in range(n):
                    before = along(layout, tensors[i], n, 0, u)
                    after = [c for t in tensors[j] for c in _columns(layout, t, m, columns(n, m, u))]
                    out.append(((i, j, -(2 * n + 1 + order), 0, u), sorted(before + after)))
    return out


def axis_slices(layout: Layout, pair: list[int]) -> list[tuple[Key, list[int]]]:
    """For two layers sharing a size n that one of them has on both axes (a square q or o of an attention), and each
    u < n: the unit slices along one axis of each layer, every choice in turn (variant 1, 2, ...), a layer's
    1-D tensors (biases) going with axis 0. ``Q_h Q_hᵀ − K_h K_hᵀ`` reads rows of q and k only, ``V_h V_hᵀ − O_hᵀO_h``
    rows of v and columns of o: a slice along both axes of both holds twice the coordinates, and a pair of them
    (the off-diagonal entries) more than ``MAX_SLICE`` from d = 12 on.

    Examples
    ========
    >>> layout = Layout(("q.weight", "k.weight"), ((2, 2), (2, 2)))  # unit 0 of the rows of both: q[0, :], k[0, :]
    >>> [(key, coords) for key, coords in axis_slices(layout, [0, 1])][:2]
    [((0, 1, 2, 1, 0), [0, 1, 4, 5]), ((0, 1, 2, 1, 1), [2, 3, 6, 7])]
    """
    i, j = pair
    tensors = layer_tensors(layout)
    out = []
    for n in sorted(axis_sizes(layout, tensors[i]) & axis_sizes(layout, tensors[j])):
        choices = [_axes(layout, tensors[layer], n) for layer in pair]
        if i == j or all(len(c) <= 1 for c in choices):
            continue
        for variant, (a, b) in enumerate(product(*choices), 1):
            for u in range(n):
                coords = along(layout, tensors[i], n, a, u) + along(layout, tensors[j], n, b, u)
                out.append(((i, j, n, variant, u), sorted(coords)))
    return out


def grouped_slices(layout: Layout, pair: list[int]) -> list[tuple[Key, list[int]]]:
    """For two layers where one's output axis (axis 0, size n) meets an axis of size m = G·n, G > 1, of the other's
    weight (its rows when both read inputs of one size, its columns when it maps back to the size the first reads),
    each block size b dividing n and each u < n: the first layer's entries with index u on axis 0 and the other's G
    rows (or columns) :func:`~conslaw_lite.law_moves.group_rows`. Grouped-query attention: K/V head u // b of width b
    feeds the G query heads after it, so ``Σ_{h∈g} Q_h Q_hᵀ − K_g K_gᵀ`` pairs row u of k with rows
    ``(u // b)·G·b + t·b + u % b`` of q, and ``V_g V_gᵀ − Σ_{h∈g} O_hᵀO_h`` row u of v with those columns of o.

    Examples
    ========
    >>> layout = Layout(("q.weight", "k.weight"), ((4, 1), (2, 1)))  # 2 query rows for each K/V row
    >>> [(key, coords) for key, coords in grouped_slices(layout, [0, 1]) if key[3][1] == 2]  # one head of width 2
    [((0, 1, 2, (2, 2, 0, 0), 0), [0, 2, 4]), ((0, 1, 2, (2, 2, 0, 0), 1), [1, 3, 5])]
    """
    i, j = pair
    if i == j:
        return []
    tensors = layer_tensors(layout)
    out = []
    for small, big in ((i, j), (j, i)):
        weights = [layout.shapes[t] for t in tensors[small] if len(layout.shapes[t]) == 2]
        others = [layout.shapes[t] for t in tensors[big] if len(layout.shapes[t]) == 2]
        if not weights or not others:
            continue
        (n, n_in), (m_out, m_in) = weights[0], others[0]
        grouped = [(0, m_out)] if m_in == n_in else []  # rows: both read one input (q and k)
        grouped += [(1, m_in)] if m_out == n_in else []  # columns: it maps back to the size the first reads (v, o)
        for axis, m in [(axis, m) for axis, m in grouped if m > n and m % n == 0]:
            for b in (b for b in range(1, n + 1) if n % b == 0):
                variant = (m // n, b, big, axis)
                for u in range(n):
                    rows = group_rows(n, variant[:2], u)
                    coords = along(layout, tensors[small], n, 0, u)
                    coords += [c for r in rows for c in along(layout, tensors[big], m, axis, r)]
                    out.append(((i, j, n, variant, u), sorted(coords)))
    return out


def unit_group(axis: tuple) -> Group | None:
    """The (G, b) of a grouped axis (:func:`grouped_slices`), None for the others (θ's channels among them)."""
    return axis[3][:2] if isinstance(axis[3], tuple) and axis[0] != -2 else None


def axis_sizes(layout: Layout, tensors: list[int]) -> set[int]:
    """The axis sizes of a layer's tensors."""
    return {n for t in tensors for n in layout.shapes[t]}


def _axes(layout: Layout, tensors: list[int], n: int) -> list[int]:
    """The axes of size n of a layer's tensors of two axes or more."""
    return sorted(
        {a for t in tensors if len(layout.shapes[t]) >= 2 for a, size in enumerate(layout.shapes[t]) if size == n}
    )


def along(layout: Layout, tensors: list[int], n: int, axis: int, u: int) -> list[int]:
    """Flat coordinates of a layer's tensors with index u on ``axis`` (of size n); a 1-D tensor's entry u on axis 0.

    Examples
    ========
    >>> along(Layout(("W", "b"), ((2, 3), (2,))), [0, 1], 2, 0, 1)  # row 1 of W, then b[1]
    [3, 4, 5, 7]
    """
    out = []
    for t in tensors:
        shape = layout.shapes[t]
        if axis < len(shape) and shape[axis] == n and (len(shape) >= 2 or axis == 0):
            index = np.indices(shape).reshape(len(shape), -1)
            out += (np.flatnonzero(index[axis] == u) + layout.offset(t)).tolist()
    return out


def _channels_first(n: int, m: int, u: int) -> list[int]:
    k = m // n
    return list(range(u * k, (u + 1) * k))


def _positions_first(n: int, m: int, u: int) -> list[int]:
    return list(range(u, m, n))


def _columns(layout: Layout, t: int, m: int, columns: list[int]) -> list[int]:
    """Flat coordinates of weight t (axis 1 of size m) in the given columns of axis 1."""
    shape = layout.shapes[t]
    if len(shape) < 2 or shape[1] != m:
        return []
    index = np.indices(shape).reshape(len(shape), -1)
    return (np.flatnonzero(np.isin(index[1], columns)) + layout.offset(t)).tolist()


def fan_out_slices(layout: Layout, groups: list[list[int]]) -> list[tuple[Key, list[int]]]:
    """The unit slices of each group of a layer and the layers that read its output
    (:func:`conslaw_lite.dataflow.fan_outs`: a norm and the q, k, v after it, whose laws couple all four), keyed
    ``(layer, −1 − group, n, 0, u)``: an axis of their own, whose first slice is solved and its laws moved to the
    others.

    Examples
    ========
    >>> layout = Layout(("norm.weight", "q.weight", "k.weight"), ((2,), (3, 2), (3, 2)))
    >>> fan_out_slices(layout, [[0, 1, 2]])  # coordinate 0: γ₀, the column 0 of both readers
    [((0, -1, 2, 0, 0), [0, 2, 4, 6, 8, 10, 12]), ((0, -1, 2, 0, 1), [1, 3, 5, 7, 9, 11, 13])]
    """
    return [
        ((group[0], -1 - g, n, 0, u), coords)
        for g, group in enumerate(groups)
        for (_, _, n, _, u), coords in unit_slices(layout, group)
    ]


def slice_blocks(layout: Layout, large: list[tuple[int, int]]) -> tuple[list, list, int]:
    """The unit slices (and flattened ones) of the pairs too large to search whole: those of up to ``MAX_SLICE``
    coordinates, those of up to ``MAX_SQUARES`` (searched on their squares alone), and how many were larger (left out).

    A hidden channel of a convolution ties its filter to the next layer's filters' slices along their input axis:
    ``‖W₁[i, :, :, :]‖² + b₁[i]² − ‖W₂[:, i, :, :]‖²``, 100 coordinates with 3 → 8 → 8 channels of 3 × 3, 5,150
    unknowns, but sums of squares only (:func:`squares_only`: 200 unknowns).
    """
    kept, squares, seen, over = [], [], set(), 0
    for i, j in large:
        for key, coords in unit_slices(layout, [i, j]) + flattened_slices(layout, [i, j]) + axis_slices(layout, [i, j]):
            if tuple(coords) in seen:
                continue
            seen.add(tuple(coords))
            if len(coords) <= MAX_SLICE:
                kept.append((key, coords))
            elif len(coords) <= MAX_SQUARES:
                squares.append((key, coords))
            else:
                over += 1
    return kept, squares, over


def squares_only(n: int) -> list[tuple[int, int]]:
    """The products θ_jθ_j of a block of n coordinates, as positions in it: a law ``Σ c_j θ_j² + Σ b_j θ_j``.

    Examples
    ========
    >>> squares_only(3)
    [(0, 0), (1, 1), (2, 2)]
    """
    return [(p, p) for p in range(n)]


def slice_pairs(
    slices: list[tuple[Key, list[int]]], lawful: frozenset[tuple] = frozenset(), layout: Layout | None = None
) -> tuple[list[tuple[tuple, int, int, list[int], list[tuple[int, int]] | None]], int]:
    """Unions of two unit slices u < v of one axis, as ``(axis, u, v, coordinates, monomials)``, and how many were left
    out: first those of the axes in ``lawful`` (``key[:4]`` of axes whose unit slices have laws, as a head's diagonal
    entries ``‖Q[u, :]‖² − ‖K[u, :]‖²`` are, whose off-diagonal ones a pair holds), axis by axis, smallest first
    within each. ``monomials`` is None (every product of two coordinates) up to ``MAX_SLICE`` coordinates; a larger
    union is kept, given ``layout``, with its :func:`aligned_monomials` when they are no more unknowns than
    ``MAX_SLICE`` coordinates give, else left out."""
    by_key: dict[tuple, list[tuple[int, list[int]]]] = {}
    for key, coords in slices:
        by_key.setdefault(key[:4], []).append((key[4], coords))
    unions = sorted(
        ((axis not in lawful, order, len(union)), (axis, u, v, union))
        for order, (axis, group) in enumerate(by_key.items())
        for (u, a), (v, b) in combinations(group, 2)
        for union in [sorted(set(a) | set(b))]
    )
    kept, keys = [], {}  # keys: each axis's alignment, computed once for all its pairs
    for _, (axis, u, v, union) in unions:
        if len(union) <= MAX_SLICE:
            kept.append((axis, u, v, union, None))
            continue
        if layout is not None and axis not in keys:
            keys[axis] = _alignment(layout, axis, sorted({c for _, coords in by_key[axis] for c in coords}))
        monomials = None if keys.get(axis) is None else _aligned(union, keys[axis])
        if monomials and len(monomials) + len(union) <= unknowns(MAX_SLICE, 2):
            kept.append((axis, u, v, union, monomials))
    return kept, len(unions) - len(kept)


def aligned_monomials(layout: Layout, axis: tuple, coords: list[int]) -> list[tuple[int, int]] | None:
    """The products θ_jθ_k of a pair of unit slices that an entry of a Gram-matrix law uses, as positions in
    ``coords``: j and k in one tensor, at the same index off its unit axis (``Q[u, c] Q[v, c]``, ``O[r, u] O[r, v]``,
    ``b[u] b[v]``). Every law the book knows on a pair of units has only these (``Q_h Q_hᵀ − K_h K_hᵀ``: a sum over c
    of aligned products): 6 a column (3 of q, 3 of k), where two rows of q and of k of width 32 have 8,256 products,
    so the pairs of a wide attention fit. None where a tensor's unit axis is not one axis (a slice along every axis of
    a square weight) or the axis is no size (flattened, fan-out).

    Examples
    ========
    >>> layout = Layout(("q.weight", "k.weight"), ((2, 3), (2, 3)))  # rows 0 and 1 of q and k: a slice along axis 0
    >>> coords = list(range(12))
    >>> aligned_monomials(layout, (0, 1, 2, 0), coords)[:3]  # q[0, 0]², q[0, 0] q[1, 0], q[1, 0]²
    [(0, 0), (0, 3), (3, 3)]
    >>> len(aligned_monomials(layout, (0, 1, 2, 0), coords))  # 3 per column of each tensor, against 78 products
    18
    """
    keys = _alignment(layout, axis, coords)
    return None if keys is None else _aligned(coords, keys)


def _alignment(layout: Layout, axis: tuple, coords: list[int]) -> dict[int, tuple] | None:
    """Each coordinate's tensor and index off the unit axis of ``axis`` (:func:`aligned_monomials`), or None."""
    i, j, n, variant = axis
    if n <= 0 or j < 0:
        return None
    tensors = layer_tensors(layout)
    unit_axis: dict[int, int] = {}
    if i == -2:  # θ's channels: the variant names each tensor's axis
        unit_axis = dict(variant)
    elif isinstance(variant, tuple):
        _, _, big, along = variant
        grouped = {t for t in tensors[big] if len(layout.shapes[t]) >= 2}
        unit_axis = {t: along if t in grouped else 0 for t in tensors[i] + tensors[j]}
    elif variant:
        choice = list(product(*(_axes(layout, tensors[layer], n) for layer in (i, j))))[variant - 1]
        unit_axis = {
            t: a if len(layout.shapes[t]) >= 2 else 0 for layer, a in zip((i, j), choice) for t in tensors[layer]
        }
    keys = {}
    for c in coords:
        t, index = layout.where(c)
        axes = [unit_axis[t]] if t in unit_axis else [a for a, size in enumerate(layout.shapes[t]) if size == n]
        if len(axes) != 1:
            return None
        keys[c] = (t, index[: axes[0]] + index[axes[0] + 1 :])
    return keys


def _aligned(coords: list[int], keys: dict[int, tuple]) -> list[tuple[int, int]]:
    """The products of two positions in ``coords`` whose coordinates share a key, each pair once."""
    groups: dict[tuple, list[int]] = {}
    for local, c in enumerate(coords):
        groups.setdefault(keys[c], []).append(local)
    return [(p, q) for group in groups.values() for p, q in combinations_with_replacement(group, 2)]


def pair_seconds(U: int) -> float:
    """The seconds a block of U unknowns takes on 2 cores (its rows, their Gram product, its smallest eigenpairs),
    fitted from 8 to 96 coordinates: 0.15 s at U = 560, 12 s at U = 4,752 (a count of work, not a clock: the blocks
    searched do not depend on the machine).

    Examples
    ========
    >>> round(pair_seconds(560), 2), round(pair_seconds(4752), 1)
    (0.1, 17.6)
    """
    return U**3 / 9e9 + U**2 / 4e6


@dataclass(frozen=True)
class Plan:
    """The blocks to search: whole layers and pairs, the pairs too large, their unit slices, slices left out, the
    blocks whose linear laws are searched whole (``linear``: all of θ up to ``MAX_LINEAR`` coordinates, else each layer
    too large to search whole), the large pairs' grouped unit slices (:func:`grouped_slices`), and their unit slices
    over ``MAX_SLICE`` coordinates, searched on their squares at degree 2 (:func:`slice_blocks`)."""

    whole: list[list[int]]
    large: list[tuple[int, int]]
    slices: list[tuple[Key, list[int]]]
    over: int
    linear: list[list[int]]
    grouped: list[tuple[Key, list[int]]] = ()  # grouped_slices of the large pairs, searched after all the others
    squares: list[tuple[Key, list[int]]] = ()  # unit slices over MAX_SLICE coordinates, searched on their squares


def blocks_plan(layout: Layout, degree: int, fan_outs: list[list[int]] = ()) -> Plan:
    """The blocks of this module's search (every layer is in one: its unit slices have fewer than ``MAX_SQUARES``
    coordinates in any model of up to 8,192 parameters; at degree 1 they are searched whole); ``fan_outs``:
    groups of a layer and its readers (:func:`fan_out_slices`), whose unit slices come after the pairs'.

    Examples
    ========
    >>> plan = blocks_plan(Layout(("0.weight", "2.weight"), ((30, 4), (2, 30))), 2)
    >>> [len(block) for block in plan.whole], plan.large  # the second layer whole; the first alone and the pair not
    ([60], [(0, 1), (0, 0)])
    >>> plan.slices[0]  # hidden unit 0: row 0 of the first weight, column 0 of the second
    ((0, 1, 30, 0, 0), [0, 1, 2, 3, 120, 150])
    >>> [len(block) for block in plan.linear]  # the linear laws bᵀθ: all 180 coordinates at once, one unknown each
    [180]
    """
    whole, large = whole_blocks(layout)
    slices, squares, over = slice_blocks(layout, large)
    seen = {tuple(coords) for _, coords in slices}
    for key, coords in fan_out_slices(layout, list(fan_outs)):
        if len(coords) <= MAX_SLICE and tuple(coords) not in seen:
            seen.add(tuple(coords))
            slices.append((key, coords))
    ranges = layers(layout)
    larger = sorted({i for p in large for i in p})
    D = sum(len(r) for r in ranges)
    if larger and D <= MAX_LINEAR:  # a linear law can span layers: 1ᵀ(o.bias − fc2.bias) where a LayerNorm reads both
        linear = [list(range(D))]
    else:
        linear = [ranges[i] for i in larger if MAX_BLOCK < len(ranges[i]) <= MAX_LINEAR]
    grouped = [(key, c) for i, j in large for key, c in grouped_slices(layout, [i, j]) if len(c) <= MAX_SLICE]
    grouped = [(key, c) for key, c in grouped if tuple(c) not in seen]
    return Plan(whole, large, slices, over, linear, grouped, squares)
