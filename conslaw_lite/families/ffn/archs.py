"""Feed-forward blocks as named architectures: ``ffn-gelu``, ``ffn-silu``, ``ffn-relu``, ``ffn-linear``, ``swiglu``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.ffn.block import FFN, SwiGLU
from conslaw_lite.families.ffn.laws import formula
from conslaw_lite.seeding import seeded

SIZES = ("dim", "hidden", "out")  # d, r, m of every feed-forward block


def _ffn_arch(activation: str, options: ArchOptions) -> Built:
    o = options.with_defaults(dim=3, hidden=4, out=2)
    d, r, m = o.dim, o.hidden, o.out
    with seeded(o.seed):
        model = FFN(d, r, m, activation=activation).double()
    return Built(model, (d,), *formula(activation, r))


def _ffn_gelu(options: ArchOptions) -> Built:
    return _ffn_arch("gelu", options)


def _ffn_silu(options: ArchOptions) -> Built:
    return _ffn_arch("silu", options)


def _ffn_relu(options: ArchOptions) -> Built:
    return _ffn_arch("relu", options)


def _ffn_linear(options: ArchOptions) -> Built:
    o = options.with_defaults(dim=3, hidden=2, out=3)
    d, r, m = o.dim, o.hidden, o.out
    if r > min(m, d):
        raise ValueError(f"ffn-linear's formula r(r+1)/2 needs r ≤ min(m, d); got r={r}, m={m}, d={d}")
    with seeded(o.seed):
        model = FFN(d, r, m, activation="linear").double()
    return Built(model, (d,), *formula("linear", r))


def _swiglu_arch(options: ArchOptions) -> Built:
    o = options.with_defaults(dim=3, hidden=4, out=2)
    d, r, m = o.dim, o.hidden, o.out
    with seeded(o.seed):
        model = SwiGLU(d, r, m).double()
    return Built(model, (d,), *formula("swiglu", r))


ARCHITECTURES = (
    Arch("ffn-gelu", "A·gelu(Bx): no law", _ffn_gelu, SIZES),
    Arch("ffn-silu", "A·silu(Bx): no law", _ffn_silu, SIZES),
    Arch("ffn-relu", "A·relu(Bx): ‖A_{:,i}‖² − ‖B_{i,:}‖², r laws", _ffn_relu, SIZES),
    Arch("ffn-linear", "A·Bx: AᵀA − BBᵀ, r(r+1)/2 laws (r ≤ min(m, d))", _ffn_linear, SIZES),
    Arch("swiglu", "A·(silu(Bx) ⊙ Cx): ‖A_{:,i}‖² − ‖C_{i,:}‖², r laws", _swiglu_arch, SIZES),
)
