"""Residual blocks as named architectures: ``residual-relu``, ``residual-relu-bias`` and ``residual-gelu``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.residual.block import ResidualFFN
from conslaw_lite.families.residual.laws import formula
from conslaw_lite.seeding import seeded

SIZES = ("dim", "hidden")  # the stream width d is the output's too: no --out


def _build(options: ArchOptions, activation: str, bias: bool = False) -> Built:
    o = options.with_defaults(dim=3, hidden=4)
    with seeded(o.seed):
        model = ResidualFFN(o.dim, o.hidden, activation, bias=bias).double()
    return Built(model, (o.dim,), *formula(activation, o.hidden), "--dim is the stream width d (input = output)")


def build_residual_relu(options: ArchOptions) -> Built:
    """``x + A·relu(Bx)`` (defaults d = 3, r = 4).

    Examples
    ========
    >>> build_residual_relu(ArchOptions()).formula_text
    'r = 4 (the skip adds none)'
    """
    return _build(options, "relu")


def build_residual_relu_bias(options: ArchOptions) -> Built:
    """``x + A·relu(Bx + b) + a``: b joins B's rows, a enters no law (defaults d = 3, r = 4).

    Examples
    ========
    >>> build_residual_relu_bias(ArchOptions(hidden=2)).formula
    2
    """
    return _build(options, "relu", bias=True)


def build_residual_gelu(options: ArchOptions) -> Built:
    """``x + A·gelu(Bx)`` (defaults d = 3, r = 4): no law, with or without the skip.

    Examples
    ========
    >>> build_residual_gelu(ArchOptions()).formula
    0
    """
    return _build(options, "gelu")


ARCHITECTURES = (
    Arch(
        "residual-relu",
        "x + A·relu(Bx): ‖A_{:,i}‖² − ‖B_{i,:}‖², r laws; the skip adds none",
        build_residual_relu,
        SIZES,
    ),
    Arch(
        "residual-relu-bias",
        "x + A·relu(Bx + b) + a: ‖A_{:,i}‖² − ‖[B_{i,:}, b_i]‖², r laws",
        build_residual_relu_bias,
        SIZES,
    ),
    Arch("residual-gelu", "x + A·gelu(Bx): no law, as without the skip", build_residual_gelu, SIZES),
)
