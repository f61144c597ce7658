"""Attention heads held in parameters of a module, 3-D (TransformerLens, ``einsum``) or matrices: their laws, proposed.

A module may keep each projection as one parameter of shape (n, d, k), head h mapping the stream to its k
coordinates (``q = einsum("btd,hdk->bhtk", x, W_Q) + b_Q``), and its output as (n, k, d). Chapter 4's laws are
then those of the k coordinate vectors of each head: with ``V_P[h]`` the k vectors of parameter P at head h (the
columns of ``W_Q[h]``, each with its bias ``b_Q[h, c]`` appended; the rows of ``W_O[h]``),

    V_Q[h] V_Q[h]ᵀ − V_K[h] V_K[h]ᵀ        V_V[h] V_V[h]ᵀ − V_O[h] V_O[h]ᵀ

(k × k, upper triangle), summed over the query heads of a group where fewer key heads are shared, and the key bias
``b_K`` alone. Which parameter is which, and along which axis its heads' coordinates lie, is not known here: every two
3-D parameters of one module are proposed against each other along each axis of equal width, each with the bias of
its name (``b_Q`` for ``W_Q``) or, without one, with none and with each bias of its shape, and under a rotary
embedding each pair of coordinates it turns (:func:`~conslaw_lite.head_laws.rotary_pairs`). Blocks of fewer
coordinates are proposed too, down to one: the units of a mixture's experts held in one parameter; and where one
parameter is twice as wide as another, each of its halves against it (:func:`halves`: a fused GLU's linear branch,
``gate, up = (x @ w13).chunk(2, -1)``). A matrix
(``q = x @ Wq``) is one head of all its columns, whose blocks are proposed at every width, as ``nn.Linear``
projections' are: the widest that passes is a head. The check decides
(:func:`~conslaw_lite.rescaling_laws.rescaling_laws`), as for ``nn.Linear`` heads (:mod:`conslaw_lite.head_laws`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from conslaw_lite.head_laws import Pattern, query_key
from conslaw_lite.laws import Params


@dataclass(frozen=True)
class ParameterSide:
    """One side of a law: the heads of 3-D parameter ``name`` (n, a, b), their coordinates along ``axis`` (1: a,
    2: b), each with ``bias`` (n, width) appended where there is one; in blocks of k coordinates, k dividing the
    width (k = 1: the units of a mixture's experts held in one parameter, ``W1[e][:, i]`` against ``W2[e][i, :]``).

    Examples
    ========
    >>> side = ParameterSide("W_Q", (2, 8, 4), 2, "b_Q")
    >>> side.m, side.term(4, "h")
    (8, 'W_Q[h]ᵀ W_Q[h] + b_Q[h] b_Q[h]ᵀ')
    >>> side.blocks(4)({"W_Q": torch.zeros(2, 8, 4), "b_Q": torch.ones(2, 4)}).shape  # per head: 4 vectors of 8 + 1
    torch.Size([2, 4, 9])
    >>> side.term(1, "i")
    'W_Q[⌊i/4⌋][:, i mod 4]ᵀ W_Q[⌊i/4⌋][:, i mod 4] + b_Q[⌊i/4⌋][i mod 4] b_Q[⌊i/4⌋][i mod 4]ᵀ'
    """

    name: str
    shape: tuple[int, ...]
    axis: int
    bias: str | None = None
    part: tuple[int, int] | None = None  # (start, step): half the axis, one branch of a fused GLU (:func:`halves`)

    @property
    def width(self) -> int:
        full = self.shape[self.axis - 3 + len(self.shape)]
        return full if self.part is None else full // 2

    @property
    def heads(self) -> int:
        return self.shape[0] if len(self.shape) == 3 else 1

    @property
    def m(self) -> int:
        return self.heads * self.width

    def fits(self, k: int) -> bool:
        return self.width % k == 0 and (self.part is None or k == 1)  # a branch's units, not heads

    def whole_rows(self) -> bool:
        return False

    def blocks(self, k: int, corners: bool = False) -> Callable[[Params], torch.Tensor]:
        """``p ↦ (…, n, k, ·)``: each head's coordinate vectors, bias appended (``corners``: the first and last)."""
        pick = [0, -1] if corners else slice(None)

        def vectors(p: Params) -> torch.Tensor:
            P = p[self.name] if len(self.shape) == 3 else p[self.name].unsqueeze(-3)  # a matrix: one head
            V = P if self.axis == 1 else P.transpose(-1, -2)
            if self.bias is not None:
                b = p[self.bias] if len(self.shape) == 3 else p[self.bias].unsqueeze(-2)
                V = torch.cat([V, b[..., None]], dim=-1)
            if self.part is not None:
                start, step = self.part
                V = V[..., start : start + step * self.width : step, :]
            return V.unflatten(-2, (-1, k)).flatten(-4, -3)[..., pick, :]

        return vectors

    def term(self, k: int, var: str) -> str:
        """Block ``var``'s Gram matrix of coordinate vectors, as the law's key writes it."""
        blocks = self.width // k
        if len(self.shape) == 2:  # a matrix: its blocks of k
            head, at = "", var if k == 1 else f"{k}{var}:{k}{var}+{k}"
        elif blocks == 1:
            head, at = f"[{var}]", ""
        else:
            head, start = f"[⌊{var}/{blocks}⌋]", f"{k}({var} mod {blocks})"
            at = f"{var} mod {blocks}" if k == 1 else f"{start}:{start}+{k}"
        at = self._in_part(at)
        P = f"{self.name}{head}" + (f"[:, {at}]" if at and self.axis == 2 else f"[{at}, :]" if at else "")
        term = f"{P}ᵀ {P}" if self.axis == 2 else f"{P} {P}ᵀ"
        b = f"{self.bias}{head}" + (f"[{at}]" if at else "")
        return term + (f" + {b} {b}ᵀ" if self.bias else "")

    def _in_part(self, at: str) -> str:
        """Coordinate ``at`` of the branch as an index of the whole axis: ``i`` of the second half is ``i+h``."""
        if self.part is None:
            return at
        start, step = self.part
        if not at:
            return str(start)
        inner = at if " " not in at else f"({at})"
        scaled = inner if step == 1 else f"2{inner}"
        return f"{scaled}+{start}" if start else scaled

    def pair_term(self) -> str:
        """A rotary pair P of the head's coordinates, as the law's key writes it."""
        index = "[:, P]" if self.axis == 2 else "[P, :]"
        head = "[h]" if len(self.shape) == 3 else ""
        return f"‖{self.name}{head}{index}‖²" + (f" + ‖{self.bias}{head}[P]‖²" if self.bias else "")

    def family(self) -> tuple:
        return (self.name, self.axis, self.bias, self.part)

    def bias_law(self) -> list[Pattern]:
        """The bias alone, a law where the side is a key (any other side fails its check)."""
        if self.bias is None:
            return []
        law = lambda p, bias=self.bias: p[bias]  # noqa: E731
        return [Pattern(("bias", self.bias), 0, self.bias, law, corners=law)]


def _stem(name: str) -> str:
    """A parameter's name without what says weight or bias: ``W_Q`` and ``b_Q`` give ``q``."""
    return re.sub(
        r"^(weight|bias|w|b)_?|_?(weight|bias|w|b)$",
        "",
        name.rpartition(".")[2].lower(),
    )


def _biases(weight: str, shape: tuple[int, ...], axis: int, biases: dict, weights: dict) -> list[str | None]:
    """The biases a side of ``weight`` may carry: the one of its name, else none or any of shape (heads, width) that
    is not another weight's (``b_K`` is ``W_K``'s)."""
    fitting = [b for b, s in biases.items() if s == (*shape[:-2], shape[axis - 3 + len(shape)])]
    named = [b for b in fitting if _stem(b) == _stem(weight)]
    others = {_stem(w) for w in weights}
    return named or [None, *(b for b in fitting if _stem(b) not in others)]


def parameter_head_patterns(layers: list[tuple[str, nn.Module]]) -> list[Pattern]:
    """For each module of ``layers`` with two or more trainable matrices, or 3-D parameters, of their own: every two
    against each other (module docstring; a matrix is one head, whose blocks of k are proposed at every k), and each
    bias alone.

    Examples
    ========
    >>> attention = nn.Module()
    >>> for name, shape in [("W_Q", (2, 8, 4)), ("W_K", (2, 8, 4)), ("b_K", (2, 4))]:
    ...     attention.register_parameter(name, nn.Parameter(torch.zeros(shape)))
    >>> [p.key for p in parameter_head_patterns([("attn", attention)]) if "(4×4" in p.key and "b_K" in p.key]
    ['for h in 0..1 (4×4, upper triangle): attn.W_Q[h]ᵀ attn.W_Q[h] − attn.W_K[h]ᵀ attn.W_K[h] − attn.b_K[h] \
attn.b_K[h]ᵀ']
    """
    patterns: list[Pattern] = []
    for path, module in layers:
        if isinstance(module, nn.RNNBase):
            continue  # a recurrent layer's matrices are its gates', not heads
        prefix = f"{path}." if path else ""
        own = {prefix + n: tuple(p.shape) for n, p in module.named_parameters(recurse=False) if p.requires_grad}
        for ndim in (2, 3):  # matrices (one head each, or heads of k columns), or heads on a leading axis
            patterns += _against_each_other({n: s for n, s in own.items() if len(s) == ndim}, own)
    unique = {(p.family, p.size, p.key): p for p in patterns}
    return list(unique.values())


def _against_each_other(weights: dict[str, tuple[int, ...]], own: dict[str, tuple[int, ...]]) -> list[Pattern]:
    """Every two of ``weights`` (all matrices, or all 3-D) of one module against each other along each axis, grouped
    where one has more heads than the other, with rotary pairs; and their biases alone."""
    if len(weights) < 2:
        return []
    ndim = len(next(iter(weights.values())))
    biases = {n: s for n, s in own.items() if len(s) == ndim - 1}
    sides = [
        ParameterSide(w, shape, axis, b)
        for w, shape in weights.items()
        for axis in (1, 2)
        for b in _biases(w, shape, axis, biases, weights)
    ]
    patterns = [p for side in sides for p in side.bias_law()]
    for x, first in enumerate(sides):
        for second in sides[x + 1 :]:
            if first.name != second.name and _comparable(first, second):
                patterns += query_key(first, second)
            if first.name != second.name:
                patterns += [p for branch, other in halves(first, second) for p in query_key(branch, other)]
    return patterns


def halves(first: ParameterSide, second: ParameterSide) -> list[tuple[ParameterSide, ParameterSide]]:
    """Where one side is twice as wide as the other, with as many heads: each half of it (cut in two, or its even and
    its odd coordinates) against the other. A fused GLU (``gate, up = (x @ W13).chunk(2, -1)``) keeps the units of
    its linear branch, ``‖W13[:, h+i]‖² − ‖W2[i, :]‖²``, not of the whole of W13.

    Examples
    ========
    >>> up, down = ParameterSide("W13", (4, 6), 2), ParameterSide("W2", (3, 4), 1)
    >>> [(branch.part, branch.term(1, "i")) for branch, _ in halves(up, down)]
    [((0, 1), 'W13[:, i]ᵀ W13[:, i]'), ((3, 1), 'W13[:, i+3]ᵀ W13[:, i+3]'), ((0, 2), 'W13[:, 2i]ᵀ W13[:, 2i]'), \
((1, 2), 'W13[:, 2i+1]ᵀ W13[:, 2i+1]')]
    """
    (wide, narrow) = (first, second) if first.width >= second.width else (second, first)
    if wide.part is not None or wide.width != 2 * narrow.width or wide.heads != narrow.heads:
        return []
    w = narrow.width
    return [(replace(wide, part=part), narrow) for part in ((0, 1), (w, 1), (0, 2), (1, 2))]


def _comparable(first: ParameterSide, second: ParameterSide) -> bool:
    """Heads of equal width, one side's a multiple of the other's in number (grouped-query attention); matrices, one
    width a multiple of the other (their blocks are found at every width)."""
    (wide, narrow), (n1, n2) = sorted([first.m, second.m], reverse=True), (first.heads, second.heads)
    if len(first.shape) == 2:
        return wide % narrow == 0
    return first.width == second.width and max(n1, n2) % min(n1, n2) == 0
