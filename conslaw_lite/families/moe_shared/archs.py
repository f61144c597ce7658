"""DeepSeek-MoE blocks as named architectures: ``moe-shared`` and ``moe-shared-bias``."""

from __future__ import annotations

import torch

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.moe_shared.block import SharedMoE
from conslaw_lite.families.moe_shared.laws import formula
from conslaw_lite.seeding import seeded

TOKENS = 64  # tokens per input: the routed experts share them, each needs enough for its count
SHARED = 1  # shared experts (no size option: --experts counts the routed ones)
SIZES = ("dim", "hidden", "out", "seq", "experts", "top_k")


def _build(options: ArchOptions, routing_bias: bool) -> Built:
    o = options.with_defaults(dim=3, experts=4, hidden=2, out=2, top_k=2, seq=TOKENS)
    with seeded(o.seed):
        model = SharedMoE(o.dim, SHARED, o.experts, o.hidden, o.out, o.top_k, routing_bias).double()
        if routing_bias:  # a bias the balancing has already moved: it changes the selection
            model.route_bias.copy_(torch.randn(o.experts, dtype=torch.float64))
    note = (
        f"{SHARED} shared expert; --experts routed experts, --top-k per token (weights softmax(z)_e, not "
        f"renormalised); each input carries T = {o.seq} tokens; the count is that of the fixed routing at inputs "
        "with no tie in the selection (true with probability 1)"
        + ("; the routing bias is a buffer: no gradient moves it" if routing_bias else "")
    )
    return Built(model, (o.seq, o.dim), *formula(SHARED, o.experts, o.hidden, o.dim), note)


def build_moe_shared(options: ArchOptions) -> Built:
    """One shared and ``--experts`` routed SwiGLU experts, top-k (defaults d = 3, n_r = 4, r = 2, m = 2, k = 2).

    Examples
    ========
    >>> build_moe_shared(ArchOptions()).formula_text
    '(n_s + n_r)·r + d = (1 + 4)·2 + 3 = 13'
    """
    return _build(options, routing_bias=False)


def build_moe_shared_bias(options: ArchOptions) -> Built:
    """``moe-shared`` with DeepSeek-V3's routing bias (random, as after some balancing): the same laws.

    Examples
    ========
    >>> built = build_moe_shared_bias(ArchOptions())
    >>> built.formula, built.model.route_bias.shape
    (13, torch.Size([4]))
    """
    return _build(options, routing_bias=True)


ARCHITECTURES = (
    Arch(
        "moe-shared",
        "DeepSeek-MoE: shared + routed SwiGLU experts, softmax top-k: (n_s + n_r)·r + d",
        build_moe_shared,
        SIZES,
    ),
    Arch(
        "moe-shared-bias",
        "moe-shared with a routing bias (DeepSeek-V3): the same (n_s + n_r)·r + d",
        build_moe_shared_bias,
        SIZES,
    ),
)
