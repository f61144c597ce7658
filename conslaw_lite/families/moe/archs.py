"""Mixtures of experts as named architectures: ``moe-softmax``, ``moe-topk``, ``moe-sigmoid``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.moe.block import MoE
from conslaw_lite.families.moe.laws import formula
from conslaw_lite.seeding import seeded

TOKENS = 64  # default tokens per input under top-k routing: the experts share them, each needs enough for its count
ROUTED = ("dim", "hidden", "out", "seq", "experts", "top_k")  # the sizes of a block that --top-k may route


def _build(options: ArchOptions, gating: str, top_k: int | None, **defaults: int) -> Built:
    if top_k is not None:
        defaults["seq"] = TOKENS
    o = options.with_defaults(**defaults)
    with seeded(o.seed):
        model = MoE(o.dim, o.experts, o.hidden, o.out, gating=gating, top_k=top_k).double()
    formula_n, text = formula(o.experts, o.hidden, o.dim, gating, top_k)
    note = ""
    if top_k is not None and top_k < o.experts:
        note = (
            f"top-k routing is piecewise smooth: the count is that of the fixed routing at inputs with no tie "
            f"between the k-th and (k+1)-th logit (routing_margin > 0, true for random inputs with probability 1); "
            f"each input carries T = {o.seq} tokens so that every expert receives enough of them"
        )
    shape = (o.dim,) if o.seq is None else (o.seq, o.dim)
    return Built(model, shape, formula_n, text, note)


def build_moe_softmax(options: ArchOptions) -> Built:
    """Dense softmax-gated MoE (defaults d = 3, n_E = 3, r = 2, m = 2); ``--top-k`` belongs to ``moe-topk``.

    Examples
    ========
    Each expert's SwiGLU laws plus the gate-row sum ``Σ_e W_e`` (d laws):

    >>> built = build_moe_softmax(ArchOptions())
    >>> built.formula, built.formula_text
    (9, 'n_E·r + d = 3·2 + 3 = 9')
    """
    if options.top_k is not None:
        raise ValueError("moe-softmax is dense; for top-k routing use moe-topk --top-k K")
    return _build(options, "softmax", None, dim=3, experts=3, hidden=2, out=2)


def build_moe_topk(options: ArchOptions) -> Built:
    """Softmax top-k MoE (defaults d = 3, n_E = 4, r = 2, m = 2, k = 2, T = 64), gate renormalised over S(x).

    Examples
    ========
    >>> built = build_moe_topk(ArchOptions(top_k=1))
    >>> built.formula_text, built.input_shape
    ('n_E·r + n_E·d = 4·2 + 4·3 = 20', (64, 3))
    """
    o = options.with_defaults(top_k=2)
    return _build(o, "softmax", o.top_k, dim=3, experts=4, hidden=2, out=2)


def build_moe_sigmoid(options: ArchOptions) -> Built:
    """Dense normalized-sigmoid MoE (defaults d = 3, n_E = 3, r = 2, m = 2); ``--top-k`` routes as in moe-topk.

    Examples
    ========
    Normalized sigmoid gating is not shift-invariant, so ``Σ_e W_e`` is lost: only the experts' laws remain.

    >>> built = build_moe_sigmoid(ArchOptions())
    >>> built.formula, built.formula_text
    (6, 'n_E·r = 3·2 = 6')
    """
    return _build(options, "sigmoid", options.top_k, dim=3, experts=3, hidden=2, out=2)


ARCHITECTURES = (
    Arch(
        "moe-softmax",
        "mixture of SwiGLU experts, dense softmax gating: n_E·r + d laws",
        build_moe_softmax,
        ("dim", "hidden", "out", "seq", "experts"),  # no --top-k: dense (moe-topk routes)
    ),
    Arch(
        "moe-topk",
        "mixture of SwiGLU experts, softmax top-k routing: n_E·r + d (k ≥ 2), n_E·r + n_E·d (k = 1)",
        build_moe_topk,
        ROUTED,
    ),
    Arch(
        "moe-sigmoid",
        "mixture of SwiGLU experts, normalized sigmoid gating: n_E·r laws (no gate law)",
        build_moe_sigmoid,
        ROUTED,
    ),
)
