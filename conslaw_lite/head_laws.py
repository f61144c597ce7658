"""The laws of attention heads written by hand, for a model too large to search: proposed by size, then checked.

An attention written with ``nn.Linear`` layers (nanoGPT's fused ``c_attn`` split into q, k, v, or separate
``q_proj``, ``k_proj``, ``v_proj``, then an output projection) has, for each head h of width k, the symmetries of
chapter 4: the scores ``q_h k_hᵀ`` are unchanged by ``q_h → q_h G``, ``k_h → k_h G⁻ᵀ``, and the output by
``v_h → v_h M``, ``O[:, B] → O[:, B] M⁻¹``. With ``R[B] = [W[B, :] | b[B]]`` the rows (weight and bias) of the
head's block B of a projection, their laws are the k × k matrices

    R_Q[B] R_Q[B]ᵀ − R_K[B] R_K[B]ᵀ        R_V[B] R_V[B]ᵀ − O[:, B]ᵀ O[:, B]

(their upper triangles: k(k+1)/2 entries a head), and the key bias ``b_K`` is conserved: it adds ``q · b_K`` to every
score of a query, which the softmax ignores. Where r query heads share a K/V head (grouped-query attention), Q's and
O's blocks are summed over the r heads of the group. Under a rotary embedding, which turns each pair P of q's and k's
coordinates (2j and 2j + 1 of a head, or j and j + k/2 as transformers' ``rotate_half``) by an angle set by the
position, only the rotations that commute with it remain, and the laws of Q/K are ``‖R_Q[P]‖² − ‖R_K[P]‖²`` per pair.
The same patterns hold elsewhere: a linear layer between two others keeps the whole block (k = its width), a bilinear
gate ``a ⊙ b`` the units (k = 1).

Nothing names the head width, the grouping or the pairing here, so each family of blocks (a pair of row segments for
Q/K, a segment against the next layer's columns for V/O) is proposed at every width k dividing it, each way of
grouping and pairing; where the segments of one projection are q, k and v, as runs of equal or unequal widths, or
interleaved head by head (GPT-NeoX, Megatron), each layout is proposed too. A block inside a head is a subgroup of
the head's symmetry and passes; one across two heads does not, so the widest block that passes is the head. The
width is chosen on one corner entry and one diagonal entry per block (:func:`choose`, a screen of ``CORNER_ROWS``
outputs), rotary pairs only where no block of the same Q/K passed;
the chosen patterns are then checked entry by entry on ``BLOCK_ROWS`` outputs, beside the rescaled units
(:func:`~conslaw_lite.rescaling_laws.rescaling_laws`), which stay where the wider block fails, and :func:`widest`
keeps the widest of each family that passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite.dataflow import forward_watched
from conslaw_lite.laws import Law, Params

BLOCK_ROWS = 128  # outputs each θ of the check of the chosen blocks reads: a block across two heads, a wrong grouping
# or pairing fails on any output that reads the head, and each output costs a jvp of every block's Gram matrices
MOST_SIBLINGS = 4  # other Linears in the module of a query and a key that read different tensors (to_q, to_k, to_v,
# to_out): a deep MLP's layers are one module's too, and where its signal vanishes, moving one seems not to reach
# the next (a 60-layer ReLU MLP: its first layer's bias then passed the check)
FUSED = (2, 3)  # segments of a Linear whose rows fuse projections of one width: keys and values, or q, k and v
CORNER_ROWS = 32  # outputs each θ of the width screen reads: it only chooses (a block across two heads fails on any
# output that reads both), the check that follows decides


@dataclass(frozen=True)
class Pattern:
    """One proposed pattern of laws: ``law`` (named ``key``) of the blocks of width ``size`` of ``family`` (0: a
    linear law, alone in its family); ``corners``: the same blocks' corner and diagonal entries, for the screen."""

    family: tuple
    size: int
    key: str
    law: Law
    corners: Law | None = None


def _rows(weight: str, bias: str | None, index: torch.Tensor) -> Callable[[Params], torch.Tensor]:
    """``p ↦ (…, n, k, inputs + 1)``: the rows ``index`` (n × k) of a ``Linear``'s weight, its bias appended; any
    leading axes of a stack of θ kept."""

    def rows(p: Params) -> torch.Tensor:
        R = p[weight][..., index, :]
        return R if bias is None else torch.cat([R, p[bias][..., index, None]], dim=-1)

    return rows


def _columns(weight: str, index: torch.Tensor) -> Callable[[Params], torch.Tensor]:
    """``p ↦ (…, n, k, outputs)``: the columns ``index`` (n × k) of a ``Linear``'s weight."""
    return lambda p: p[weight][..., index].movedim(-3, -1)


@dataclass(frozen=True)
class Side:
    """One side of a law: ``m`` rows of ``layer`` (named ``name``) from ``offset``, weight and bias, or (``columns``)
    its m input columns. ``step``: the rows are heads of ``width`` interleaved with others, ``per`` heads in a row
    every ``step`` rows (a per-head q, k, v layout: ``per = 1``, ``step = 3·width``); 0: one run, any block width."""

    name: str
    layer: nn.Linear
    offset: int = 0
    m: int = 0
    columns: bool = False
    step: int = 0
    per: int = 1
    width: int = 0

    def index(self, k: int) -> torch.Tensor:
        """The rows (or columns) of the side's blocks of k: (m/k, k)."""
        if not self.step:
            return self.offset + torch.arange(self.m).reshape(-1, k)
        b = torch.arange(self.m // k)[:, None]
        return self.offset + (b // self.per) * self.step + (b % self.per) * k + torch.arange(k)

    def blocks(self, k: int, corners: bool = False) -> Callable[[Params], torch.Tensor]:
        """``p ↦ (…, m/k, k, ·)``: the side's blocks of k (``corners``: of each block's first and last only)."""
        index = self.index(k)
        index = index[:, [0, -1]] if corners else index
        if self.columns:
            return _columns(f"{self.name}.weight", index)
        bias = f"{self.name}.bias" if self.layer.bias is not None else None
        return _rows(f"{self.name}.weight", bias, index)

    def term(self, k: int, var: str) -> str:
        """Block ``var`` of width k, as the law's key writes it: ``R R ᵀ`` for rows (bias appended), ``Cᵀ C``."""
        index = self.rows(k, var)
        if self.columns:
            return f"{self.name}.weight[:, {index}]ᵀ {self.name}.weight[:, {index}]"
        term = f"{self.name}.weight[{index}, :] {self.name}.weight[{index}, :]ᵀ"
        if self.layer.bias is not None:
            term += f" + {self.name}.bias[{index}] {self.name}.bias[{index}]ᵀ"
        return term

    def rows(self, k: int, var: str) -> str:
        """Block ``var``'s rows (or columns), as the key writes them: ``4h:4h+4``, ``12h+4:12h+8``."""
        if self.step:
            at = f"{self.step}{var}" if self.per == 1 else f"{self.step}⌊{var}/{self.per}⌋+{k}({var} mod {self.per})"
            start = f"{self.offset}+{at}" if self.offset else at
        else:
            start = f"{self.offset}+{k}{var}" if self.offset else f"{k}{var}"
        if k == 1 and not self.step:
            return f"{self.offset}+{var}" if self.offset else var
        return f"{start}:{start}+{k}"

    def fits(self, k: int) -> bool:
        """Whether blocks of k are the side's: any divisor of a run, only its heads' width where interleaved."""
        return self.m % k == 0 and self.width in (0, k)

    def family(self) -> tuple:
        return (self.name, self.offset) if not self.step else (self.name, self.offset, self.step, self.per)

    def whole_rows(self) -> bool:
        """Whether the side is all of its layer's rows (its units are then :func:`unit_patterns`')."""
        return self.offset == 0 and self.m == self.layer.out_features

    def pair_term(self) -> str:
        """A rotary pair P of rows, as the law's key writes it."""
        bias = f" + ‖{self.name}.bias[P]‖²" if self.layer.bias is not None else ""
        return f"‖{self.name}.weight[P, :]‖²{bias}" + (
            f" (P in rows {self.rows(self.width, 'h')})" if self.step else ""
        )

    def bias_law(self) -> list[Pattern]:
        """The side's bias, a linear law where the side is a key (any other side fails its check)."""
        name, linear, offset, m = self.name, self.layer, self.offset, self.m
        if linear.bias is None:
            return []
        if self.step:
            index = self.index(self.width).flatten()
            key = f"for h in 0..{m // self.width - 1}: {name}.bias[{self.rows(self.width, 'h')}]"
            law = lambda p: p[f"{name}.bias"][..., index]  # noqa: E731
        else:
            key = f"{name}.bias[{offset}:{offset + m}]" if m != linear.out_features else f"{name}.bias"
            law = lambda p: p[f"{name}.bias"][..., offset : offset + m]  # noqa: E731
        return [Pattern(("bias", *self.family()), 0, key, law, corners=law)]  # screened whole: a few entries


def _groupings(n_first: int, n_second: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """How the blocks of the wider side share one of the narrower (grouped-query attention: r query heads a key
    head): ``(how, first's groups, second's groups)``, each ``(narrower's blocks, r)``: r heads in a row, as
    ``repeat_interleave`` gives (transformers' ``repeat_kv``), or every G-th, as ``repeat`` gives."""
    n, wide = min(n_first, n_second), max(n_first, n_second)
    r, alone = wide // n, torch.arange(n)[:, None]
    if r == 1:
        return [("", alone, alone)]
    in_a_row, every = torch.arange(wide).reshape(n, r), torch.arange(wide).reshape(r, n).T
    ways = [(f"h in {r}g..{r}g+{r - 1}", in_a_row)] + ([(f"h ≡ g mod {n}", every)] if n > 1 else [])
    return [(how, g, alone) if n_first > n_second else (how, alone, g) for how, g in ways]


def _summed(t: torch.Tensor, groups: torch.Tensor, axis: int = -3) -> torch.Tensor:
    """``t``'s blocks (along ``axis``) summed in ``groups`` (narrower's blocks × r); r = 1: ``t`` itself."""
    if groups.shape[1] == 1:
        return t
    return t.movedim(axis, -1)[..., groups].sum(-1).movedim(-1, axis)


def _grams(first: Callable, second: Callable, groups: tuple, entries: torch.Tensor) -> Law:
    """``p ↦ Σ_group first first ᵀ − Σ_group second secondᵀ`` per block, its ``entries`` (rows i and j) of each
    block flattened; ``groups``: the blocks summed into each law (:func:`_groupings`)."""
    (i, j), (g1, g2) = entries, groups

    def law(p: Params) -> torch.Tensor:
        A, B = first(p), second(p)
        G = _summed(A @ A.transpose(-1, -2), g1) - _summed(B @ B.transpose(-1, -2), g2)
        picked = G[..., i, j]
        return picked.reshape(*picked.shape[:-2], -1)

    return law


def _pairs(first: Callable, second: Callable, groups: tuple, interleaved: bool) -> Law:
    """``p ↦`` for each pair of rows a rotary embedding turns together (``interleaved``: 2j and 2j+1 of a head,
    else j and j + k/2), ``Σ_group ‖R₁‖² − Σ_group ‖R₂‖²`` over the pair, flattened."""
    g1, g2 = groups

    def paired(R: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        s = R.square().sum(-1)
        k = s.shape[-1]
        s = s.reshape(*s.shape[:-1], k // 2, 2).sum(-1) if interleaved else s.reshape(*s.shape[:-1], 2, k // 2).sum(-2)
        return _summed(s, g, axis=-2)

    def law(p: Params) -> torch.Tensor:
        d = paired(first(p), g1) - paired(second(p), g2)
        return d.reshape(*d.shape[:-2], -1)

    return law


def _divisors(m: int) -> list[int]:
    return [k for k in range(1, m + 1) if m % k == 0]


def _widths(first: Side, second: Side) -> list[int]:
    return [k for k in _divisors(min(first.m, second.m)) if first.fits(k) and second.fits(k)]


def _sum(how: str, var: str) -> str:
    return f"Σ_{{{how}}} " if how and var == "h" else ""


def blocks(first: Side, second: Side, kind: str) -> list[Pattern]:
    """The laws ``Σ R₁[B] R₁[B]ᵀ − Σ R₂[B] R₂[B]ᵀ`` of ``first`` and ``second`` at every block width k dividing the
    narrower (``kind``: "qk" for two row sides, "rescale" for rows against columns), summed over the wider side's
    blocks that share one of the narrower's (:func:`_groupings`); k = 1 for whole layers of rows against columns is
    left to :func:`~conslaw_lite.rescaling_laws.unit_patterns`.

    Examples
    ========
    >>> q, k = Side("q", nn.Linear(4, 4), m=4), Side("k", nn.Linear(4, 2, bias=False), m=2)
    >>> [p.key for p in blocks(q, k, "qk")][2]  # k = 2, r = 2 query heads in a row on a key head
    'for g in 0..0 (2×2, upper triangle): Σ_{h in 2g..2g+1} q.weight[2h:2h+2, :] q.weight[2h:2h+2, :]ᵀ + \
q.bias[2h:2h+2] q.bias[2h:2h+2]ᵀ − k.weight[2g:2g+2, :] k.weight[2g:2g+2, :]ᵀ'
    """
    patterns = []
    for k in _widths(first, second):
        if k == 1 and kind == "rescale" and first.whole_rows():
            continue
        n1, n2 = first.m // k, second.m // k
        for how, *groups in _groupings(n1, n2):
            var1, var2 = ("h", "g") if n1 > n2 else ("g", "h") if n2 > n1 else ("h", "h")
            one, two = first.term(k, var1), second.term(k, var2)
            key = f"{_sum(how, var1)}{one} − {_sum(how, var2)}{two.replace(' + ', ' − ')}"
            n = min(n1, n2)
            head = f"for {'g' if n1 != n2 else 'h'} in 0..{n - 1}" + (
                f" ({k}×{k}, upper triangle): " if k > 1 else ": "
            )
            family = (kind, *first.family(), *second.family())  # any grouping: the widest passes
            full = _grams(first.blocks(k), second.blocks(k), groups, torch.triu_indices(k, k))
            corners = _grams(first.blocks(k, True), second.blocks(k, True), groups, torch.tensor([[0, 0], [1, 0]]))
            patterns.append(Pattern(family, k, head + key, full, corners))
    return patterns


def rotary_pairs(first: Side, second: Side) -> list[Pattern]:
    """Q/K under a rotary embedding: for each pair of rows it turns together (2j, 2j + 1, or j, j + k/2 in a head of
    width k), ``Σ ‖R_Q‖² − Σ ‖R_K‖²`` over the pair, the laws that remain of a head's block (its rotations commute
    with the pair's); at every even head width k dividing the narrower side.

    Examples
    ========
    >>> q, k = Side("q", nn.Linear(4, 4, bias=False), m=4), Side("k", nn.Linear(4, 4, bias=False), m=4)
    >>> [p.key for p in rotary_pairs(q, k)]
    ['for each pair P = {2j, 2j+1} a rotary embedding turns: ‖q.weight[P, :]‖² − ‖k.weight[P, :]‖²', \
'for each pair P = {j, j+2} of a head of 4 a rotary embedding turns: ‖q.weight[P, :]‖² − ‖k.weight[P, :]‖²']
    """
    patterns = []
    for k in _widths(first, second):
        n1, n2 = first.m // k, second.m // k
        for interleaved in (True, False):
            same_at_two = interleaved and k > 2 and n1 == n2 and first.fits(2) and second.fits(2)
            if k % 2 or same_at_two or (not interleaved and k == 2):
                continue  # an odd width has no pairs; without groups, 2j and 2j+1 are the same at any width
            for how, *groups in _groupings(n1, n2):
                pair = "{2j, 2j+1}" if interleaved else f"{{j, j+{k // 2}}} of a head of {k}"
                terms = [first.pair_term(), second.pair_term()]
                group = f" summed over the heads that share one ({how})" if how else ""
                law_text = f"{terms[0]} − {terms[1].replace(' + ', ' − ')}"
                key = f"for each pair P = {pair} a rotary embedding turns{group}: {law_text}"
                family = ("rope", *first.family(), *second.family())
                law = _pairs(first.blocks(k), second.blocks(k), groups, interleaved)
                patterns.append(Pattern(family, k, key, law, corners=law))  # m/2 entries: screened whole
    return patterns


def head_patterns(
    layers: list[tuple[str, nn.Module]],
    flows: dict[str, tuple[int, int]],
    reached: dict[tuple[str, str], tuple[int, int] | None] | None = None,
) -> list[Pattern]:
    """Every family of :func:`blocks` and :func:`rotary_pairs` patterns that the layers a forward calls (in order,
    ``flows``: the ids of the tensor each one reads and of the one it returns; ``reached``: :func:`reached_columns`)
    could hold, with each Q/K side's bias as a linear law:

    * a ``Linear`` whose rows are s ≥ 2 segments as wide as the next ``Linear``'s inputs (s = 3: q, k, v fused): V/O
      for each segment against the next layer's columns, Q/K for each two;
    * a ``Linear`` whose input another ``Linear`` reads too (q, k, v), or whose output the next reads as it is: V/O
      against the next ``Linear``, whose inputs may be a multiple of its outputs (grouped V), and against the columns
      of any later ``Linear`` it reaches (heads concatenated before the output projection); an MLP's layers, a
      nonlinearity between them, propose no block (each would cost a screen of a large model and fail);
    * two ``Linear`` layers of one module that read the same tensor, one's outputs a multiple of the other's: Q/K (the
      layers of different heads, or of the experts of a mixture, are not paired); and one against each of 2 or 3
      equal segments of the other (a query against keys fused with the values, ``to_kv``).

    Examples
    ========
    >>> qkv, out = nn.Linear(8, 24), nn.Linear(8, 8)
    >>> sorted({p.family[0] for p in head_patterns([("qkv", qkv), ("out", out)], {"qkv": (1, 2), "out": (3, 4)})})
    ['bias', 'qk', 'rescale', 'rope']
    """
    patterns: list[Pattern] = []
    linears = [(n, m) for n, m in layers if type(m) is nn.Linear]
    module = dict(linears)
    shared, fusable = _sharing(linears, flows), _one_sibling(linears, flows)
    reads = [
        (a, c, (0, module[c].in_features)) for (a, _), (c, _) in zip(layers, layers[1:]) if {a, c} <= module.keys()
    ]
    reached = reached or {}
    spans = [(a, c, span) for (a, c), span in reached.items() if a in shared and span is not None]
    for a, c, (start, stop) in reads + spans:
        A, C = module[a], module[c]
        columns = Side(c, C, start, stop - start, columns=True)
        for sides in _layouts(a, A, stop - start, a in shared or flows[c][0] == flows[a][1], a in fusable):
            if sides[0].step:  # q, k, v interleaved, in this order: one Q/K, one V/O, one key bias
                q, k, v = sides
                patterns += blocks(v, columns, "rescale") + query_key(q, k) + k.bias_law()
                continue
            for x, side in enumerate(sides):
                patterns += blocks(side, columns, "rescale")
                for other in sides[x + 1 :]:
                    patterns += query_key(side, other) + side.bias_law() + other.bias_law()
    moved = {a for a, _ in reached}
    for x, (a, A) in enumerate(linears):
        for b, B in linears[x + 1 :]:
            wide, narrow = max(A.out_features, B.out_features), min(A.out_features, B.out_features)
            if _parent(a) != _parent(b) or not (flows[a][0] == flows[b][0] or _apart(a, b, reached, moved)):
                continue
            if wide % narrow == 0:
                first, second = Side(a, A, m=A.out_features), Side(b, B, m=B.out_features)
                patterns += query_key(first, second) + first.bias_law() + second.bias_law()
            if a in fusable:  # and b: each other's only sibling
                patterns += _segments((a, A), (b, B)) + _segments((b, B), (a, A))
    unique = {(p.family, p.size, p.key): p for p in patterns}
    return list(unique.values())


def _sharing(linears: list[tuple[str, nn.Module]], flows: dict[str, tuple[int, int]]) -> set[str]:
    """The ``Linear`` layers that read the same tensor as another one (q, k, v)."""
    return {name for name, _ in linears if sum(flows[n][0] == flows[name][0] for n, _ in linears) > 1}


def _apart(a: str, b: str, reached: dict[tuple[str, str], tuple[int, int] | None], moved: set[str]) -> bool:
    """Whether both layers were ``moved`` by :func:`reached_columns` and neither changed the other's input
    (``reached``): a query and a key that read different tensors (cross-attention), where an MLP's second layer reads
    what its first made."""
    return {a, b} <= moved and (a, b) not in reached and (b, a) not in reached


def _one_sibling(linears: list[tuple[str, nn.Module]], flows: dict[str, tuple[int, int]]) -> set[str]:
    """The ``Linear`` layers that read the same tensor as exactly one other ``Linear`` of their module: a query and
    keys fused with values (``to_q``, ``to_kv``), where separate q, k and v are three."""
    return {
        a for a, _ in linears if sum(flows[b][0] == flows[a][0] and _parent(b) == _parent(a) for b, _ in linears) == 2
    }


def _parent(name: str) -> str:
    return name.rpartition(".")[0]


def reached_columns(
    model: nn.Module, x: torch.Tensor, layers: list[tuple[str, nn.Module]], flows: dict[str, tuple[int, int]]
) -> dict[tuple[str, str], tuple[int, int] | None]:
    """For each ``Linear`` A that reads the same tensor as another ``Linear`` (q, k, v), or has two to
    ``MOST_SIBLINGS`` others in its module (to_q, to_kv, to_out of a cross-attention), the columns ``(start, stop)``
    of each ``Linear`` C that A's output reaches, where they are one run (all of an output projection's, or a head's
    value concatenated with the others before it, whatever order q, k and v are called in), else None: A's weight
    moved at random for one forward, the columns of C's input that changed. ``(A, A)`` (no columns) says A was moved.
    Only proposes: the check decides.

    Examples
    ========
    >>> class Heads(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.v0, self.v1, self.proj = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(4, 3)
    ...     def forward(self, x):
    ...         return self.proj(torch.cat([self.v0(x), self.v1(x)], -1))
    >>> net = Heads()
    >>> flows = {"v0": (1, 2), "v1": (1, 3), "proj": (4, 5)}
    >>> reached_columns(net, torch.randn(2, 3), list(net.named_children()), flows)
    {('v0', 'v0'): None, ('v0', 'proj'): (0, 2), ('v1', 'v1'): None, ('v1', 'proj'): (2, 4), ('proj', 'proj'): None}
    """
    linears = [(n, m) for n, m in layers if type(m) is nn.Linear]
    sharing = _sharing(linears, flows)
    siblings = {n: sum(_parent(o) == _parent(n) for o, _ in linears) - 1 for n, _ in linears}
    moved = [(n, m) for n, m in linears if n in sharing or 2 <= siblings[n] <= MOST_SIBLINGS]
    if not moved:
        return {}
    at_rest = _inputs(model, x, linears)
    spans: dict[tuple[str, str], tuple[int, int] | None] = {}
    gen = torch.Generator(x.device).manual_seed(0)  # the caller's random state untouched
    for a, A in moved:
        saved = A.weight.detach().clone()
        move = torch.randn(saved.shape, generator=gen, device=saved.device).to(saved.dtype)
        with torch.no_grad():
            A.weight.add_(move * (saved.abs().mean() + 1))
        try:
            after = _inputs(model, x, linears)
        finally:
            with torch.no_grad():
                A.weight.copy_(saved)
        spans[(a, a)] = None
        for c, before in at_rest.items():
            changed = (after[c] - before).abs().flatten(0, -2).amax(0) > 1e-9 * (before.abs().amax() + 1)
            columns = changed.nonzero().flatten().tolist()
            if columns and c != a:
                run = columns == list(range(columns[0], columns[-1] + 1))
                spans[(a, c)] = (columns[0], columns[-1] + 1) if run else None
    return spans


def _inputs(model: nn.Module, x: torch.Tensor, linears: list[tuple[str, nn.Module]]) -> dict[str, torch.Tensor]:
    """The first input of each of ``linears`` in one forward on ``x``."""
    names = dict(linears)
    seen: dict[str, torch.Tensor] = {}

    def record(name: str, args: tuple, _output: object) -> None:  # returns None: the output stays the layer's
        if name in names and name not in seen:
            seen[name] = args[0].clone()

    forward_watched(model, x, record)
    return seen


def _layouts(a: str, A: nn.Linear, n: int, attends: bool, fusable: bool) -> list[list[Side]]:
    """Ways A's rows may be segments read by n columns of a later layer: as wide as the columns (s = 3: q, k, v
    fused), or one (A's rows as they are, the columns a multiple of them: grouped V; only where A reads the same tensor
    as another layer or the next reads its output as it is, ``attends``); a query of n rows and a key and a value of
    n/r each (grouped q, k, v fused); a key and a value of equal width fused (``fusable``: A has one sibling, the
    query), the columns a multiple of them; and q, k, v interleaved (:func:`_interleaved`)."""
    rows = A.out_features
    m = min(rows, n)
    runs = [[(seg * m, m) for seg in range(rows // m)]] if max(rows, n) % m == 0 and (rows > n or attends) else []
    j = (rows - n) // 2
    if 0 < j < n and rows == n + 2 * j and n % j == 0:
        runs.append([(0, n), (n, j), (n + j, j)])
    if fusable and rows <= n:
        runs += [[(i * w, w) for i in range(f)] for f in FUSED if rows % f == 0 and n % (w := rows // f) == 0]
    return [[Side(a, A, offset, width) for offset, width in run] for run in runs] + _interleaved(a, A, n)


def _interleaved(a: str, A: nn.Linear, n: int) -> list[list[Side]]:
    """q, k and v interleaved in A's rows, for a query of n rows: per group of the G key heads of width k, its r query
    heads, its key, its value (GPT-NeoX: r = 1, each head's q, k, v; Megatron's grouped layout), at each k and G."""
    layouts = []
    for k in _divisors(n)[1:]:  # heads of one coordinate each would be units, proposed as such
        for G in _divisors(n // k):
            r = n // (k * G)
            if A.out_features != n + 2 * G * k or G == 1:
                continue  # not this layout, or one group: q, k, v in one run each, proposed as such
            step = (r + 2) * k
            q = Side(a, A, 0, n, step=step, per=r, width=k)
            layouts.append([q] + [Side(a, A, o * k, G * k, step=step, width=k) for o in (r, r + 1)])
    return layouts


def _segments(whole: tuple[str, nn.Linear], fused: tuple[str, nn.Linear]) -> list[Pattern]:
    """Q/K between one ``Linear`` and each of the s ∈ ``FUSED`` equal segments of another's rows, where one's width
    is a multiple of the other's: a separate query against keys fused with the values (``to_kv``), grouped or not;
    each segment's bias a linear law."""
    (o, O), (f, F) = whole, fused
    patterns = []
    for s in FUSED:
        m = F.out_features // s
        if F.out_features % s or (O.out_features % m and m % O.out_features):
            continue
        for offset in range(0, F.out_features, m):
            segment = Side(f, F, offset, m)
            patterns += query_key(Side(o, O, m=O.out_features), segment) + segment.bias_law()
    return patterns


def query_key(first: Side, second: Side) -> list[Pattern]:
    """The Q/K patterns of two sides (:class:`Side`, or any side with its methods): their blocks at every width, and
    the rotary pairs that remain of them under a rotary embedding.

    Examples
    ========
    >>> q, k = Side("q", nn.Linear(4, 2, bias=False), m=2), Side("k", nn.Linear(4, 2, bias=False), m=2)
    >>> sorted({p.family[0] for p in query_key(q, k)})
    ['qk', 'rope']
    """
    return blocks(first, second, "qk") + rotary_pairs(first, second)


def choose(patterns: list[Pattern], passes: Callable[[dict[str, Law]], set[str]]) -> list[Pattern]:
    """For each family, the widest block whose corner and diagonal entries ``passes`` (the check, given laws by
    key, returns the keys that pass), rotary pairs only where no block of their Q/K passed, and the patterns proposed
    without corners (units, linear laws) as they are."""
    screened = {p.key: p.corners for p in patterns if p.corners is not None}
    passed = passes(screened) if screened else set()
    blocks_passed = {layers_of(p.family) for p in patterns if p.family[0] == "qk" and p.key in passed}
    chosen = []
    for family in dict.fromkeys(p.family for p in patterns):
        if family[0] == "rope" and layers_of(family) in blocks_passed:
            continue  # a block of this Q/K passed: its pairs' laws are sums of that block's entries
        members = [p for p in patterns if p.family == family]
        wide = [p for p in members if p.key in passed]
        chosen += [p for p in members if p.key not in screened] + ([max(wide, key=lambda p: p.size)] if wide else [])
    return chosen


def layers_of(family: tuple) -> tuple:
    """What a family proposes laws between: rotary pairs are a Q/K's laws under RoPE.

    Examples
    ========
    >>> layers_of(("rope", "q", 0, "k", 0)) == layers_of(("qk", "q", 0, "k", 0))
    True
    """
    return ("qk" if family[0] == "rope" else family[0], *family[1:])


def widest(patterns: list[Pattern]) -> list[Pattern]:
    """The widest pattern of each family (``patterns``: those that passed their check), in the order given; rotary
    pairs only where no block of the same Q/K passed (their laws are sums of its entries then).

    Examples
    ========
    >>> units, heads = Pattern(("rescale",), 1, "units", None), Pattern(("rescale",), 4, "heads", None)
    >>> [p.key for p in widest([units, heads])]
    ['heads']
    """
    best: dict[tuple, Pattern] = {}
    for p in patterns:
        if p.family not in best or p.size > best[p.family].size:
            best[p.family] = p
    return [
        p for p in patterns if best[p.family] is p and not (p.family[0] == "rope" and ("qk", *p.family[1:]) in best)
    ]
