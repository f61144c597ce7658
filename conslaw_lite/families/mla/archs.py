"""Multi-head latent attention as named architectures: ``mla``, ``mla-norm`` (RMSNorm on the latents, ε > 0)
and ``mla-norm-eps0``."""

from __future__ import annotations

import torch

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.attention.archs import conditioned_rope_base
from conslaw_lite.families.mla.block import LatentAttention
from conslaw_lite.families.mla.laws import formula
from conslaw_lite.seeding import seeded

ROPE_DIM = 2  # d_r: one 2×2 RoPE block, shared by every head's query and the one key


def generic_block(
    d: int, n: int, k: int, k_v: int, d_r: int, d_c: int, d_cq: int, *,
    latent_norm: bool = False, norm_eps: float = 0.0, seed: int = 0,
) -> LatentAttention:
    """A float64 :class:`LatentAttention` at a generic point: seeded weights, gains from U(0.5, 1.5) (no two
    equal), and a RoPE base whose frequencies run from 1 to 1/3 rad per position (every block turns).

    Examples
    ========
    >>> generic_block(4, 2, 1, 1, 4, 2, 2).omega.tolist()  # d_r = 4: two blocks, ω = 1 and 1/3
    [1.0, 0.3333333333333333]
    """
    with seeded(seed):
        model = LatentAttention(
            d, n, k, k_v, d_r, d_c, d_cq, latent_norm=latent_norm, norm_eps=norm_eps,
            rope_base=conditioned_rope_base(d_r),
        )
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("gamma"):
                    p.uniform_(0.5, 1.5)
    return model.double()


def build_mla(options: ArchOptions, *, latent_norm: bool = False, norm_eps: float = 0.0) -> Built:
    """:func:`generic_block` with the count :func:`formula` predicts.

    ``--dim`` d (default 6), ``--heads`` n (2), ``--head-dim`` k = k_v (2), ``--hidden`` the
    latent ranks d_c = d_cq (3), ``--seq`` T (4); d_r = 2.

    Examples
    ========
    >>> built = build_mla(ArchOptions())
    >>> built.formula, built.input_shape
    (25, (4, 6))
    >>> build_mla(ArchOptions(hidden=1), latent_norm=True)
    Traceback (most recent call last):
    ...
    ValueError: q_rank = 1 under RMSNorm with ε = 0: the normalized latent is ±γ, ...
    """
    o = options.with_defaults(dim=6, heads=2, head_dim=2, hidden=3, seq=4)
    d, n, k, r = o.dim, o.heads, o.head_dim, o.hidden
    N, text = formula(d, n, k, k, ROPE_DIM, r, r, latent_norm=latent_norm, norm_eps=norm_eps)
    model = generic_block(d, n, k, k, ROPE_DIM, r, r, latent_norm=latent_norm, norm_eps=norm_eps, seed=o.seed)
    note = f"--hidden is the rank of both latents (d_c = d_cq = {r}); --head-dim is k = k_v = {k}; d_r = {ROPE_DIM}"
    if latent_norm and norm_eps > 0:
        note += f"; RMSNorm ε = {norm_eps:g}"
    return Built(model, (o.seq, d), N, text, note)


def _mla(name: str, summary: str, **kwargs) -> Arch:
    sizes = ("dim", "heads", "head_dim", "hidden", "seq")  # --hidden: the rank of both latents
    return Arch(name, summary, lambda options: build_mla(options, **kwargs), sizes)


ARCHITECTURES = (
    _mla(
        "mla",
        "multi-head latent attention (DeepSeek): latent Gram laws, UQ/UK and UV/O per head, a law per RoPE block",
    ),
    _mla(
        "mla-norm",
        "MLA with RMSNorm (ε > 0) on both latents: gain laws γ_j² − ‖columns‖² replace the latent Gram laws",
        latent_norm=True,
        norm_eps=1e-6,
    ),
    _mla("mla-norm-eps0", "MLA with RMSNorm, ε = 0, on both latents: also ‖DQ‖², ‖DKV‖²", latent_norm=True),
)
