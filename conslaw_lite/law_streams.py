"""The channels of all of θ: the streams that laws across any number of layers run along.

A residual stream ``h ← h + fc2(act(fc1(h)))`` between two ``Linear`` layers is acted on by GL(d), and its law is a
d × d matrix: ``inp.weight inp.weightᵀ + inp.bias inp.biasᵀ − fc1.weightᵀ fc1.weight + fc2.weight fc2.weightᵀ + … −
out.weightᵀ out.weight``. Its diagonal entries are sums of squares over every layer that reads or writes the stream,
which the search over all of θ on its squares finds; its off-diagonal entries lie in no pair of layers. The streams
read off those sums of squares give the slices (channel u of every tensor of the stream) whose pairs hold them.
A stream that a LayerNorm reads keeps less than GL(d): only its direction 𝟙, which the norm centres away, can be
rescaled against the head, and its one law ``𝟙ᵀ(inp.weight inp.weightᵀ + … − out.weightᵀ out.weight)𝟙`` is a sum
over every pair of channels, in none of them: :func:`stream_blocks` takes every tensor of the axis size at once.
"""

from __future__ import annotations

import math
from itertools import combinations_with_replacement

import numpy as np

from conslaw_lite.law_basis import echelon
from conslaw_lite.law_blocks import Key, along, layer_tensors
from conslaw_lite.polynomial_laws import Layout


def channel_slices(layout: Layout, vectors: np.ndarray, columns: list[tuple]) -> list[tuple[Key, list[int]]]:
    """The channels of all of θ along which the null ``vectors`` (over the monomials ``columns``: the sums of squares
    of all of θ) hold laws: the streams of each axis size n. A combination of the vectors that lies in unit 0's slice
    (the entries at index 0 of an axis of size n) reads some ``(tensor, axis)``; those read by one law make a stream,
    and unit u of a stream of two tensors or more is the entries at index u of its axes, keyed ``(−2, 0, n, stream,
    u)``. A residual stream's channel ties every layer that reads or writes it (``‖inp.weight[i, :]‖² −
    ‖fc1.weight[:, i]‖² + ‖fc2.weight[i, :]‖² − …``), and the pairs of these slices hold the other entries of its
    Gram-matrix law, in no pair of layers. A square weight between two streams of one width is read along its axis 0
    by the one and its axis 1 by the other; a tensor read along two axes by one stream is left out of it.

    Examples
    ========
    >>> layout = Layout(("W1", "W2"), ((2, 1), (1, 2)))  # W1[i, 0] W2[0, i]: channel i of two layers
    >>> law = np.array([[1.0, -1.0]])  # W1[0, 0]² − W2[0, 0]²
    >>> channel_slices(layout, law, [(0, 0), (2, 2)])
    [((-2, 0, 2, ((0, 0), (1, 1)), 0), [0, 2]), ((-2, 0, 2, ((0, 0), (1, 1)), 1), [1, 3])]
    >>> layout = Layout(("A", "B"), ((2, 2), (1, 2)))  # channel i: row i of the square A and column i of B
    >>> law = np.array([[0.5, 0.5, 0.0, 0.0, -0.5, 0.0]]) / 0.75**0.5  # ‖A[0, :]‖² − B[0, 0]²
    >>> channel_slices(layout, law, [(c, c) for c in range(6)])[0]
    ((-2, 0, 2, ((0, 0), (1, 1)), 0), [0, 1, 4])
    """
    found = []
    for n in sorted({size for shape in layout.shapes for size in shape if size > 1}):
        nodes = [(t, a) for t in range(len(layout.shapes)) for a in _axes_of(layout, t, n)]
        if len({t for t, _ in nodes}) < 2 or not len(vectors):
            continue
        inside = {c for t, a in nodes for c in along(layout, [t], n, a, 0)}
        in_unit = set(_monomials_in(columns, inside))
        outside = [c for c in range(len(columns)) if c not in in_unit]
        _, s, vt = np.linalg.svd(vectors[:, outside].T if outside else np.zeros((1, len(vectors))))
        combos = vt[int((s > 1e-4).sum()) :]
        if not len(combos):
            continue
        # the monomials each (tensor, axis) alone has in channel 0, and those of the corners of square weights, which
        # pivot last: the laws of two streams through one square weight share only those, and come out apart
        own = [_monomials_in(columns, _only_along(layout, t, n, a)) for t, a in nodes]
        alone = {c for cols in own for c in cols}
        order = [c for c in range(len(columns)) if c in alone] + [c for c in range(len(columns)) if c not in alone]
        laws = echelon((combos @ vectors)[:, order])[:, np.argsort(order)]
        read = [[k for k, cols in enumerate(own) if cols and np.abs(law[cols]).max() > 1e-4] for law in laws]
        for stream in _streams(nodes, read):
            variant = tuple(nodes[k] for k in stream)
            units = [sorted(c for t, a in variant for c in along(layout, [t], n, a, u)) for u in range(n)]
            found += [((-2, 0, n, variant, u), coords) for u, coords in enumerate(units)]
    return found


def stream_blocks(layout: Layout) -> list[tuple[int, list[int], list[tuple[int, int]]]]:
    """Per axis size n of two layers or more: ``(n, coordinates, products)``, the coordinates of every tensor with an
    axis of size n, whole, and the products that a Gram-matrix law of that axis uses, as pairs of positions in them:
    two entries of one tensor at the same index off the axis (``E[u, c] E[v, c]``, ``e[u] e[v]``, ``H[r, u] H[r, v]``);
    a square weight's along both of its axes (a stream may read it along either). Fewest products first.

    Examples
    ========
    >>> layout = Layout(("E", "H"), ((2, 1), (1, 2)))  # f = H E x: channel u is E's row u and H's column u
    >>> stream_blocks(layout)  # E[0, 0]², E[0, 0] E[1, 0], E[1, 0]², then the same of H's row
    [(2, [0, 1, 2, 3], [(0, 0), (0, 1), (1, 1), (2, 2), (2, 3), (3, 3)])]
    >>> (_, _, products), = stream_blocks(Layout(("E", "H"), ((2, 1), (2, 2))))  # a square head H, entries 2 to 5
    >>> len(products), (2, 3) in products, (2, 4) in products, (2, 5) in products  # H[0, 0] H[1, 1]: aligned on none
    (11, True, True, False)
    """
    layer_of = {t: k for k, tensors in enumerate(layer_tensors(layout)) for t in tensors}
    blocks = []
    for n in sorted({size for shape in layout.shapes for size in shape if size > 1}):
        nodes = {t: [a for a, size in enumerate(shape) if size == n] for t, shape in enumerate(layout.shapes)}
        nodes = {t: axes for t, axes in nodes.items() if axes}
        if len({layer_of[t] for t in nodes}) < 2:
            continue
        coords = [layout.offset(t) + k for t in sorted(nodes) for k in range(math.prod(layout.shapes[t]))]
        groups: dict[tuple, list[int]] = {}
        for local, c in enumerate(coords):
            t, index = layout.where(c)
            for a in nodes[t]:
                groups.setdefault((t, a, index[:a] + index[a + 1 :]), []).append(local)
        products = sorted({pair for group in groups.values() for pair in combinations_with_replacement(group, 2)})
        blocks.append((n, coords, products))
    return sorted(blocks, key=lambda block: len(block[2]))


def _axes_of(layout: Layout, t: int, n: int) -> list[int]:
    return [a for a, size in enumerate(layout.shapes[t]) if size == n and (a == 0 or len(layout.shapes[t]) >= 2)]


def _only_along(layout: Layout, t: int, n: int, axis: int) -> set[int]:
    """Tensor t's entries at index 0 on ``axis`` and at another index on its other axes of size n."""
    shape = layout.shapes[t]
    index = np.indices(shape).reshape(len(shape), -1)
    others = [a for a in _axes_of(layout, t, n) if a != axis]
    at = (index[axis] == 0) & np.all(index[others] != 0, axis=0)
    return set((np.flatnonzero(at) + layout.offset(t)).tolist())


def _monomials_in(columns: list[tuple], coords: set[int]) -> list[int]:
    """The positions of the monomials of ``columns`` made of ``coords`` alone."""
    return [c for c, mono in enumerate(columns) if set(mono) <= coords]


def _streams(nodes: list[tuple[int, int]], read: list[list[int]]) -> list[list[int]]:
    """The nodes (tensor, axis) that the same laws read, joined (``read``: each law's nodes), as sorted groups of two
    tensors or more; a tensor read along two axes of one group is left out of it."""
    group = list(range(len(nodes)))

    def root(k: int) -> int:
        while group[k] != k:
            k = group[k]
        return k

    for ks in read:
        for k in ks[1:]:
            group[root(k)] = root(ks[0])
    joined: dict[int, list[int]] = {}
    for k in sorted({k for ks in read for k in ks}):
        joined.setdefault(root(k), []).append(k)
    streams = []
    for ks in joined.values():
        tensors = [nodes[k][0] for k in ks]
        kept = [k for k in ks if tensors.count(nodes[k][0]) == 1]
        if len(kept) >= 2:
            streams.append(kept)
    return streams
