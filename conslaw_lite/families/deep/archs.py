"""Deep stacks as named architectures: ``deep-relu``, ``deep-gelu``, ``deep-swiglu`` (``--depth`` hidden layers)."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.deep.block import DeepFFN
from conslaw_lite.families.deep.laws import formula
from conslaw_lite.seeding import seeded

SIZES = ("dim", "hidden", "out", "depth")
NOTE = "--depth hidden layers of --hidden units each; the formula is a conjecture (chapter 16), not a theorem"


def _build(options: ArchOptions, kind: str) -> Built:
    o = options.with_defaults(dim=3, hidden=3, out=2, depth=2)
    widths = (o.dim, *[o.hidden] * o.depth, o.out)
    with seeded(o.seed):
        model = DeepFFN(widths, kind).double()
    return Built(model, (o.dim,), *formula(kind, widths[1:-1]), NOTE)


def build_deep_relu(options: ArchOptions) -> Built:
    """``A·relu(W_L ⋯ relu(W_1 x))`` (defaults d = 3, r = 3, m = 2, L = 2).

    Examples
    ========
    >>> build_deep_relu(ArchOptions(depth=3)).formula_text
    'Σ_l r_l = 3 + 3 + 3 = 9'
    """
    return _build(options, "relu")


def build_deep_gelu(options: ArchOptions) -> Built:
    """``A·gelu(W_L ⋯ gelu(W_1 x))`` (defaults d = 3, r = 3, m = 2, L = 2): no law at any size tried.

    Examples
    ========
    >>> build_deep_gelu(ArchOptions()).formula
    0
    """
    return _build(options, "gelu")


def build_deep_swiglu(options: ArchOptions) -> Built:
    """L SwiGLU hidden layers ``silu(B_l h) ⊙ C_l h``, then A (defaults d = 3, r = 3, m = 2, L = 2).

    Examples
    ========
    >>> build_deep_swiglu(ArchOptions(hidden=2)).formula
    4
    """
    return _build(options, "swiglu")


ARCHITECTURES = (
    Arch("deep-relu", "L ReLU layers: one law per hidden unit, Σ_l r_l (conjectured complete)", build_deep_relu, SIZES),
    Arch("deep-gelu", "L GELU layers: no law (conjectured from counts at every size tried)", build_deep_gelu, SIZES),
    Arch(
        "deep-swiglu",
        "L SwiGLU layers: ‖B_{l+1}[:,i]‖² + ‖C_{l+1}[:,i]‖² − ‖C_l[i]‖², Σ_l r_l (conjectured)",
        build_deep_swiglu,
        SIZES,
    ),
)
