"""The conjectured laws of deep stacks: one per hidden unit of every layer (ReLU, SwiGLU), none (GELU, SiLU).

Conjecture (chapter 16, evidence from :func:`~conslaw_lite.counting.count_laws` at every width and depth
2–4 of ``benchmarks/deep_stacks.py``): the laws of :class:`~.block.DeepFFN` are those of its unit
rescalings, N = Σ_l r_l for ReLU and SwiGLU and N = 0 for GELU and SiLU. For unit i of hidden layer l,
with ``R_{l+1}`` the matrix that reads it (``W_{l+1}``, or A after the last layer):

* ReLU: ``‖R_{l+1}[:, i]‖² − ‖W_l[i, :]‖²`` (the symmetry ``W_l[i] → λW_l[i]``, ``R_{l+1}[:, i] → /λ``);
* SwiGLU: ``‖B_{l+1}[:, i]‖² + ‖C_{l+1}[:, i]‖² − ‖C_l[i, :]‖²`` (l < L), ``‖A[:, i]‖² − ‖C_L[i, :]‖²``:
  the value branch C_l carries the scale, and both B_{l+1} (inside a silu) and C_{l+1} read h_l
  linearly, so both give it back.

That these laws *hold* is a one-line symmetry argument; that there are *no others* (a non-homogeneous ρ
between two layers, say, creating no new symmetry) is what only the numbers support. Controls: each
``‖R_{l+1}[:, i]‖²`` alone.
"""

from __future__ import annotations

import torch

from conslaw_lite.families.deep.block import DeepFFN
from conslaw_lite.laws import BlockLaws, Law, Params, register_laws


def formula(kind: str, hidden: tuple[int, ...]) -> tuple[int, str]:
    """The conjectured count of a deep stack with hidden widths ``(r_1, …, r_L)``: Σ r_l, or 0 for GELU/SiLU.

    Examples
    ========
    >>> formula("relu", (3, 4)), formula("gelu", (3, 4, 5))
    ((7, 'Σ_l r_l = 3 + 4 = 7'), (0, '0: no rescaling survives gelu, at any depth'))
    """
    if kind in ("gelu", "silu"):
        return 0, f"0: no rescaling survives {kind}, at any depth"
    if kind not in ("relu", "swiglu"):
        raise ValueError(f"kind must be one of relu, gelu, silu, swiglu, got {kind!r}")
    N = sum(hidden)
    return N, f"Σ_l r_l = {' + '.join(map(str, hidden))} = {N}"


def _sq(p: Params, name: str, dim: int) -> torch.Tensor:
    w = p[name]
    return (w * w).sum(dim)


def _readers(net: DeepFFN, prefix: str, layer: int) -> list[tuple[str, str]]:
    """``(label, parameter)`` of the weights that read hidden layer ``layer`` (1-based): the next layer's, or A."""
    if layer == net.depth:
        return [("A", f"{prefix}A.weight")]
    letters = "BC" if net.kind == "swiglu" else "W"
    return [(f"{c}{layer + 1}", f"{prefix}{c}.{layer}.weight") for c in letters]  # layer l + 1 is entry l


def unit_laws(net: DeepFFN, prefix: str = "") -> tuple[dict[str, Law], dict[str, Law]]:
    """``({"layer{l}/...": h_l}, controls)``: per hidden layer l, the vector of its units' laws (see the module).

    Examples
    ========
    >>> laws, controls = unit_laws(DeepFFN((2, 3, 3, 1), "swiglu"))
    >>> list(laws)
    ['layer1/‖B2[*,i]‖²+‖C2[*,i]‖²−‖C1[i]‖²', 'layer2/‖A[*,i]‖²−‖C2[i]‖²']
    """
    laws, controls = {}, {}
    writer = "C" if net.kind == "swiglu" else "W"
    for layer in range(1, net.depth + 1):
        readers = _readers(net, prefix, layer)
        written = f"{prefix}{writer}.{layer - 1}.weight"
        read = "+".join(f"‖{label}[*,i]‖²" for label, _ in readers)
        names = [name for _, name in readers]
        laws[f"layer{layer}/{read}−‖{writer}{layer}[i]‖²"] = lambda p, rs=names, w=written: (
            sum(_sq(p, r, 0) for r in rs) - _sq(p, w, 1)
        )
        controls[f"layer{layer}/{read}"] = lambda p, rs=names: sum(_sq(p, r, 0) for r in rs)
    return laws, controls


@register_laws(DeepFFN)
def _deep(module: DeepFFN, prefix: str) -> BlockLaws:
    laws, controls = unit_laws(module, prefix)
    kind = f"deep-{module.kind}"
    if module.kind in ("gelu", "silu"):
        return BlockLaws(kind, {}, {**controls, **laws})
    return BlockLaws(kind, laws, controls)
