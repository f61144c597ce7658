"""Multi-head attention as named architectures: ``mha``, ``mha-rope``, ``mha-rope-qknorm``, ..."""

from __future__ import annotations

import torch

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.attention.laws import formula
from conslaw_lite.seeding import seeded


def conditioned_rope_base(k: int) -> float:
    """A RoPE base whose frequencies ``ω_j = base^(−2j/k)`` run from 1 down to 1/3 rad per position.

    With the usual base 10000 the slow blocks of a short sequence barely turn
    (``ω_j·T ≪ 1``): the rotations are nearly the identity, nearly every G commutes
    with them, and the Lie rank's gap between kept and dropped singular values closes.

    Examples
    ========
    >>> round(conditioned_rope_base(4), 6)  # ω = (1, 1/3)
    9.0
    """
    if k < 2 or k % 2:
        raise ValueError(f"RoPE needs an even head_dim ≥ 2, got {k}")
    return 10000.0 if k == 2 else 3.0 ** (k / (k - 2))


def build_mha(
    options: ArchOptions,
    *,
    pe: str = "none",
    qk_norm: bool | str = False,
    norm_eps: float = 0.0,
    bias: bool = False,
) -> Built:
    """A float64 :class:`MultiHeadAttention` at a generic point, with the count the theory predicts.

    The count the theory predicts is :func:`~conslaw_lite.families.attention.laws.formula`'s.
    Gains are drawn from U(0.5, 1.5) so that no two are equal.

    Examples
    ========
    >>> built = build_mha(ArchOptions(), pe="rope")
    >>> built.formula, built.input_shape
    (24, (4, 4))
    """
    rope = pe == "rope"
    o = options.with_defaults(dim=4, heads=2, head_dim=4 if rope else 2, seq=4 if rope else 3).heads_fit()
    n, k, d = o.heads, o.head_dim, o.dim
    base = conditioned_rope_base(k) if rope else 10000.0
    with seeded(o.seed):
        model = MultiHeadAttention(d, n, k, pe=pe, qk_norm=qk_norm, norm_eps=norm_eps, bias=bias, rope_base=base)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("gamma"):
                    p.uniform_(0.5, 1.5)
    N, text = formula(n, k, pe=pe, bias=bias, qk_norm=qk_norm, norm_eps=norm_eps)
    note = ""
    if rope and k > 2:
        slowest = 10000 ** (-(k - 2) / k) * (o.seq - 1)  # largest angle of the slowest block at base 10000
        note = (
            f"RoPE base {base:.4g} instead of 10000, so the frequencies run from 1 to 1/3 rad per position "
            f"and every 2×2 block turns; with 10000 the slowest block turns {slowest:.2g} rad over "
            f"T = {o.seq} tokens: the rotations are nearly the identity and the smallest kept singular value "
            "shrinks toward the dropped ones (chapter 5 measures it)."
        )
    if qk_norm and norm_eps > 0:
        note += f" RMSNorm ε = {norm_eps:g}."
    return Built(model.double(), (o.seq, d), N, text, note.strip())


def _mha(name: str, summary: str, **kwargs) -> Arch:
    # position encoding, norms and biases are fixed per name: every variant reads the same sizes
    return Arch(name, summary, lambda options: build_mha(options, **kwargs), ("dim", "heads", "head_dim", "seq"))


ARCHITECTURES = (
    _mha("mha", "multi-head attention, no position encoding: Q_iᵀQ_i − K_iᵀK_i, V_iᵀV_i − O_iᵀO_i"),
    _mha("mha-sinusoidal", "multi-head attention with sinusoidal PE added to X: the same laws", pe="sinusoidal"),
    _mha("mha-bias", "multi-head attention with biases on Q, K, V, O: augmented laws, key bias conserved", bias=True),
    _mha("mha-rope", "multi-head attention with RoPE: one law per head and 2×2 block, plus V/O", pe="rope"),
    _mha(
        "mha-rope-qknorm",
        "RoPE + RMSNorm on q, k with per-head gains, ε > 0: laws of the gains per block, plus V/O",
        pe="rope",
        qk_norm="per_head",
        norm_eps=1e-6,
    ),
    _mha(
        "mha-rope-qknorm-eps0",
        "RoPE + QK-norm, per-head gains, ε = 0: also ‖Q_i‖², ‖K_i‖² (scale invariance)",
        pe="rope",
        qk_norm="per_head",
    ),
    _mha(
        "mha-rope-qknorm-shared",
        "RoPE + QK-norm with gains shared across heads (Qwen-3), ε > 0",
        pe="rope",
        qk_norm="shared",
        norm_eps=1e-6,
    ),
    _mha(
        "mha-rope-qknorm-shared-eps0",
        "RoPE + QK-norm with gains shared across heads, ε = 0: also ‖Q_i‖², ‖K_i‖²",
        pe="rope",
        qk_norm="shared",
    ),
)
