"""Which searches :func:`~conslaw_lite.find_laws.find_laws` runs: θ's own layers, then θ with its fused layers cut.

A layer that computes several things in one tensor (q, k and v in one matrix, or one bias for three weights) holds
its laws in row blocks of that tensor, which no unit slice of the whole tensor pairs up: :func:`fused_layout` cuts
it in parts, each a layer of its own (or, for a bias, a tensor of its layer), and :func:`layout_searches` plans the
blocks of θ's own layout first, then of each cut layout (:func:`~conslaw_lite.law_blocks.blocks_plan`).

Examples
========
>>> from conslaw_lite.polynomial_laws import Layout
>>> qkv = Layout(("c_attn.weight", "c_proj.weight"), ((6, 2), (2, 2)))
>>> [label for label, _, _ in layout_searches(qkv, 2, [])]
['pairs of layers', '`c_attn` cut in parts']
"""

from __future__ import annotations

from dataclasses import replace

from conslaw_lite.law_blocks import Plan, axis_sizes, blocks_plan, layer_names, layer_tensors
from conslaw_lite.polynomial_laws import Layout


def fused_layout(layout: Layout, grouped: bool = False) -> tuple[Layout, list[str]]:
    """The layout with each *fused* layer cut into its parts, and the names of the layers cut.

    A layer computing q, k and v in one matrix (``c_attn = nn.Linear(d, 3d)`` then ``.split(d, dim=-1)``, or
    ``nn.MultiheadAttention``'s ``in_proj_weight``) holds its heads' laws in row blocks of one tensor:
    ``Q_h Q_hᵀ − K_h K_hᵀ`` pairs rows ``B`` with rows ``d + B``, which no unit slice of the whole tensor does.
    A layer is cut when its output axis m (the first axis of a 2-D weight) is k parts of a size s = m/k that the
    model has elsewhere (k = 3, else 2: another layer's axis, or the layer's own input axis); every tensor of it whose
    first axis is m is cut into k tensors of s rows, named ``{layer}[p:k].{tensor}`` (``grouped``: into the parts of
    grouped-query heads, :func:`_parts`). A row-major tensor's row blocks are consecutive in θ, so the cut layout
    numbers every coordinate as ``layout`` does: a law found on it is a law of the same θ. A layer that merely widens
    (an MLP's 8 → 16) is cut too; the cut only adds blocks to search. A layer of k separate weights of m rows and one
    bias of k·m entries has its bias cut alone (:func:`_fused_biases`), the parts named ``{layer}.{bias}[p:k]`` in
    the layer, beside the weights' rows they go with.

    Examples
    ========
    >>> qkv = Layout(("c_attn.weight", "c_attn.bias", "c_proj.weight"), ((6, 2), (6,), (2, 2)))
    >>> cut, names = fused_layout(qkv)
    >>> names, cut.names[:4]
    (['c_attn'], ('c_attn[0:3].weight', 'c_attn[1:3].weight', 'c_attn[2:3].weight', 'c_attn[0:3].bias'))
    >>> cut.shapes[:4]
    ((2, 2), (2, 2), (2, 2), (2,))
    >>> from conslaw_lite.law_blocks import layers
    >>> layers(cut)[:2]  # the parts' rows and biases, at the coordinates θ has them
    [[0, 1, 2, 3, 12, 13], [4, 5, 6, 7, 14, 15]]
    """
    tensors = layer_tensors(layout)
    sizes = [axis_sizes(layout, ts) for ts in tensors]
    parts: dict[int, list[int]] = {}  # tensor -> the rows of its parts, when cut
    in_layer: set[int] = set()  # tensors whose parts stay in their layer
    cut = []
    for i, (ts, name) in enumerate(zip(tensors, layer_names(layout), strict=True)):
        weights = [layout.shapes[t] for t in ts if len(layout.shapes[t]) == 2]
        if not weights:
            continue
        m, n_in = weights[0]
        elsewhere = {n for j, s in enumerate(sizes) if j != i for n in s} | {n_in}
        rows = _parts(m, elsewhere, grouped)
        if rows:
            cut.append(name)
            parts |= {t: rows for t in ts if layout.shapes[t] and layout.shapes[t][0] == m}
        elif not grouped and (biases := _fused_biases(layout, ts, weights)):
            cut.append(name)
            parts |= biases
            in_layer |= set(biases)
    names, shapes = [], []
    for t, (name, shape) in enumerate(zip(layout.names, layout.shapes, strict=True)):
        if t not in parts:
            names.append(name)
            shapes.append(shape)
            continue
        rows, (module, dot, leaf) = parts[t], name.rpartition(".")
        for p, r in enumerate(rows):  # a bias cut alone stays in its layer, beside the weights its parts go with
            part = f"[{p}:{len(rows)}]"
            names.append(f"{name}{part}" if t in in_layer else f"{module if dot else name}{part}.{leaf}")
            shapes.append((r, *shape[1:]))
    return Layout(tuple(names), tuple(shapes)), cut


def _fused_biases(layout: Layout, tensors: list[int], weights: list[tuple[int, ...]]) -> dict[int, list[int]]:
    """The biases of a layer with k > 1 weights of m rows each that hold k·m entries, cut in k parts of m: one bias for
    separate q, k and v weights (``nn.MultiheadAttention`` with ``kdim``/``vdim``: ``in_proj_bias`` beside
    ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``), whose part p goes with weight p's rows.

    Examples
    ========
    >>> mha = Layout(("a.q", "a.k", "a.v", "a.bias"), ((4, 4), (4, 3), (4, 3), (12,)))
    >>> _fused_biases(mha, [0, 1, 2, 3], list(mha.shapes[:3]))
    {3: [4, 4, 4]}
    """
    m, k = weights[0][0], len(weights)
    if k < 2 or any(w[0] != m for w in weights):
        return {}
    return {t: [m] * k for t in tensors if layout.shapes[t] == (k * m,)}


def _parts(m: int, elsewhere: set[int], grouped: bool) -> list[int]:
    """The rows of a fused layer's parts, [] where it is not cut: k equal parts of a size the model has elsewhere
    (k = 3, else 2); with ``grouped``, the queries' q rows (a size it has elsewhere, o's input) and two parts of r
    rows, the keys' and the values', r dividing q: grouped-query attention's ``qkv_proj``, q = G·r, G > 1.

    Examples
    ========
    >>> _parts(24, {8}, False), _parts(16, {8}, False), _parts(16, {8}, True), _parts(24, {8}, True)
    ([8, 8, 8], [8, 8], [8, 4, 4], [])
    """
    if grouped:
        halves = [(q, (m - q) // 2) for q in sorted(elsewhere, reverse=True) if q < m and (m - q) % 2 == 0]
        return next(([q, r, r] for q, r in halves if 0 < r < q and q % r == 0), [])
    k = next((k for k in (3, 2) if m % k == 0 and m // k > 1 and m // k in elsewhere), 0)
    return [m // k] * k if k else []


def layout_searches(layout: Layout, degree: int, readers: list[list[str]]) -> list[tuple[str, Plan, Layout]]:
    """The searches of :func:`~conslaw_lite.find_laws.find_laws`, ``(label, plan, layout)``: θ's own layers
    (``readers``: each layer with those reading its output, :func:`~conslaw_lite.dataflow.readers_of`), then θ with its
    fused layers cut in parts (:func:`fused_layout`): in equal parts, then in those of grouped-query heads (their unit
    slices searched with the grouped ones, after the pairs of the axes with unit laws), each where it cuts a layer and a
    block of the parts fits."""
    searches = [("pairs of layers", blocks_plan(layout, degree, layer_groups(readers, layout)), layout)]
    for grouped, kind in ((False, "parts"), (True, "grouped-query parts")):
        cut, fused = fused_layout(layout, grouped)
        plan = blocks_plan(cut, degree, layer_groups(readers, cut)) if fused else None
        if plan is not None and grouped:  # a guess (an MLP's 16 → 32 cut in 16, 8, 8 too): searched with the grouped
            plan = replace(plan, slices=[], squares=[], grouped=plan.slices + plan.grouped)
        if plan is not None and cut not in [c for _, _, c in searches]:
            searches.append((f"{', '.join(f'`{name}`' for name in fused)} cut in {kind}", plan, cut))
    return searches


def layer_groups(groups: list[list[str]], layout: Layout) -> list[list[int]]:
    """The groups of module names as layer numbers of ``layout``, a layer cut in parts (``c_attn[0:3]``: a reader
    of a norm) standing for all its parts; a group with a module the layout lacks (a function's names) is left out."""
    index: dict[str, list[int]] = {}
    for i, name in enumerate(layer_names(layout)):
        index.setdefault(name.partition("[")[0] if name.endswith("]") else name, []).append(i)
    return [[i for n in group for i in index[n]] for group in groups if all(n in index for n in group)]
